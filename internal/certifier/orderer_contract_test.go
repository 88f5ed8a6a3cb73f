package certifier

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// The orderer contract (orderer.go), run against both orderers: a single
// certifier's log, and a one-member certifier group with its real Raft
// log in this process. What differs between them by design (a follower's
// redirect, a lost leadership, a Fetch below a snapshot) is tested in the
// group's own tests.

// backend opens a service on dir, reopening what an earlier one left
// there.
type backend struct {
	name string
	open func(t *testing.T, dir string) *Service
}

var backends = []backend{
	{"single", func(t *testing.T, dir string) *Service {
		s, err := Open(Config{DataDir: dir, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"group", openOneMemberGroup},
}

// openOneMemberGroup opens a group of one member, which elects itself,
// and waits until it leads.
func openOneMemberGroup(t *testing.T, dir string) *Service {
	t.Helper()
	return openOneMemberGroupWith(t, dir, certgroup.Config{}, Config{})
}

// openOneMemberGroupWith is openOneMemberGroup with the group and the
// service configured as core and cfg say, but for the member's id, its
// decoder and election ticks, and the service's directory and group.
func openOneMemberGroupWith(t *testing.T, dir string, core certgroup.Config, cfg Config) *Service {
	t.Helper()
	core.ID, core.Decode, core.ElectionTicks = 1, GroupEntryKeys, 10
	node, err := certgroup.OpenNode(certgroup.NodeConfig{
		Core:    core,
		DataDir: filepath.Join(dir, "raft"), Members: map[uint64]string{1: "127.0.0.1:1"}, NoSync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Group = dir, node
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.StatusNow().Role != "leader" {
		if time.Now().After(deadline) {
			s.Close()
			t.Fatal("the one member did not become leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s
}

// forEachBackend runs test against a fresh service of each orderer;
// restart closes the service and opens it again on the same directory.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend, s *Service, restart func() *Service)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			s := b.open(t, dir)
			defer func() { s.Close() }()
			restart := func() *Service {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = b.open(t, dir)
				return s
			}
			test(t, b, s, restart)
		})
	}
}

func encodedRequest(t testing.TB, origin string, seq, start uint64, rows ...string) *pb.CertifyRequestEncoded {
	t.Helper()
	ws := &pb.Writeset{}
	for _, r := range rows {
		ws.Changes = append(ws.Changes, &pb.Change{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(r)})
	}
	b, err := proto.Marshal(ws)
	if err != nil {
		t.Fatal(err)
	}
	return &pb.CertifyRequestEncoded{RequestId: seq, Txn: &pb.TxnID{Origin: origin, Seq: seq}, StartVersion: start, Writeset: b}
}

// decideAll decides prepared requests through the service's orderer and
// answers them, as a stream does; it fails the test if the orderer does
// not decide them all.
func decideAll(t testing.TB, s *Service, batch []certifying) []queued {
	t.Helper()
	n, err := s.order.decide(context.Background(), batch)
	if err != nil || n != len(batch) {
		t.Fatalf("decided %d of %d requests: %v", n, len(batch), err)
	}
	out := make([]queued, len(batch))
	for i := range batch {
		out[i] = queued{ticket: batch[i].ticket, tenure: batch[i].tenure, received: time.Now()}
		out[i].reply, out[i].waitFor = s.answer(&batch[i])
	}
	return out
}

// commitRows certifies one transaction per row, each against the current
// version, and returns their replies once they are durable and may be sent.
func commitRows(t testing.TB, s *Service, origin string, firstSeq uint64, rows ...string) []queued {
	t.Helper()
	var batch []certifying
	for i, r := range rows {
		batch = append(batch, s.prepare(encodedRequest(t, origin, firstSeq+uint64(i), s.Version(), r), false))
	}
	out := decideAll(t, s, batch)
	awaitSendable(t, s, out)
	return out
}

// awaitSendable waits until replies' dependencies are durable and the
// orderer lets them go.
func awaitSendable(t testing.TB, s *Service, replies []queued) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range replies {
		if _, err := s.durable.wait(ctx, q.waitFor); err != nil {
			t.Fatalf("version %d did not become durable: %v", q.waitFor, err)
		}
	}
	if err := s.order.maySend(ctx, replies); err != nil {
		t.Fatalf("replies decided in this leadership may not be sent: %v", err)
	}
}

// logged reads the durable entries (after, upTo] as delivery does.
func logged(t testing.TB, s *Service, after, upTo uint64) []*pb.LogEntry {
	t.Helper()
	raw, err := s.entriesBetween(nil, after, upTo)
	if err != nil {
		t.Fatal(err)
	}
	var out []*pb.LogEntry
	for _, b := range raw {
		e, err := logentry.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// One message is decided in order: a conflicting pair in it commits the
// first and aborts the second; a request refused before the state machine
// keeps its reason; and an overloaded request is aborted unless its
// transaction committed, in which case it gets its version and must still
// wait for that version to be durable.
func TestOrdererDecidesAMessageInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ backend, s *Service, _ func() *Service) {
		batch := []certifying{
			s.prepare(encodedRequest(t, "r1", 1, 0, "1"), false),
			s.prepare(encodedRequest(t, "r1", 2, 0, "2", "1"), false), // same snapshot, row 1 again
			s.prepare(&pb.CertifyRequestEncoded{RequestId: 3, Txn: &pb.TxnID{Origin: "r1", Seq: 3}}, false),
		}
		replies := decideAll(t, s, batch)
		want := []struct {
			decision pb.Decision
			reason   pb.AbortReason
			waitFor  uint64
		}{
			{pb.Decision_DECISION_COMMIT, 0, 1},
			{pb.Decision_DECISION_ABORT, pb.AbortReason_ABORT_REASON_CONFLICT, 0},
			{pb.Decision_DECISION_ABORT, pb.AbortReason_ABORT_REASON_INVALID, 0},
		}
		for i, w := range want {
			reply, waitFor := replies[i].reply, replies[i].waitFor
			if reply.Decision != w.decision || reply.AbortReason != w.reason || waitFor != w.waitFor || reply.RequestId != uint64(i+1) {
				t.Fatalf("request %d: %v %v wait for %d (%s); want %v %v wait for %d", i+1,
					reply.Decision, reply.AbortReason, waitFor, reply.Detail, w.decision, w.reason, w.waitFor)
			}
		}
		if replies[1].reply.ConflictVersion != 1 {
			t.Errorf("the conflict names version %d, want 1", replies[1].reply.ConflictVersion)
		}
		awaitSendable(t, s, replies)
		overloaded := decideAll(t, s, []certifying{
			s.prepare(encodedRequest(t, "r1", 1, 0, "1"), true), // committed at 1: its version
			s.prepare(encodedRequest(t, "r1", 9, 1, "9"), true), // new: refused
		})
		if q := overloaded[0]; q.reply.Decision != pb.Decision_DECISION_COMMIT || q.reply.CommitVersion != 1 || q.waitFor != 1 {
			t.Fatalf("overloaded retry of a committed transaction: %v at %d, wait for %d; want commit at 1, wait for 1", q.reply.Decision, q.reply.CommitVersion, q.waitFor)
		}
		if q := overloaded[1]; q.reply.AbortReason != pb.AbortReason_ABORT_REASON_OVERLOADED || q.waitFor != 0 {
			t.Fatalf("overloaded new transaction: %v %v, wait for %d", q.reply.Decision, q.reply.AbortReason, q.waitFor)
		}
		if v, _ := s.versions(); v != 1 {
			t.Errorf("version %d after one commit, want 1", v)
		}
	})
}

// Commits get consecutive versions in the order decided, across messages;
// each is durable, and delivered with its own transaction, before its
// reply may go out; a re-sent transaction gets its version back and adds
// nothing; SyncVersion covers every version acknowledged.
func TestOrdererOrdersAndPersistsCommits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ backend, s *Service, _ func() *Service) {
		var rows []string
		for i := range 20 {
			rows = append(rows, fmt.Sprint(i))
		}
		first := commitRows(t, s, "r1", 1, rows[:5]...)
		second := commitRows(t, s, "r2", 1, rows[5:]...)
		for i, q := range append(first, second...) {
			if q.reply.Decision != pb.Decision_DECISION_COMMIT || q.reply.CommitVersion != uint64(i+1) {
				t.Fatalf("transaction %d: %v at %d, want commit at %d", i, q.reply.Decision, q.reply.CommitVersion, i+1)
			}
		}
		if d := s.DurableVersion(); d != 20 {
			t.Fatalf("durable version %d, want 20", d)
		}
		entries := logged(t, s, 0, 20)
		for i, e := range entries {
			origin, seq := "r1", uint64(i+1)
			if i >= 5 {
				origin, seq = "r2", uint64(i-4)
			}
			if e.Version != uint64(i+1) || e.Txn.Origin != origin || e.Txn.Seq != seq {
				t.Fatalf("entry %d: version %d of %s/%d, want version %d of %s/%d", i, e.Version, e.Txn.Origin, e.Txn.Seq, i+1, origin, seq)
			}
		}
		if len(entries) != 20 {
			t.Fatalf("%d entries logged, want 20", len(entries))
		}
		again := decideAll(t, s, []certifying{s.prepare(encodedRequest(t, "r1", 3, 0, rows[2]), false)})
		if q := again[0]; q.reply.Decision != pb.Decision_DECISION_COMMIT || q.reply.CommitVersion != 3 {
			t.Fatalf("re-sent transaction r1/3: %v at %d, want its version 3", q.reply.Decision, q.reply.CommitVersion)
		}
		if v, _ := s.versions(); v != 20 {
			t.Fatalf("version %d after a re-sent transaction, want 20", v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if v, err := s.order.syncVersion(ctx); err != nil || v < 20 {
			t.Fatalf("sync version %d (%v), want at least 20", v, err)
		}
		if err := s.order.checkFetch(0); err != nil {
			t.Fatalf("a Fetch from the start: %v", err)
		}
	})
}

// noTrailerStream is a stream admit may accept; a refusal would set a
// trailer, which it does not expect.
type noTrailerStream struct{ grpc.ServerStream }

func (noTrailerStream) Context() context.Context { return context.Background() }

// A serving orderer admits a replica at its durable version, for a
// lifetime that lasts while it serves, and describes itself in Status.
func TestOrdererAdmitsAStreamAndDescribesItself(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, s *Service, _ func() *Service) {
		commitRows(t, s, "r1", 1, "a", "b")
		lifetime, _, err := s.order.admit(noTrailerStream{}, &pb.OpenSession{Replica: "r1", ReplicaVersion: 2})
		if err != nil {
			t.Fatalf("admit a replica at the durable version: %v", err)
		}
		if lifetime.Err() != nil {
			t.Fatalf("the stream's lifetime is over at once: %v", lifetime.Err())
		}
		st := s.StatusNow()
		if want := map[string]string{"single": "single", "group": "leader"}[b.name]; st.Role != want {
			t.Errorf("role %q, want %q", st.Role, want)
		}
		if st.Version != 2 || st.DurableVersion != 2 {
			t.Errorf("status: version %d, durable %d; want 2 and 2", st.Version, st.DurableVersion)
		}
	})
}

// After a restart the orderer holds what it made durable: the versions go
// on from the last one, a re-sent transaction still gets its version, and
// a write against a snapshot older than a committed change still
// conflicts.
func TestOrdererRecoversWhatItMadeDurable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ backend, s *Service, restart func() *Service) {
		commitRows(t, s, "r1", 1, "a", "b", "c")
		s = restart()
		if v, _ := s.versions(); v != 3 || s.DurableVersion() != 3 {
			t.Fatalf("after a restart: version %d, durable %d; want 3 and 3", v, s.DurableVersion())
		}
		replies := decideAll(t, s, []certifying{
			s.prepare(encodedRequest(t, "r1", 2, 0, "b"), false), // re-sent
			s.prepare(encodedRequest(t, "r2", 1, 1, "c"), false), // c changed at 3, after snapshot 1
			s.prepare(encodedRequest(t, "r2", 2, 3, "d"), false), // new
		})
		if q := replies[0].reply; q.Decision != pb.Decision_DECISION_COMMIT || q.CommitVersion != 2 {
			t.Errorf("re-sent r1/2: %v at %d, want its version 2", q.Decision, q.CommitVersion)
		}
		if q := replies[1].reply; q.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || q.ConflictVersion != 3 {
			t.Errorf("write of c from snapshot 1: %v %v (conflict %d), want a conflict with 3", q.Decision, q.AbortReason, q.ConflictVersion)
		}
		if q := replies[2].reply; q.Decision != pb.Decision_DECISION_COMMIT || q.CommitVersion != 4 {
			t.Errorf("new transaction: %v at %d, want commit at 4", q.Decision, q.CommitVersion)
		}
		awaitSendable(t, s, replies)
		if entries := logged(t, s, 0, 4); len(entries) != 4 || entries[3].Txn.Origin != "r2" {
			t.Errorf("log after the restart: %v", entries)
		}
	})
}
