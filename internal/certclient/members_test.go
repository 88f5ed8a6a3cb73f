package certclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/netutil"
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

// follower refuses a Stage as a group member that does not lead: at once,
// Unavailable, the leader's address in the trailer.
type follower struct {
	pb.UnimplementedCertifierServer
	leader string
}

func (f follower) Stage(stream pb.Certifier_StageServer) error {
	stream.SetTrailer(metadata.Pairs(leaderTrailer, f.leader))
	return status.Error(codes.Unavailable, "not the leader")
}

// leader accepts a Stage: headers first, then the fragments, counted.
type leader struct {
	pb.UnimplementedCertifierServer
}

func (leader) Stage(stream pb.Certifier_StageServer) error {
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	reply := &pb.StageReply{}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(reply)
		}
		if err != nil {
			return err
		}
		reply.Fragments++
		reply.Bytes += uint64(len(msg.Fragment))
	}
}

// TestStageFollowsTheLeaderBeforeItSendsAFragment: a Stage opened on a
// member that does not lead goes to the leader it names, before any
// fragment is sent, and the leader becomes the current member.
func TestStageFollowsTheLeaderBeforeItSendsAFragment(t *testing.T) {
	leaderAddr := serve(t, leader{})
	followerAddr := serve(t, follower{leader: leaderAddr})
	m, err := newMembers(followerAddr+","+leaderAddr, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, end, err := openStage(ctx, m)
	if err != nil {
		t.Fatalf("open the stage: %v", err)
	}
	defer end()
	for _, f := range []string{"ab", "cde"} {
		if err := stream.Send(&pb.StageRequest{Txn: &pb.TxnID{Origin: "r1", Seq: 1}, Fragment: []byte(f)}); err != nil {
			t.Fatal(err)
		}
	}
	reply, err := stream.CloseAndRecv()
	if err != nil || reply.Fragments != 2 || reply.Bytes != 5 {
		t.Fatalf("stage: %v, %v; want 2 fragments of 5 bytes at the leader", reply, err)
	}
	if m.current() != leaderAddr {
		t.Fatalf("current member %s, want the leader %s", m.current(), leaderAddr)
	}

	// No member names a leader: the stage is unavailable once each was
	// asked.
	alone, err := newMembers(serve(t, follower{})+","+serve(t, follower{}), []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.close()
	if _, _, err := openStage(ctx, alone); !errors.Is(err, ErrStageUnavailable) {
		t.Fatalf("no leader named: %v, want ErrStageUnavailable", err)
	}
}

// TestStagePassesAMemberThatNamesNoLeader: right after a leader died the
// current member may be down, or refuse naming no leader (an election
// under way); the stage goes on to the next member, the leader, rather
// than failing.
func TestStagePassesAMemberThatNamesNoLeader(t *testing.T) {
	leaderAddr := serve(t, leader{})
	for name, first := range map[string]string{
		"refuses naming no leader": serve(t, follower{}),
		"down":                     deadAddr(t),
	} {
		m, err := newMembers(first+","+leaderAddr, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, end, err := openStage(ctx, m)
		if err != nil {
			t.Fatalf("first member %s: %v", name, err)
		}
		if err := stream.Send(&pb.StageRequest{Txn: &pb.TxnID{Origin: "r1", Seq: 1}, Fragment: []byte("ab")}); err != nil {
			t.Fatal(err)
		}
		if reply, err := stream.CloseAndRecv(); err != nil || reply.Fragments != 1 {
			t.Fatalf("first member %s: stage %v, %v; want it at the leader", name, reply, err)
		}
		if m.current() != leaderAddr {
			t.Fatalf("first member %s: current member %s, want the leader %s", name, m.current(), leaderAddr)
		}
		end()
		cancel()
		m.close()
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	port, err := netutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}
