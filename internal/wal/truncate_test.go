package wal

import (
	"fmt"
	"testing"
)

// TruncateAfter cuts the log after any version, inside the last segment
// or several segments back, durably: reads end there, appends continue
// there, and a reopened log holds the same.
func TestTruncateAfterCutsTheTailDurably(t *testing.T) {
	const last = 60
	for _, cut := range []uint64{59, 40, 17, 1, 0, last} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			dir := buildLog(t, 300, last) // a few records per segment
			l := mustOpen(t, testOptions(dir, 300))
			if err := l.TruncateAfter(cut); err != nil {
				t.Fatalf("TruncateAfter(%d): %v", cut, err)
			}
			if l.LastVersion() != cut {
				t.Fatalf("last version %d after cutting after %d", l.LastVersion(), cut)
			}
			checkEntries(t, readAll(t, l, 0), 1, cut)
			appendInBatches(t, l, cut+1, cut+5)
			mustClose(t, l)
			l = mustOpen(t, testOptions(dir, 300))
			defer mustClose(t, l)
			checkEntries(t, readAll(t, l, 0), 1, cut+5)
		})
	}
}

// A log that no longer starts at version 1 is not emptied: it would
// start again there.
func TestTruncateAfterRefusesToEmptyALogRetentionCut(t *testing.T) {
	dir := buildLog(t, 300, 30)
	l := mustOpen(t, testOptions(dir, 300))
	defer mustClose(t, l)
	if err := l.TruncateBefore(20); err != nil {
		t.Fatal(err)
	}
	first := l.FirstVersion()
	if err := l.TruncateAfter(first - 1); err == nil {
		t.Fatalf("cut after %d of a log starting at %d: no error", first-1, first)
	}
	checkEntries(t, readAll(t, l, first-1), first, 30)
}
