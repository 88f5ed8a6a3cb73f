package wal

import "testing"

// A log opened with NoSync syncs nothing until SyncAll, which syncs every
// segment and the directory once, and afterwards only what is new: the
// active segment, the segments closed since, the directory.
func TestSyncAllSyncsANoSyncLogOnceThenOnlyWhatIsNew(t *testing.T) {
	l := mustOpen(t, testOptions(t.TempDir(), 4096))
	defer mustClose(t, l)
	appendInBatches(t, l, 1, 400)
	if got := l.Fsyncs(); got != 0 {
		t.Fatalf("a NoSync log made %d fsyncs before SyncAll", got)
	}
	l.stateMu.RLock()
	segments := uint64(len(l.segments))
	l.stateMu.RUnlock()
	if segments < 3 {
		t.Fatalf("want several segments for the test, got %d", segments)
	}
	if err := l.SyncAll(); err != nil {
		t.Fatal(err)
	}
	if got := l.Fsyncs(); got != segments+1 {
		t.Fatalf("SyncAll made %d fsyncs, want %d (every segment and the directory)", got, segments+1)
	}
	if err := l.SyncAll(); err != nil {
		t.Fatal(err)
	}
	if got := l.Fsyncs() - (segments + 1); got != 2 {
		t.Fatalf("a second SyncAll made %d fsyncs, want 2 (the active segment and the directory)", got)
	}
}
