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

// A snapshot carries the last retention decision applied, the group's
// base and the epoch at its version; snapshots of the formats before them
// still read, without them (base 0, epoch not known).
func TestSnapshotCarriesTheRetentionDecisionTheBaseAndTheEpoch(t *testing.T) {
	state := certification.New(certification.Config{}, 7).Marshal()
	addrs := map[uint64]string{1: "a", 2: "bb"}
	data := encodeCoreSnapshot(coreSnapshot{version: 7, addrs: addrs, retention: []byte("decision"), base: 1 << 50, epoch: 1<<50 + 3, state: state})
	got, err := decodeCoreSnapshot(data)
	if err != nil || got.version != 7 || got.addrs[2] != "bb" || string(got.retention) != "decision" ||
		got.base != 1<<50 || got.epoch != 1<<50+3 || !bytes.Equal(got.state, state) {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	none, err := decodeCoreSnapshot(encodeCoreSnapshot(coreSnapshot{version: 7, addrs: addrs, state: state}))
	if err != nil || none.retention != nil || none.base != 0 || none.epoch != 0 || !bytes.Equal(none.state, state) {
		t.Fatalf("without a decision, base or epoch: %+v, %v", none, err)
	}
	current := encodeCoreSnapshot(coreSnapshot{version: 7, addrs: addrs, retention: []byte("decision"), state: state})
	// Format 2: the same without base and epoch (two zero bytes).
	v2 := append([]byte{coreSnapshotFormatV2}, current[1:len(current)-len(state)-2]...)
	v2 = append(v2, state...)
	old2, err := decodeCoreSnapshot(v2)
	if err != nil || old2.version != 7 || string(old2.retention) != "decision" || old2.base != 0 || old2.epoch != 0 || !bytes.Equal(old2.state, state) {
		t.Fatalf("format 2: %+v, %v", old2, err)
	}
	// Format 1: without the decision's length and bytes either.
	plain := encodeCoreSnapshot(coreSnapshot{version: 7, addrs: addrs, state: state})
	v1 := append([]byte{coreSnapshotFormatV1}, plain[1:len(plain)-len(state)-3]...) // drop the zero length, base, epoch
	v1 = append(v1, state...)
	old, err := decodeCoreSnapshot(v1)
	if err != nil || old.version != 7 || old.addrs[1] != "a" || old.retention != nil || !bytes.Equal(old.state, state) {
		t.Fatalf("format 1: %+v, %v", old, err)
	}
	if _, err := decodeCoreSnapshot(encodeCoreSnapshot(coreSnapshot{version: 7, addrs: addrs, retention: []byte("decision")})[:12]); err == nil {
		t.Fatal("a truncated decision decodes")
	}
	if _, err := decodeCoreSnapshot(append([]byte{coreSnapshotFormat + 1}, current[1:]...)); err == nil {
		t.Fatal("a snapshot of an unknown format decodes")
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
