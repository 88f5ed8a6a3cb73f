package certifier

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
)

// Log retention against both orderers (single.go, group_retention.go),
// driven by hand: the rule runs when the test calls retain, never by
// itself (its interval is an hour).

// retentionTestConfig: segments of about 20 entries, a certification
// window of 40 versions, no byte bound, replicas away held for an hour.
func retentionTestConfig(dir string) Config {
	return Config{DataDir: dir, NoSync: true, SegmentBytes: 1 << 10, WindowVersions: 40,
		Retention: RetentionPolicy{Bytes: -1, ReplicaTimeout: time.Hour, Interval: time.Hour}}
}

func openRetentionService(t *testing.T, mode, dir string) *Service {
	t.Helper()
	cfg := retentionTestConfig(dir)
	if mode == "group" {
		node, err := certgroup.OpenNode(certgroup.NodeConfig{
			Core:    certgroup.Config{ID: 1, Decode: GroupEntryKeys, ElectionTicks: 10, WindowVersions: cfg.WindowVersions},
			DataDir: filepath.Join(dir, "raft"), Members: map[uint64]string{1: "127.0.0.1:1"}, NoSync: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Group = node
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for leads, _ := s.order.certifies(); !leads; leads, _ = s.order.certifies() {
		if time.Now().After(deadline) {
			s.Close()
			t.Fatal("the one member did not become leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s
}

// retainNow runs the rule and waits until the decision is applied (in a
// group, once Raft committed it). It returns the decision. The decision
// is told by its time in milliseconds, so the rule runs once the clock has
// passed the last decision's: in the same millisecond, the last one would
// be taken for it.
func retainNow(t *testing.T, s *Service) *pb.LogRetention {
	t.Helper()
	now := time.Now()
	for now.UnixMilli() <= s.retention.Load().GetDecidedUnixMs() {
		time.Sleep(time.Millisecond)
		now = time.Now()
	}
	s.order.retain(now)
	deadline := now.Add(10 * time.Second)
	for {
		if d := s.retention.Load(); d.GetDecidedUnixMs() == now.UnixMilli() {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retention decision of %v was not applied; last applied: %v", now, s.retention.Load())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The log keeps what a replica that is away still needs, across a restart
// (persisted by a single certifier, replicated and snapshotted by a
// group); once the replica is forgotten it goes, down to the certification
// window a single certifier keeps; a restart on the truncated log still
// restores the certification state (conflicts, re-sent transactions, the
// low-water mark); and a replica behind the log is refused, as needing a
// state transfer.
func TestRetentionKeepsWhatReplicasNeedAcrossRestarts(t *testing.T) {
	for _, mode := range []string{"single", "group"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			s := openRetentionService(t, mode, dir)
			defer func() { s.Close() }()
			restart := func() {
				t.Helper()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openRetentionService(t, mode, dir)
			}

			behind := s.replicas.opened("behind", "", 0)
			v := uint64(30)
			behind.report(&v, time.Now())
			behind.close() // away, at version 30
			ahead := s.replicas.opened("ahead", "", 0)
			var rows []string
			for i := range 300 {
				rows = append(rows, fmt.Sprint(i))
			}
			for i := 0; i < len(rows); i += 20 { // each from the version before it: inside the window
				commitRows(t, s, "r1", uint64(i+1), rows[i:i+20]...)
			}
			if d := s.DurableVersion(); d != 300 {
				t.Fatalf("set-up: durable version %d after 300 commits", d)
			}
			v = 300
			ahead.report(&v, time.Now())

			d := retainNow(t, s)
			if d.KeepFrom != 31 || d.LimitedBy != limitedByReplica || d.HeldBy != "behind" {
				t.Fatalf("decision %v: want the log kept from 31 for the replica away", d)
			}
			if first := s.log.FirstVersion(); first <= 1 || first > 31 {
				t.Fatalf("first version %d after retention, want old segments gone and 31 kept", first)
			}
			kept := s.log.FirstVersion()

			ahead.close()
			restart()
			if d := s.StatusNow().Retention; d.GetHeldBy() != "behind" {
				t.Fatalf("after a restart the last decision is %v, want the one holding the log for the replica away", d)
			}
			if d := retainNow(t, s); d.KeepFrom != 31 || d.HeldBy != "behind" || s.log.FirstVersion() != kept {
				t.Fatalf("after a restart: decision %v, first version %d (was %d): the replica away must still hold the log", d, s.log.FirstVersion(), kept)
			}

			if _, err := s.ForgetReplica(context.Background(), &pb.ForgetReplicaRequest{Name: "behind"}); err != nil {
				t.Fatal(err)
			}
			d = retainNow(t, s)
			wantFrom, wantBy := map[string]uint64{"single": 261, "group": 301}[mode], map[string]string{"single": limitedByWindow, "group": limitedByNone}[mode]
			if d.KeepFrom != wantFrom || d.LimitedBy != wantBy {
				t.Fatalf("decision %v once the replica away is forgotten: want kept from %d (%s)", d, wantFrom, wantBy)
			}
			if first := s.log.FirstVersion(); first <= 31 || first > d.KeepFrom {
				t.Fatalf("first version %d once the replica away is forgotten, want above 31 and at most %d", first, d.KeepFrom)
			}

			_, lowWaterMark := s.versions()
			restart()
			if v, lwm := s.versions(); v != 300 || lwm != lowWaterMark {
				t.Fatalf("restarted on the truncated log: version %d, low-water mark %d; want 300 and %d", v, lwm, lowWaterMark)
			}
			replies := decideAll(t, s, []certifying{
				s.prepare(encodedRequest(t, "r1", 295, 0, rows[294]), false), // re-sent: committed at 295
				s.prepare(encodedRequest(t, "r2", 1, 280, rows[289]), false), // row 289 changed at 290, after snapshot 280
				s.prepare(encodedRequest(t, "r2", 2, 200, "new"), false),     // a snapshot below the window
			})
			if q := replies[0].reply; q.Decision != pb.Decision_DECISION_COMMIT || q.CommitVersion != 295 {
				t.Errorf("re-sent r1/295: %v at %d, want its version 295", q.Decision, q.CommitVersion)
			}
			if q := replies[1].reply; q.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || q.ConflictVersion != 290 {
				t.Errorf("write of row 289 from snapshot 280: %v %v (conflict %d), want a conflict with 290", q.Decision, q.AbortReason, q.ConflictVersion)
			}
			if q := replies[2].reply; q.AbortReason != pb.AbortReason_ABORT_REASON_TOO_OLD {
				t.Errorf("a snapshot below the low-water mark %d: %v %v, want too old", lowWaterMark, q.Decision, q.AbortReason)
			}

			err := s.checkOpen(&pb.OpenSession{Replica: "behind", ReplicaVersion: 30})
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "needs state transfer") {
				t.Fatalf("a replica at version 30 opens a session on a log that starts at %d: %v, want FailedPrecondition, needs state transfer",
					s.log.FirstVersion(), err)
			}
			if err := s.checkOpen(&pb.OpenSession{Replica: "ahead", ReplicaVersion: 300}); err != nil {
				t.Fatalf("a replica at the last version: %v", err)
			}
		})
	}
}
