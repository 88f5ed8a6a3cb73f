package wal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRoundTripAcrossSegmentsAndReopen(t *testing.T) {
	dir := t.TempDir()
	const segmentBytes = 256
	l := mustOpen(t, testOptions(dir, segmentBytes))
	appendInBatches(t, l, 1, 500)

	if n := len(segmentPaths(t, dir)); n < 20 {
		t.Fatalf("%d segment files, want many (small SegmentBytes)", n)
	}
	checkLogContents(t, l, 1, 500)
	mustClose(t, l)

	l = mustOpen(t, testOptions(dir, segmentBytes))
	checkLogContents(t, l, 1, 500)
	appendInBatches(t, l, 501, 700)
	checkLogContents(t, l, 1, 700)
	mustClose(t, l)

	l = mustOpen(t, testOptions(dir, segmentBytes))
	defer mustClose(t, l)
	checkLogContents(t, l, 1, 700)
}

// checkLogContents verifies versions, reads from several points, and the size and segment bounds.
func checkLogContents(t *testing.T, l *Log, first, last uint64) {
	t.Helper()
	if l.FirstVersion() != first || l.LastVersion() != last {
		t.Fatalf("versions %d..%d, want %d..%d", l.FirstVersion(), l.LastVersion(), first, last)
	}
	for _, after := range []uint64{first - 1, first, first + 1, (first + last) / 2, last - 1, last, last + 10} {
		checkEntries(t, readAll(t, l, after), max(after+1, first), last)
	}
	var onDisk int64
	for _, path := range segmentPaths(t, l.dir) {
		size := recordsEnd(t, path)
		onDisk += size
		if size > l.segmentBytesMax {
			t.Errorf("%s has %d bytes, limit %d", path, size, l.segmentBytesMax)
		}
	}
	if l.SizeBytes() != onDisk {
		t.Fatalf("SizeBytes() = %d, files hold %d", l.SizeBytes(), onDisk)
	}
}

func TestSegmentNamesSortInVersionOrder(t *testing.T) {
	versions := []uint64{1, 9, 10, 99, 100, 12345678901234567890}
	for i, v := range versions {
		name := segmentFileName(v)
		if got, ok := parseSegmentFileName(name); !ok || got != v {
			t.Fatalf("parse(%q) = %d, %v", name, got, ok)
		}
		if i > 0 && segmentFileName(versions[i-1]) >= name {
			t.Fatalf("%q does not sort after %q", name, segmentFileName(versions[i-1]))
		}
	}
	if name := segmentFileName(1); name != "00000000000000000001.wal" {
		t.Fatalf("segmentFileName(1) = %q", name)
	}
}

func TestGroupCommitIsOneWriteAndOneFsync(t *testing.T) {
	opts := testOptions(t.TempDir(), 0)
	opts.NoSync = false
	l := mustOpen(t, opts)
	defer mustClose(t, l)

	before := l.Stats()
	// Creates the first segment: the preallocated zeros are fsynced (counted in ZeroedChunks), then
	// the records (fdatasync), then the directory.
	mustAppend(t, l, makeEntries(1, 100))
	after := l.Stats()
	checkStatsDelta(t, before, after, Stats{Appends: 1, Entries: 100, Writes: 1, Fsyncs: 2, SegmentsCreated: 1})
	if after.ZeroedChunks < 1 {
		t.Fatal("the new segment was written without zeroing it first")
	}

	// Within the preallocated space: one write, one sync.
	for i := range 5 {
		before = l.Stats()
		mustAppend(t, l, makeEntries(101+uint64(i)*100, 100))
		checkStatsDelta(t, before, l.Stats(), Stats{Appends: 1, Entries: 100, Writes: 1, Fsyncs: 1})
	}
}

func TestBatchCrossingSegmentsWritesOncePerSegment(t *testing.T) {
	opts := testOptions(t.TempDir(), 1024)
	opts.NoSync = false
	l := mustOpen(t, opts)
	defer mustClose(t, l)
	mustAppend(t, l, makeEntries(1, 5))

	before := l.Stats()
	mustAppend(t, l, makeEntries(6, 100)) // about 3 KiB: fills the active segment and 3 new ones
	after := l.Stats()
	segmentsTouched := 1 + after.SegmentsCreated - before.SegmentsCreated
	if segmentsTouched < 3 {
		t.Fatalf("batch touched %d segments, want at least 3", segmentsTouched)
	}
	// One write and one sync per segment; and per new segment one fsync to trim the full one and one
	// for the directory. Zeroing a new segment ahead of its records is counted apart (ZeroedChunks).
	checkStatsDelta(t, before, after, Stats{Appends: 1, Entries: 100, Writes: segmentsTouched,
		Fsyncs: segmentsTouched + 2*(segmentsTouched-1), SegmentsCreated: segmentsTouched - 1})
	if zeroed := after.ZeroedChunks - before.ZeroedChunks; zeroed < segmentsTouched-1 {
		t.Fatalf("%d chunks zeroed for %d new segments", zeroed, segmentsTouched-1)
	}
	checkEntries(t, readAll(t, l, 0), 1, 105)
}

func mustAppend(t testing.TB, l *Log, entries []Entry) {
	t.Helper()
	if err := l.Append(entries); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

// checkStatsDelta compares after-before with want, ignoring BytesWritten when want has none.
func checkStatsDelta(t *testing.T, before, after, want Stats) {
	t.Helper()
	got := Stats{
		Appends:         after.Appends - before.Appends,
		Entries:         after.Entries - before.Entries,
		Writes:          after.Writes - before.Writes,
		Fsyncs:          after.Fsyncs - before.Fsyncs,
		SegmentsCreated: after.SegmentsCreated - before.SegmentsCreated,
	}
	if got != want {
		t.Fatalf("stats delta = %+v, want %+v", got, want)
	}
	if after.BytesWritten <= before.BytesWritten {
		t.Fatalf("BytesWritten did not grow: %d -> %d", before.BytesWritten, after.BytesWritten)
	}
}

func TestAppendPanicsOnNonConsecutiveVersions(t *testing.T) {
	l := mustOpen(t, testOptions(t.TempDir(), 0))
	defer mustClose(t, l)
	mustPanic(t, func() { l.Append(makeEntries(2, 3)) }) // empty log starts at 1
	mustAppend(t, l, makeEntries(1, 10))

	cases := map[string][]Entry{
		"gap":               makeEntries(12, 1),
		"repeat":            makeEntries(10, 2),
		"goes back":         makeEntries(1, 1),
		"gap inside batch":  {{Version: 11}, {Version: 13}},
		"repeat in batch":   {{Version: 11}, {Version: 11}},
		"reversed in batch": {{Version: 12}, {Version: 11}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			size := l.SizeBytes()
			mustPanic(t, func() { l.Append(entries) })
			if l.LastVersion() != 10 || l.SizeBytes() != size {
				t.Fatalf("a refused batch changed the log: last %d, size %d -> %d", l.LastVersion(), size, l.SizeBytes())
			}
		})
	}
	mustAppend(t, l, makeEntries(11, 1))
}

func TestAppendRefusesOversizedPayloadBeforeWriting(t *testing.T) {
	l := mustOpen(t, testOptions(t.TempDir(), 0))
	defer mustClose(t, l)
	mustAppend(t, l, makeEntries(1, 3))
	before := l.Stats()

	batch := append(makeEntries(4, 2), Entry{Version: 6, Payload: make([]byte, EntryBytesMax+1)})
	if err := l.Append(batch); !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("Append(oversized) = %v, want ErrEntryTooLarge", err)
	}
	if after := l.Stats(); after.Writes != before.Writes || l.LastVersion() != 3 {
		t.Fatalf("oversized batch was partly written: writes %d -> %d, last version %d", before.Writes, after.Writes, l.LastVersion())
	}
	mustAppend(t, l, makeEntries(4, 1)) // still usable
	checkEntries(t, readAll(t, l, 0), 1, 4)
}

func TestFailedWriteMakesLogUnusable(t *testing.T) {
	l := mustOpen(t, testOptions(t.TempDir(), 0))
	defer l.Close() // reports the file closed below
	mustAppend(t, l, makeEntries(1, 3))
	l.active.Close() // simulate an I/O failure: the next write fails

	err := l.Append(makeEntries(4, 1))
	if err == nil {
		t.Fatal("Append on a broken file succeeded")
	}
	if err2 := l.Append(makeEntries(4, 1)); !errors.Is(err2, err) {
		t.Fatalf("second Append = %v, want the first failure %v", err2, err)
	}
	if err := l.TruncateBefore(2); err == nil {
		t.Fatal("TruncateBefore on a failed log succeeded")
	}
	if l.LastVersion() != 3 {
		t.Fatalf("LastVersion() = %d after failed append, want 3", l.LastVersion())
	}
}

func TestClosedLogRefusesOperations(t *testing.T) {
	l := mustOpen(t, testOptions(t.TempDir(), 0))
	mustAppend(t, l, makeEntries(1, 3))
	mustClose(t, l)
	mustClose(t, l) // idempotent
	if err := l.Append(makeEntries(4, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if err := l.ReadFrom(0, func(Entry) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadFrom after Close = %v", err)
	}
	if err := l.TruncateBefore(2); !errors.Is(err, ErrClosed) {
		t.Fatalf("TruncateBefore after Close = %v", err)
	}
}

func TestOpenLocksTheDirectory(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(dir, 0))
	if _, err := Open(testOptions(dir, 0)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	mustClose(t, l)
	mustClose(t, mustOpen(t, testOptions(dir, 0)))
}

// A second Open with LockWait waits for the first Log to let the directory go
// (as a restarted certifier waits for its killed predecessor to finish exiting).
func TestOpenWaitsForTheLockWithLockWait(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(dir, 0))
	opts := testOptions(dir, 0)
	opts.LockWait = time.Minute
	opened := make(chan error, 1)
	go func() {
		second, err := Open(opts)
		if err == nil {
			err = second.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("second Open returned (%v) while the first Log held the directory", err)
	case <-time.After(200 * time.Millisecond):
	}
	mustClose(t, l)
	if err := <-opened; err != nil {
		t.Fatalf("second Open after the first Log closed: %v", err)
	}
}

func TestOpenCreatesMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	l := mustOpen(t, testOptions(dir, 0))
	defer mustClose(t, l)
	if l.FirstVersion() != 0 || l.LastVersion() != 0 || l.SizeBytes() != 0 {
		t.Fatalf("empty log: first %d last %d size %d", l.FirstVersion(), l.LastVersion(), l.SizeBytes())
	}
	if got := readAll(t, l, 0); len(got) != 0 {
		t.Fatalf("empty log delivered %d entries", len(got))
	}
	mustAppend(t, l, makeEntries(1, 1))
	if _, err := os.Stat(filepath.Join(dir, segmentFileName(1))); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRejectsBadOptionsAndStrangeFiles(t *testing.T) {
	if _, err := Open(Options{}); err == nil {
		t.Fatal("Open without Dir succeeded")
	}
	if _, err := Open(Options{Dir: t.TempDir(), SegmentBytes: -1}); err == nil {
		t.Fatal("Open with negative SegmentBytes succeeded")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.wal"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testOptions(dir, 0)); err == nil || !strings.Contains(err.Error(), "notes.wal") {
		t.Fatalf("Open with a misnamed segment = %v", err)
	}
}

func TestReadFromStopsOnCallbackError(t *testing.T) {
	l := mustOpen(t, testOptions(t.TempDir(), 200))
	defer mustClose(t, l)
	appendInBatches(t, l, 1, 50)
	stop := errors.New("stop")
	var seen []uint64
	err := l.ReadFrom(5, func(e Entry) error {
		seen = append(seen, e.Version)
		if e.Version == 20 {
			return stop
		}
		return nil
	})
	if err != stop || len(seen) != 15 || seen[0] != 6 {
		t.Fatalf("ReadFrom = %v after versions %v, want stop after 6..20", err, seen)
	}
}

// TestReadFromUsesTheSegmentIndex proves ReadFrom starts at the segment holding after+1: with the
// earlier segment files deleted behind the log's back, a read of recent entries still works.
func TestReadFromUsesTheSegmentIndex(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(dir, 300))
	defer mustClose(t, l)
	appendInBatches(t, l, 1, 200)
	paths := segmentPaths(t, dir)
	last := paths[len(paths)-1]
	first, _ := parseSegmentFileName(filepath.Base(last))
	for _, path := range paths[:len(paths)-1] {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	checkEntries(t, readAll(t, l, first), first+1, 200)
	if err := l.ReadFrom(first-2, func(Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("reading a deleted segment = %v, want ErrCompacted", err)
	}
}

func TestTruncateBeforeAndErrCompacted(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(dir, 256))
	appendInBatches(t, l, 1, 300)
	segmentsBefore := len(segmentPaths(t, dir))
	sizeBefore := l.SizeBytes()

	if err := l.TruncateBefore(150); err != nil {
		t.Fatal(err)
	}
	first := l.FirstVersion()
	if first <= 1 || first > 150 {
		t.Fatalf("FirstVersion() = %d after TruncateBefore(150), want in (1, 150]", first)
	}
	paths := segmentPaths(t, dir)
	if oldest, _ := parseSegmentFileName(filepath.Base(paths[0])); oldest != first {
		t.Fatalf("oldest file starts at %d, FirstVersion() = %d", oldest, first)
	}
	if second, _ := parseSegmentFileName(filepath.Base(paths[1])); second <= 150 {
		t.Fatalf("kept segment %d..%d although all its entries are below 150", first, second-1)
	}
	if len(paths) >= segmentsBefore || l.SizeBytes() >= sizeBefore {
		t.Fatalf("nothing removed: %d -> %d files, %d -> %d bytes", segmentsBefore, len(paths), sizeBefore, l.SizeBytes())
	}

	if err := l.ReadFrom(first-2, func(Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("ReadFrom(FirstVersion()-2) = %v, want ErrCompacted", err)
	}
	checkEntries(t, readAll(t, l, first-1), first, 300)

	if err := l.TruncateBefore(1 << 60); err != nil {
		t.Fatal(err)
	}
	if n := len(segmentPaths(t, dir)); n != 1 || l.LastVersion() != 300 {
		t.Fatalf("after TruncateBefore(huge): %d files, last version %d; want the active segment kept", n, l.LastVersion())
	}
	first = l.FirstVersion()
	appendInBatches(t, l, 301, 320)
	mustClose(t, l)

	l = mustOpen(t, testOptions(dir, 256))
	defer mustClose(t, l)
	if l.FirstVersion() != first {
		t.Fatalf("FirstVersion() after reopen = %d, want %d", l.FirstVersion(), first)
	}
	checkEntries(t, readAll(t, l, first-1), first, 320)
}
