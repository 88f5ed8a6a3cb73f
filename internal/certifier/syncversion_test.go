package certifier_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// In a group, SyncVersion is answered by the leader with a version at or
// above every version it acknowledged before the call; a follower refuses
// with Unavailable and names the leader; the client, started at the
// follower, gets the leader's answer.
func TestGroupSyncVersionIsTheLeadersAfterEveryAcknowledgedCommit(t *testing.T) {
	servers, addrs := inProcessGroup(t, 3)
	leader := leaderOf(t, servers)
	follower := (leader + 1) % 3
	c := clientAtFollower(t, addrs, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for seq := uint64(1); seq <= 20; seq++ {
		reply, err := c.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: seq}, StartVersion: c.Delivered(),
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", int(seq))}}})
		if err != nil || reply.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("certify %d: %v %v", seq, reply, err)
		}
		v, err := c.SyncVersion(ctx)
		if err != nil || v < reply.CommitVersion {
			t.Fatalf("after version %d was acknowledged SyncVersion answers %d, %v", reply.CommitVersion, v, err)
		}
	}

	conn, err := grpc.NewClient(addrs[follower], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var trailer metadata.MD
	_, err = pb.NewCertifierClient(conn).SyncVersion(ctx, &pb.SyncVersionRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable || len(trailer.Get("tashkent-leader")) != 1 || trailer.Get("tashkent-leader")[0] != addrs[leader] {
		t.Fatalf("SyncVersion on a follower: %v, trailer %v; want Unavailable naming the leader %s", err, trailer, addrs[leader])
	}
}
