package certgroup

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/certification"
)

// A snapshot carries the last retention decision applied; a snapshot of
// the format before it still reads, without one.
func TestSnapshotCarriesTheRetentionDecision(t *testing.T) {
	state := certification.New(certification.Config{}, 7).Marshal()
	addrs := map[uint64]string{1: "a", 2: "bb"}
	data := encodeCoreSnapshot(7, addrs, []byte("decision"), state)
	got, err := decodeCoreSnapshot(data)
	if err != nil || got.version != 7 || got.addrs[2] != "bb" || string(got.retention) != "decision" || !bytes.Equal(got.state, state) {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	none, err := decodeCoreSnapshot(encodeCoreSnapshot(7, addrs, nil, state))
	if err != nil || none.retention != nil || !bytes.Equal(none.state, state) {
		t.Fatalf("without a decision: %+v, %v", none, err)
	}
	// Format 1: the same without the decision's length and bytes.
	v1 := append([]byte{coreSnapshotFormatV1}, encodeCoreSnapshot(7, addrs, nil, state)[1:]...)
	v1 = append(v1[:len(v1)-len(state)-1], state...) // drop the zero length
	old, err := decodeCoreSnapshot(v1)
	if err != nil || old.version != 7 || old.addrs[1] != "a" || old.retention != nil || !bytes.Equal(old.state, state) {
		t.Fatalf("format 1: %+v, %v", old, err)
	}
	if _, err := decodeCoreSnapshot(encodeCoreSnapshot(7, addrs, []byte("decision"), nil)[:12]); err == nil {
		t.Fatal("a truncated decision decodes")
	}
}

// retentionSeen collects the decisions a node reports.
type retentionSeen struct {
	mu   sync.Mutex
	seen []string
}

func (r *retentionSeen) add(d []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, string(d))
}

func (r *retentionSeen) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// Retention decisions are applied in log order between certified batches
// (the last of a Ready batch is reported: each decision holds all there
// is to know), never taken for versions, and a member restarted from a
// snapshot taken after the last one gets it back at Start.
func TestRetentionDecisionsAreReplicatedAndSnapshotted(t *testing.T) {
	dir := t.TempDir()
	seen := &retentionSeen{}
	open := func() *Node {
		n, err := OpenNode(NodeConfig{Core: Config{ID: 1, Decode: regressionDecode, SnapshotEntries: 3, CatchUpEntries: 1, ElectionTicks: 10, HeartbeatTicks: 1},
			DataDir: dir, Members: map[uint64]string{1: "127.0.0.1:1"}, TickInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		n.Start(Callbacks{Retention: seen.add})
		return n
	}
	n := open()
	ctx := context.Background()
	propose := func(d string) {
		for deadline := time.Now().Add(5 * time.Second); n.ProposeRetention([]byte(d)) != nil; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no leader to propose to")
			}
		}
	}
	propose("d1")
	certifyRows(ctx, n, 1, 5)
	propose("d2")
	certifyRows(ctx, n, 6, 10)
	awaitLastSeen(t, seen, "d2")
	if got := fmt.Sprint(seen.get()); got != "[d1 d2]" && got != "[d2]" {
		t.Fatalf("decisions reported: %s, want d1 then d2, or d2 alone (both applied in one batch)", got)
	}
	if v, _ := n.Versions(); v != 10 {
		t.Fatalf("version %d after 10 commits: a decision was taken for a version", v)
	}
	for deadline := time.Now().Add(5 * time.Second); n.Status().AppliedVersion < 10; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("set-up: versions 1..10 not applied within 5 s: %+v", n.Status())
		}
	}
	if st := n.Status(); st.SnapshotIndex == 0 {
		t.Fatalf("set-up: no snapshot taken: %+v", st)
	}
	n.Close()

	seen.seen = nil
	n = open()
	defer n.Close()
	if got := seen.get(); len(got) == 0 || got[0] != "d2" {
		t.Fatalf("decisions reported on a restart from a snapshot taken after d2: %q", got)
	}
}

func awaitLastSeen(t *testing.T, seen *retentionSeen, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := seen.get()
		if len(got) > 0 && got[len(got)-1] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions applied: %q, want the last to be %q", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
