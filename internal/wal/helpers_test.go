package wal

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// payloadFor returns the deterministic, variable-length payload the tests store for version v.
func payloadFor(v uint64) []byte {
	return []byte(strings.Repeat(fmt.Sprintf("v%d;", v), int(v%5)+1))
}

// makeEntries returns n entries starting at version first.
func makeEntries(first uint64, n int) []Entry {
	entries := make([]Entry, n)
	for i := range entries {
		v := first + uint64(i)
		entries[i] = Entry{Version: v, Payload: payloadFor(v)}
	}
	return entries
}

// warnings returns the WARN lines of a text log.
func warnings(logs *testbin.Output) []string {
	var lines []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") {
			lines = append(lines, line)
		}
	}
	return lines
}

func newCaptureLogger() (*slog.Logger, *testbin.Output) {
	logs := &testbin.Output{}
	return slog.New(slog.NewTextHandler(logs, nil)), logs
}

// testOptions skips fsync unless a test needs it: durability across power loss cannot be observed
// in a unit test, and the tests reopen logs hundreds of times.
func testOptions(dir string, segmentBytes int64) Options {
	logger, _ := newCaptureLogger()
	return Options{Dir: dir, SegmentBytes: segmentBytes, Logger: logger, NoSync: true}
}

func mustOpen(t testing.TB, opts Options) *Log {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", opts.Dir, err)
	}
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// appendInBatches appends versions first..last in batches of varying size.
func appendInBatches(t testing.TB, l *Log, first, last uint64) {
	t.Helper()
	for v, i := first, 0; v <= last; i++ {
		n := min(uint64(i%17+1), last-v+1)
		if err := l.Append(makeEntries(v, int(n))); err != nil {
			t.Fatalf("Append(%d..%d): %v", v, v+n-1, err)
		}
		v += n
	}
}

// readAll returns everything ReadFrom(after) delivers.
func readAll(t testing.TB, l *Log, after uint64) []Entry {
	t.Helper()
	var got []Entry
	err := l.ReadFrom(after, func(e Entry) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatalf("ReadFrom(%d): %v", after, err)
	}
	return got
}

// checkEntries verifies that got holds exactly versions first..last with their payloads.
func checkEntries(t testing.TB, got []Entry, first, last uint64) {
	t.Helper()
	want := int(last - first + 1)
	if first > last {
		want = 0
	}
	if len(got) != want {
		t.Fatalf("got %d entries, want %d (versions %d..%d)", len(got), want, first, last)
	}
	for i, e := range got {
		v := first + uint64(i)
		if e.Version != v || !bytes.Equal(e.Payload, payloadFor(v)) {
			t.Fatalf("entry %d: got version %d payload %q, want version %d payload %q", i, e.Version, e.Payload, v, payloadFor(v))
		}
	}
}

// segmentPaths lists the segment files of dir in version order.
func segmentPaths(t testing.TB, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*"+segmentFileSuffix))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	return paths
}

// copyLog copies the segment files of src into a fresh directory.
func copyLog(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, path := range segmentPaths(t, src) {
		in, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, filepath.Base(path)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// snapshotFiles returns the contents of every segment file, to check that a failed Open changed nothing.
func snapshotFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, path := range segmentPaths(t, dir) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(path)] = b
	}
	return files
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// flipByte inverts one byte of a file.
func flipByte(t testing.TB, path string, offset int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[offset] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recordOffsets returns the offset of every record in a segment file, parsing lengths only, up to
// the preallocated zeros after the last record.
func recordOffsets(t testing.TB, path string) []int64 {
	offsets, _ := parseRecords(t, path)
	return offsets
}

// recordsEnd is the offset after a segment's last record: its size without preallocated zeros.
func recordsEnd(t testing.TB, path string) int64 {
	_, end := parseRecords(t, path)
	return end
}

func parseRecords(t testing.TB, path string) ([]int64, int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offsets []int64
	off := int64(segmentHeaderBytes)
	for off+recordHeaderBytes <= int64(len(b)) {
		var raw [recordHeaderBytes]byte
		copy(raw[:], b[off:])
		if raw == [recordHeaderBytes]byte{} {
			break // preallocated space
		}
		offsets = append(offsets, off)
		off += recordBytes(int(decodeRecordHeader(b[off:]).payloadBytes))
	}
	return offsets, min(off, int64(len(b)))
}

// mustPanic runs f and fails the test unless it panics.
func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatal("expected a panic")
		}
	}()
	f()
}
