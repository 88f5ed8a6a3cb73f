package certifier_test

import (
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// A member restarted after a leader change replays, from its Raft log, a
// span committed in the earlier term, whose versions its versioned log
// already holds behind versions of the later term. It must come back and
// apply the group's later commits (not stop on the span's older epoch).
func TestGroupMemberReplaysASpanOfAnEarlierTermAfterARestart(t *testing.T) {
	g, c, leader := groupAtFollower(t)
	frags := [][]byte{fragment(t, "public.big", 0, 50, 20), fragment(t, "public.big", 50, 50, 20)}
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	staged, err := stageThrough(t, c, txn, frags)
	if err != nil {
		t.Fatal(err)
	}
	if r := certifyStreamed(t, c, txn, 0, staged, tableWrite("public.big")); r.CommitVersion != 2 {
		t.Fatalf("streamed: %v", r)
	}
	g.waitDurable(2)
	g.stop(leader) // the next leader certifies in a later term
	if r := certifyWith(t, c, 2, 2, upsert("public.small", 1)); r.Decision != pb.Decision_DECISION_COMMIT || r.CommitVersion != 3 {
		t.Fatalf("at the next leader: %v", r)
	}
	g.waitDurable(3)
	follower := -1
	for i, s := range g.servers {
		if s != nil && s.Service.StatusNow().Role != "leader" {
			follower = i
		}
	}
	if follower < 0 {
		t.Fatal("no follower running")
	}
	g.stop(follower)
	g.start(follower) // replays the span head of the first term
	g.start(leader)
	if r := certifyWith(t, c, 3, 3, upsert("public.small", 2)); r.CommitVersion != 4 {
		t.Fatalf("after the restart: %v", r)
	}
	g.waitDurable(4)
}
