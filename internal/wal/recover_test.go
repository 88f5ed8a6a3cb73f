package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// buildLog writes versions 1..last with the given segment size and returns the directory.
func buildLog(t *testing.T, segmentBytes int64, last uint64) string {
	t.Helper()
	dir := t.TempDir()
	l := mustOpen(t, testOptions(dir, segmentBytes))
	appendInBatches(t, l, 1, last)
	mustClose(t, l)
	return dir
}

// tornTails are the kinds of bytes a crash can leave after a cut.
var tornTails = map[string][]byte{
	"nothing": nil,
	"zeros":   make([]byte, 77),
	"garbage": randomBytes(53),
}

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

// tearLastSegment cuts the last segment of dir at cut and appends tail.
func tearLastSegment(t *testing.T, dir string, cut int64, tail []byte) string {
	t.Helper()
	paths := segmentPaths(t, dir)
	last := paths[len(paths)-1]
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	torn := append(b[:cut:cut], tail...)
	if err := os.WriteFile(last, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	return last
}

// openRecovered opens dir, expects recovery to keep versions 1..wantLast, checks the single warning
// (or its absence), and checks that appends continue at wantLast+1 and survive a reopen.
func openRecovered(t *testing.T, dir string, wantLast uint64, wantWarning bool) {
	t.Helper()
	logger, logs := newCaptureLogger()
	opts := testOptions(dir, 0)
	opts.Logger = logger
	l := mustOpen(t, opts)
	if l.LastVersion() != wantLast {
		t.Fatalf("recovered LastVersion() = %d, want %d", l.LastVersion(), wantLast)
	}
	checkWarnings(t, warnings(logs), wantLast, wantWarning)
	checkEntries(t, readAll(t, l, 0), 1, wantLast)
	mustAppend(t, l, makeEntries(wantLast+1, 3))
	mustClose(t, l)

	l = mustOpen(t, testOptions(dir, 0))
	defer mustClose(t, l)
	checkEntries(t, readAll(t, l, 0), 1, wantLast+3)
}

func checkWarnings(t *testing.T, warnings []string, lastGood uint64, want bool) {
	t.Helper()
	if !want {
		if len(warnings) != 0 {
			t.Fatalf("unexpected warnings: %q", warnings)
		}
		return
	}
	if len(warnings) != 1 {
		t.Fatalf("got %d warnings, want exactly one: %q", len(warnings), warnings)
	}
	w := warnings[0]
	if !strings.Contains(w, "dropped_bytes=") || !strings.Contains(w, fmt.Sprintf("last_good_version=%d ", lastGood)) {
		t.Fatalf("warning does not say what was dropped and the last good version %d: %q", lastGood, w)
	}
}

func TestTornTailInsideLastRecordIsTruncated(t *testing.T) {
	const last = 200
	original := buildLog(t, 512, last)
	paths := segmentPaths(t, original)
	size := recordsEnd(t, paths[len(paths)-1])
	offsets := recordOffsets(t, paths[len(paths)-1])
	if len(offsets) < 3 {
		t.Fatalf("last segment holds %d records; the test wants a torn record after good ones", len(offsets))
	}
	lastRecord := offsets[len(offsets)-1]

	for cut := lastRecord; cut <= size; cut++ {
		for name, tail := range tornTails {
			if cut == size && tail == nil {
				continue // intact
			}
			t.Run(fmt.Sprintf("cut=%d/%s", cut, name), func(t *testing.T) {
				dir := copyLog(t, original)
				tearLastSegment(t, dir, cut, tail)
				wantLast := uint64(last - 1)
				if cut == size {
					wantLast = last // only bytes after a complete record were added
				}
				// Zeros after a whole record are what preallocation leaves: not a defect.
				endsAtRecordBoundary := (cut == lastRecord || cut == size) && (tail == nil || name == "zeros")
				openRecovered(t, dir, wantLast, !endsAtRecordBoundary)
			})
		}
	}
}

func TestTornTailTruncatesAtEndOfLastGoodRecord(t *testing.T) {
	dir := buildLog(t, 512, 100)
	paths := segmentPaths(t, dir)
	lastPath := paths[len(paths)-1]
	offsets := recordOffsets(t, lastPath)
	lastRecord := offsets[len(offsets)-1]
	tearLastSegment(t, dir, lastRecord+5, tornTails["zeros"])

	l := mustOpen(t, testOptions(dir, 0))
	defer mustClose(t, l)
	if got := fileSize(t, lastPath); got != lastRecord {
		t.Fatalf("file truncated to %d bytes, want %d (end of the last good record)", got, lastRecord)
	}
}

func TestTornSegmentWithoutCompleteRecordIsRemoved(t *testing.T) {
	// A segment of 40 bytes holds its 20-byte header and one record, so every Append starts a segment.
	const segmentBytes = 40
	dir := t.TempDir()
	l := mustOpen(t, testOptions(dir, segmentBytes))
	for v := uint64(1); v <= 5; v++ {
		mustAppend(t, l, []Entry{{Version: v, Payload: payloadFor(v)}})
	}
	mustClose(t, l)
	for v := uint64(1); v <= 5; v++ {
		if _, err := os.Stat(filepath.Join(dir, segmentFileName(v))); err != nil {
			t.Fatalf("want one segment per record: %v", err)
		}
	}
	lastPath := filepath.Join(dir, segmentFileName(5))
	size := recordsEnd(t, lastPath)
	for cut := int64(0); cut < size; cut++ {
		t.Run(fmt.Sprintf("cut=%d", cut), func(t *testing.T) {
			torn := copyLog(t, dir)
			tearLastSegment(t, torn, cut, nil)
			logger, logs := newCaptureLogger()
			opts := testOptions(torn, segmentBytes)
			opts.Logger = logger
			l := mustOpen(t, opts)
			defer mustClose(t, l)
			if l.LastVersion() != 4 {
				t.Fatalf("LastVersion() = %d, want 4", l.LastVersion())
			}
			checkWarnings(t, warnings(logs), 4, true)
			if _, err := os.Stat(filepath.Join(torn, segmentFileName(5))); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("torn segment not removed: %v", err)
			}
			mustAppend(t, l, makeEntries(5, 2))
			checkEntries(t, readAll(t, l, 0), 1, 6)
		})
	}
}

func TestChecksumMismatchInLastRecordsIsTornTail(t *testing.T) {
	for _, damaged := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("last %d records", damaged), func(t *testing.T) {
			dir := buildLog(t, 0, 50) // one segment
			path := segmentPaths(t, dir)[0]
			offsets := recordOffsets(t, path)
			for _, off := range offsets[len(offsets)-damaged:] {
				flipByte(t, path, off+recordHeaderBytes) // first payload byte
			}
			openRecovered(t, dir, uint64(50-damaged), true)
		})
	}
}

func TestCleanLogRecoversWithoutWarning(t *testing.T) {
	dir := buildLog(t, 300, 80)
	openRecovered(t, dir, 80, false)
}

// corruption damages a log and says where the error must point (offset -1: not checked).
type corruption struct {
	name   string
	damage func(t *testing.T, paths []string) (file string, offset int64)
}

// flipRecordByte flips byte delta of record i of segment s (negative indexes count from the end).
func flipRecordByte(s, i int, delta int64) func(*testing.T, []string) (string, int64) {
	return func(t *testing.T, paths []string) (string, int64) {
		path := paths[(s+len(paths))%len(paths)]
		offsets := recordOffsets(t, path)
		off := offsets[(i+len(offsets))%len(offsets)]
		flipByte(t, path, off+delta)
		return path, off
	}
}

// rewriteVersion re-encodes record i of segment s with a wrong version and a matching checksum.
func rewriteVersion(s, i int) func(*testing.T, []string) (string, int64) {
	return func(t *testing.T, paths []string) (string, int64) {
		path := paths[(s+len(paths))%len(paths)]
		offsets := recordOffsets(t, path)
		off := offsets[(i+len(offsets))%len(offsets)]
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h := decodeRecordHeader(b[off:])
		payload := b[off+recordHeaderBytes : off+recordBytes(int(h.payloadBytes))]
		forged := appendRecord(nil, Entry{Version: h.version + 7, Payload: payload})
		copy(b[off:], forged)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path, off
	}
}

func TestMidLogCorruptionFailsOpen(t *testing.T) {
	cases := []corruption{
		{"payload byte in first segment", flipRecordByte(0, 2, recordHeaderBytes+1)},
		{"payload byte in last record of a middle segment", flipRecordByte(1, -1, recordHeaderBytes)},
		{"first record of last segment, later records valid", flipRecordByte(-1, 0, recordHeaderBytes)},
		{"checksum byte in last segment", flipRecordByte(-1, 1, 4)},
		{"version byte in last segment", flipRecordByte(-1, 1, 8)},
		{"length field in last segment", flipRecordByte(-1, 1, 1)},
		{"intact record with a wrong version in a middle segment", rewriteVersion(1, 1)},
		{"intact last record with a wrong version", rewriteVersion(-1, -1)},
		{"zeroed record header in last segment", func(t *testing.T, paths []string) (string, int64) {
			last := paths[len(paths)-1]
			b, err := os.ReadFile(last)
			if err != nil {
				t.Fatal(err)
			}
			off := recordOffsets(t, last)[1]
			clear(b[off : off+recordHeaderBytes])
			if err := os.WriteFile(last, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return last, off
		}},
		{"torn tail in a segment that is not the last", func(t *testing.T, paths []string) (string, int64) {
			offsets := recordOffsets(t, paths[2])
			lastRecord := offsets[len(offsets)-1]
			if err := os.Truncate(paths[2], lastRecord+3); err != nil {
				t.Fatal(err)
			}
			return paths[2], lastRecord
		}},
		{"header of first segment", func(t *testing.T, paths []string) (string, int64) {
			flipByte(t, paths[0], 9)
			return paths[0], 0
		}},
		{"missing middle segment", func(t *testing.T, paths []string) (string, int64) {
			if err := os.Remove(paths[3]); err != nil {
				t.Fatal(err)
			}
			return paths[4], 0
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := buildLog(t, 512, 130)
			paths := segmentPaths(t, dir)
			if len(paths) < 6 || len(recordOffsets(t, paths[len(paths)-1])) < 3 {
				t.Fatalf("want at least 6 segments and 3 records in the last one; got %d segments", len(paths))
			}
			wantFile, wantOffset := c.damage(t, paths)
			before := snapshotFiles(t, dir)

			_, err := Open(testOptions(dir, 512))
			checkCorruptError(t, err, wantFile, wantOffset)
			if after := snapshotFiles(t, dir); !equalFiles(before, after) {
				t.Fatal("a failed Open modified the segment files")
			}
		})
	}
}

func checkCorruptError(t *testing.T, err error, wantFile string, wantOffset int64) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *CorruptError", err)
	}
	if ce.File != wantFile || (wantOffset >= 0 && ce.Offset != wantOffset) {
		t.Fatalf("error names %s offset %d, want %s offset %d: %v", ce.File, ce.Offset, wantFile, wantOffset, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, filepath.Base(wantFile)) || !strings.Contains(msg, "offset") || !strings.Contains(msg, "version") {
		t.Fatalf("error message does not name file, offset and version: %v", err)
	}
}

func equalFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for name, content := range a {
		if !bytes.Equal(content, b[name]) {
			return false
		}
	}
	return true
}

func TestZeroFilledHeaderIsNotAValidRecord(t *testing.T) {
	var zeros [recordHeaderBytes]byte
	if _, ok := validRecordAt(zeros[:], 1, 100); ok {
		t.Fatal("a zero-filled record header passed as valid")
	}
	if defect := recordHeaderDefect(zeros, decodeRecordHeader(zeros[:]), 100); defect == "" {
		t.Fatal("a zero-filled record header is not a defect")
	}
}

// Open syncs the records it recovered (the active segment, then the
// directory) before it reports them as the log's: a process killed after
// a write and before its fsync leaves them in the page cache only. A log
// opened with NoSync syncs nothing, and an empty log has nothing to sync.
func TestOpenSyncsTheRecoveredTail(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir, 4096)
	empty := mustOpen(t, Options{Dir: opts.Dir, SegmentBytes: opts.SegmentBytes, Logger: opts.Logger})
	if got := empty.Fsyncs(); got != 0 {
		t.Fatalf("opening an empty log made %d fsyncs, want 0", got)
	}
	mustClose(t, empty)
	l := mustOpen(t, opts)
	appendInBatches(t, l, 1, 200) // NoSync: written, never synced
	mustClose(t, l)
	unsynced := mustOpen(t, opts)
	if got := unsynced.Fsyncs(); got != 0 {
		t.Fatalf("a NoSync log made %d fsyncs at Open, want 0", got)
	}
	mustClose(t, unsynced)
	synced := mustOpen(t, Options{Dir: opts.Dir, SegmentBytes: opts.SegmentBytes, Logger: opts.Logger})
	defer mustClose(t, synced)
	if got := synced.Fsyncs(); got != 2 {
		t.Fatalf("Open made %d fsyncs, want 2: the active segment and the directory", got)
	}
	if got := synced.LastVersion(); got != 200 {
		t.Fatalf("last version %d after Open, want 200", got)
	}
}
