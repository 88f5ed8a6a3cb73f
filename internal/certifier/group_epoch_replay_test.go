package certifier_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certifier"
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

// A certifier group re-created from empty directories counts its Raft
// terms from 1 again, but its epochs are its base (a clock value fixed
// when it was created) plus the term: above every epoch of the group
// before it. A replica that holds the old group's versions 1..10 is
// refused by the new group, which committed other versions 1..10 (their
// terms alone would be the same).
func TestARecreatedGroupTellsItsHistoryFromTheOldGroups(t *testing.T) {
	oldGroup, _, oldHistory := groupOfTenVersions(t, "old")
	for _, s := range oldGroup {
		s.Close()
	}
	group, leader, history := groupOfTenVersions(t, "new")
	if len(oldHistory) == 0 || len(history) == 0 || history[0].Epoch <= oldHistory[len(oldHistory)-1].Epoch {
		t.Fatalf("the re-created group's epochs %v are not above the old group's %v", history, oldHistory)
	}
	err := openWith(t, group[leader], 10, oldHistory)
	if rw, ok := pb.RewindOf(err); !ok || rw.CommonVersion != 0 || !strings.HasPrefix(status.Convert(err).Message(), pb.NeedsRewind) ||
		!strings.Contains(err.Error(), "only up to version 0") {
		t.Fatalf("a re-created group admitted (or refused otherwise) a replica holding the old group's versions 1..10: %v", err)
	}
	if err := openWith(t, group[leader], 10, history); err != nil {
		t.Fatalf("the group refused its own history %v: %v", history, err)
	}
}

// groupOfTenVersions starts a group of three in empty directories,
// commits versions 1..10 through it, and returns it, its leader and the
// history of its log.
func groupOfTenVersions(t *testing.T, origin string) ([]*certifier.Server, int, []*pb.EpochRun) {
	t.Helper()
	servers, addrs := inProcessGroup(t, 3)
	leader := leaderOf(t, servers)
	commitReporting(t, clientAtFollower(t, addrs, leader), origin, 1, 10)
	waitFor(t, func() bool { return servers[leader].Service.DurableVersion() >= 10 })
	return servers, leader, historyOf(fetchAll(t, addrs[leader]))
}
