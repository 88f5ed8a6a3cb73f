package wal

import (
	"os"
	"testing"
	"time"
)

// The background goroutine keeps the active segment zeroed ahead of the
// records (preallocAheadBytes), so appends that stay inside that headroom
// never zero, never fsync anything but their data: the zeroing is off the
// append path.
func TestZeroingRunsAheadOfTheWriter(t *testing.T) {
	opts := testOptions(t.TempDir(), 64<<20)
	opts.NoSync = false
	l := mustOpen(t, opts)
	defer mustClose(t, l)
	mustAppend(t, l, makeEntries(1, 1))
	waitFor(t, func() bool { return l.zeroed.allocated.Load()-l.zeroed.written.Load() >= preallocAheadBytes })

	// Appends of about half a MiB: each stays inside the headroom the
	// goroutine restores after the previous one.
	payload := make([]byte, preallocChunkBytes/2)
	for i := range 8 {
		waitFor(t, func() bool { return l.zeroed.allocated.Load()-l.zeroed.written.Load() >= preallocAheadBytes })
		before, byWriter := l.Stats(), l.zeroed.byWriter.Load()
		v := uint64(2 + i)
		if err := l.Append([]Entry{{Version: v, Payload: payload}}); err != nil {
			t.Fatal(err)
		}
		after := l.Stats()
		if after.Fsyncs-before.Fsyncs != 1 {
			t.Fatalf("append %d: %d fsyncs, want 1 (its data only)", i, after.Fsyncs-before.Fsyncs)
		}
		if n := l.zeroed.byWriter.Load() - byWriter; n != 0 {
			t.Fatalf("append %d zeroed synchronously %d times", i, n)
		}
	}
	waitFor(t, func() bool { return l.zeroed.allocated.Load()-l.zeroed.written.Load() >= preallocAheadBytes })

	// The file is zeroed ahead, and only as far as preallocAheadBytes
	// beyond the records, rounded to chunks.
	info, err := os.Stat(l.zeroed.file.Name())
	if err != nil {
		t.Fatal(err)
	}
	written := l.zeroed.written.Load()
	if info.Size() < written+preallocAheadBytes || info.Size() > written+preallocAheadBytes+preallocChunkBytes {
		t.Fatalf("segment file is %d bytes for %d bytes of records; want %d ahead, within a chunk", info.Size(), written, preallocAheadBytes)
	}
	all := readAll(t, l, 0)
	if len(all) != 9 || all[8].Version != 9 || len(all[8].Payload) != len(payload) {
		t.Fatalf("read back %d entries", len(all))
	}
}

// Zeros written ahead are never taken for damage: reopening finds every
// entry, and appends go on after them.
func TestReopenAfterZeroingAhead(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir, 64<<20)
	opts.NoSync = false
	l := mustOpen(t, opts)
	mustAppend(t, l, makeEntries(1, 50))
	waitFor(t, func() bool { return l.Stats().ZeroedChunks >= 2 })
	mustClose(t, l)

	l = mustOpen(t, opts)
	defer mustClose(t, l)
	checkEntries(t, readAll(t, l, 0), 1, 50)
	mustAppend(t, l, makeEntries(51, 10))
	checkEntries(t, readAll(t, l, 0), 1, 60)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
