package certgroup

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// While the service answers BeforeCompact with ErrCompactLater (it is
// still writing the versions a snapshot covers), the member saves no
// snapshot and keeps its Raft log, and goes on certifying; the first
// snapshot after the service is ready is saved, and a restart from it
// holds every version.
func TestACompactionTheServiceIsNotReadyForWaitsForALaterSnapshot(t *testing.T) {
	dir := t.TempDir()
	var writing atomic.Bool
	writing.Store(true)
	var asked atomic.Int64
	open := func() *Node {
		n, err := OpenNode(NodeConfig{Core: Config{ID: 1, Decode: regressionDecode, SnapshotEntries: 3, CatchUpEntries: 1, ElectionTicks: 10, HeartbeatTicks: 1},
			DataDir: dir, Members: map[uint64]string{1: "127.0.0.1:1"}, TickInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		n.Start(Callbacks{BeforeCompact: func() error {
			asked.Add(1)
			if writing.Load() {
				return ErrCompactLater
			}
			return nil
		}})
		return n
	}
	n := open()
	defer func() { n.Close() }()
	ctx := context.Background()
	certifyRows(ctx, n, 1, 10)
	awaitApplied(t, n, 10)
	if asked.Load() == 0 {
		t.Fatal("set-up: no snapshot was due after 10 versions with SnapshotEntries 3")
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotFileName)); !os.IsNotExist(err) {
		t.Fatalf("a snapshot was saved while the service was not ready for it (stat: %v)", err)
	}
	writing.Store(false)
	certifyRows(ctx, n, 11, 20)
	awaitApplied(t, n, 20)
	// The loop saves a snapshot after it reported the versions applied.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := os.Stat(filepath.Join(dir, snapshotFileName))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot saved within 5 s once the service was ready: %v", err)
		}
	}
	n.Close()
	n = open()
	awaitApplied(t, n, 20)
}

func awaitApplied(t *testing.T, n *Node, version uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); n.Status().AppliedVersion < version; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("version %d not applied within 5 s: %+v", version, n.Status())
		}
	}
}
