package certifier_test

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

// In a group every member removes the same versions of its versioned log,
// as the leader decided; a replica that is away holds the log also after
// the leader changes (the new leader learned of it through Raft); once it
// is forgotten on every member, the log lets go of what it needed.
func TestGroupMembersTruncateAlikeAndANewLeaderWaitsForAReplicaAway(t *testing.T) {
	servers, addrs := inProcessGroupWith(t, 3, certifier.Config{SegmentBytes: 1 << 10,
		Retention: certifier.RetentionPolicy{Bytes: -1, ReplicaTimeout: time.Hour, Interval: 50 * time.Millisecond}})
	leader := leaderOf(t, servers)
	target := strings.Join(addrs, ",")
	a, err := certclient.New(certclient.Options{Target: target, Replica: "a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	seq := uint64(0)
	commit := func(n int) {
		t.Helper()
		commitReporting(t, a, "a", seq+1, n)
		seq += uint64(n)
	}
	commit(100)

	// The replica away reports version 100, then goes.
	applied := uint64(100)
	behind, err := certclient.New(certclient.Options{Target: target, Replica: "behind", ReplicaVersion: 100, AppliedVersion: &applied})
	if err != nil {
		t.Fatal(err)
	}
	awaitMembers(t, servers, "the leader hears of the replica at version 100", func(i int, st *pb.StatusReply) bool {
		return i != leader || listsAt(st, "behind", 100)
	})
	behind.Close()
	commit(200)
	heldByBehind := func(_ int, st *pb.StatusReply) bool {
		return st.Retention.GetHeldBy() == "behind" && st.Retention.GetKeepFrom() == 101 && st.LogFirstVersion > 1 && st.LogFirstVersion <= 101
	}
	awaitMembers(t, servers, "every member keeps the log from 101 for the replica away, and removed older segments", heldByBehind)
	awaitMembers(t, servers, "every member applied the leader's last decision and keeps the same versions", func(_ int, st *pb.StatusReply) bool {
		lead := servers[leader].Service.StatusNow()
		return st.Retention.GetDecidedUnixMs() == lead.Retention.GetDecidedUnixMs() && st.LogFirstVersion == lead.LogFirstVersion
	})

	servers[leader].Close()
	servers[leader] = nil
	changed := time.Now()
	next := leaderOf(t, servers)
	commit(100)
	awaitMembers(t, servers, "the new leader's decisions still hold the log for the replica away", func(i int, st *pb.StatusReply) bool {
		return heldByBehind(i, st) && st.Retention.GetDecidedUnixMs() > changed.UnixMilli()
	})
	if next == leader {
		t.Fatal("the closed member still leads")
	}

	for _, s := range servers {
		if s != nil {
			if _, err := s.Service.ForgetReplica(context.Background(), &pb.ForgetReplicaRequest{Name: "behind"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit(1) // a change of progress makes the leader decide again
	awaitMembers(t, servers, "once the replica is forgotten, the log lets go of what it needed", func(_ int, st *pb.StatusReply) bool {
		return st.Retention.GetHeldBy() != "behind" && st.LogFirstVersion > 101
	})
}

// commitReporting commits n transactions of origin, numbered from seq
// on, through c, each against the version c was delivered, and reports
// each one's version as applied, as an agent does.
func commitReporting(t *testing.T, c *certclient.Client, origin string, seq uint64, n int) {
	t.Helper()
	for end := seq + uint64(n); seq < end; seq++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		reply, err := c.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: origin, Seq: seq}, StartVersion: c.Delivered(),
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", int(seq))}}})
		cancel()
		if err != nil || reply.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("certify %s/%d: %v %v", origin, seq, reply, err)
		}
		c.SetAppliedVersion(reply.CommitVersion)
	}
}

// listsAt reports whether a status lists replica name at version v.
func listsAt(st *pb.StatusReply, name string, v uint64) bool {
	for _, r := range st.Replicas {
		if r.Name == name && r.AppliedVersion == v && r.HeardUnixMs != 0 {
			return true
		}
	}
	return false
}

// awaitMembers waits until ok holds for every member still running.
func awaitMembers(t *testing.T, servers []*certifier.Server, what string, ok func(i int, st *pb.StatusReply) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		all := true
		var last *pb.StatusReply
		for i, s := range servers {
			if s == nil {
				continue
			}
			if last = s.Service.StatusNow(); !ok(i, last) {
				all = false
				break
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s; a member reports first version %d, retention %v", what, last.LogFirstVersion, last.Retention)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
