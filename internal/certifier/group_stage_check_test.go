package certifier_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// A StageCopy's metadata (the leader's id and term) guards against a
// stale leader; it is not access control: anyone who reaches a member and
// names the current leader and term replaces the member's complete copy of
// a stage. The member checks its copy against the committed span's head
// (the fragments' size and checksum) before writing it: a copy of other
// fragments, even of the same count and size, is not written; the member
// says so and fetches the span from another member, so every member's
// versioned log holds the staged fragments, the same bytes.
func TestGroupMemberWithAForgedCopyFetchesTheCommittedSpan(t *testing.T) {
	g, c, leader := groupAtFollower(t)
	follower := (leader + 1) % 3
	frags := [][]byte{fragment(t, "public.big", 1000, 50, 20), fragment(t, "public.big", 1050, 50, 20)}
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	staged, err := stageThrough(t, c, txn, frags)
	if err != nil {
		t.Fatal(err)
	}
	// Other rows, the same count and sizes: only the checksum tells them apart.
	forged := [][]byte{fragment(t, "public.big", 2000, 50, 20), fragment(t, "public.big", 2050, 50, 20)}
	for k := range forged {
		if len(forged[k]) != len(frags[k]) {
			t.Fatalf("forged fragment %d has %d bytes, the staged one %d", k, len(forged[k]), len(frags[k]))
		}
	}
	// The leader's copy to this follower may still be running (Stage
	// returned once a majority held it): the forged one replaces it once
	// complete.
	var forgedReply *pb.StageReply
	waitFor(t, func() bool {
		var err error
		forgedReply, err = forgeStageCopy(t, g.addrs[follower], knownLeader(t, g.servers[follower].Service), txn, forged)
		if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "already being staged") {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
	if forgedReply.Fragments != staged.Fragments || forgedReply.Bytes != staged.Bytes {
		t.Fatalf("forged copy staged as %v, the leader's stage %v", forgedReply, staged)
	}

	reply := certifyStreamed(t, c, txn, 0, staged, tableWrite("public.big"))
	if reply.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("streamed: %v", reply)
	}
	g.waitDurable(reply.CommitVersion)
	g.checkSameSpan(txn, reply.FirstVersion, reply.CommitVersion, frags)
	const warning = "this member's copy of a committed span does not match the span's head"
	if out := g.logs[follower].String(); !strings.Contains(out, warning) || !strings.Contains(out, "fetched the committed span") {
		t.Fatalf("member %d's log does not say its copy did not match and that it fetched the span:\n%s", follower+1, out)
	}
	for i := range g.logs {
		if i != follower && strings.Contains(g.logs[i].String(), warning) {
			t.Fatalf("member %d, which holds the staged fragments, says its copy does not match", i+1)
		}
	}
}

// forgeStageCopy sends fragments for txn to the member at addr over
// StageCopy, naming the leader and term the member knows, as the leader's
// copy would, and returns the member's reply.
func forgeStageCopy(t *testing.T, addr string, member *pb.StatusReply, txn *pb.TxnID, fragments [][]byte) (*pb.StageReply, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	md := metadata.Pairs("tashkent-member", strconv.FormatUint(member.LeaderId, 10), "tashkent-term", strconv.FormatUint(member.Term, 10))
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer cancel()
	stream, err := pb.NewCertifierClient(conn).StageCopy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	end := &pb.StageEnd{Fragments: uint32(len(fragments))}
	for i, f := range fragments {
		end.Bytes += uint64(len(f))
		m := &pb.StageRequest{Fragment: f}
		if i == 0 {
			m.Txn = txn
		}
		if i == len(fragments)-1 {
			m.End = end
		}
		if err := stream.Send(m); err != nil {
			break // the member ended the stream: CloseAndRecv says why
		}
	}
	reply, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fmt.Errorf("StageCopy naming leader %d in term %d refused: %w", member.LeaderId, member.Term, err)
	}
	return reply, nil
}
