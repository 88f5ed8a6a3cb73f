package certclient

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// compactedMember refuses every Fetch as a group member that caught up by
// snapshot does; fullMember answers with one message.
type compactedMember struct {
	pb.UnimplementedCertifierServer
}

func (compactedMember) Fetch(*pb.FetchRequest, pb.Certifier_FetchServer) error {
	return status.Error(codes.FailedPrecondition, "versions up to 100 are compacted on this member; fetch from another member")
}

type fullMember struct {
	pb.UnimplementedCertifierServer
}

func (fullMember) Fetch(_ *pb.FetchRequest, s pb.Certifier_FetchServer) error {
	return s.Send(&pb.FetchReply{Entries: [][]byte{[]byte("entry")}})
}

func serve(t *testing.T, srv pb.CertifierServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterCertifierServer(g, srv)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestFetchAsksTheNextMemberWhenCompacted: a Fetch refused with
// FailedPrecondition before anything was delivered goes to the next
// member; the current member (maybe the leader) stays current.
func TestFetchAsksTheNextMemberWhenCompacted(t *testing.T) {
	compacted, full := serve(t, compactedMember{}), serve(t, fullMember{})
	m, err := newMembers(compacted+","+full, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	stream, err := currentAPI{m}.Fetch(context.Background(), &pb.FetchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := stream.Recv()
	if err != nil || len(reply.Entries) != 1 {
		t.Fatalf("Fetch through the members: %v, %v", reply, err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of the stream: %v", err)
	}
	if m.current() != compacted {
		t.Fatalf("the current member moved to %s", m.current())
	}

	// With every member compacted, the refusal reaches the caller.
	only, err := newMembers(compacted+","+serve(t, compactedMember{}), []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())})
	if err != nil {
		t.Fatal(err)
	}
	defer only.close()
	stream, err = currentAPI{only}.Fetch(context.Background(), &pb.FetchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("every member compacted: %v, want FailedPrecondition", err)
	}
}
