package wal

import (
	"errors"
	"testing"
)

// TestRestartAfterContinuesAtTheSnapshot: a log restarted after version 100
// (a certifier group member that installed a snapshot) takes version 101
// next, refuses reads below it, and reopens with its first segment there.
func TestRestartAfterContinuesAtTheSnapshot(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(dir, 4096))
	appendInBatches(t, l, 1, 30)
	if err := l.RestartAfter(100); err != nil {
		t.Fatal(err)
	}
	if l.LastVersion() != 100 || l.StartsAfter() != 100 || l.SizeBytes() != 0 {
		t.Fatalf("after restart: last %d, starts after %d, %d bytes", l.LastVersion(), l.StartsAfter(), l.SizeBytes())
	}
	if err := l.Append(makeEntries(101, 5)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l, 100); len(got) != 5 || got[0].Version != 101 {
		t.Fatalf("read after 100: %d entries", len(got))
	}
	if err := l.ReadFrom(50, func(Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("read after 50: %v, want ErrCompacted", err)
	}
	mustClose(t, l)
	l = mustOpen(t, testOptions(dir, 4096))
	defer mustClose(t, l)
	if l.FirstVersion() != 101 || l.LastVersion() != 105 || l.StartsAfter() != 100 {
		t.Fatalf("reopened: first %d last %d", l.FirstVersion(), l.LastVersion())
	}
}
