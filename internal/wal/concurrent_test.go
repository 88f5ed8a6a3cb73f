package wal

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentReadFromWhileAppending runs readers against a growing log (and, in one variant, against
// retention). Every read must deliver consecutive versions from after+1 with the right payloads and
// reach at least the LastVersion() seen before it started.
func TestConcurrentReadFromWhileAppending(t *testing.T) {
	for _, withRetention := range []bool{false, true} {
		t.Run(fmt.Sprintf("retention=%v", withRetention), func(t *testing.T) {
			testConcurrentReads(t, withRetention)
		})
	}
}

func testConcurrentReads(t *testing.T, withRetention bool) {
	const last = 3000
	l := mustOpen(t, testOptions(t.TempDir(), 2048))
	defer mustClose(t, l)
	mustAppend(t, l, makeEntries(1, 1))

	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer done.Store(true)
		appendInBatches(t, l, 2, last)
	})
	if withRetention {
		wg.Go(func() {
			for !done.Load() {
				if err := l.TruncateBefore(l.LastVersion() - min(l.LastVersion(), 500)); err != nil {
					t.Errorf("TruncateBefore: %v", err)
					return
				}
			}
		})
	}
	var reads, compacted atomic.Int64
	for reader := range 4 {
		wg.Go(func() {
			for i := 0; !done.Load() || i < 3; i++ {
				compacted.Add(readAndCheck(t, l, readPoint(l, reader, i, withRetention)))
				reads.Add(1)
			}
		})
	}
	wg.Wait()
	if l.LastVersion() != last {
		t.Fatalf("LastVersion() = %d, want %d", l.LastVersion(), last)
	}
	if withRetention && l.FirstVersion() == 1 {
		t.Fatal("retention removed nothing")
	}
	t.Logf("%d reads, %d saw ErrCompacted", reads.Load(), compacted.Load())
}

// readPoint spreads reads over the whole log, or over its recent part when retention runs.
func readPoint(l *Log, reader, i int, withRetention bool) uint64 {
	lastVersion := l.LastVersion()
	if withRetention {
		return lastVersion - min(lastVersion, uint64(reader*37+i)%400)
	}
	return uint64(reader*i) % (lastVersion + 1)
}

// readAndCheck reads after `after` and verifies what it gets; it returns 1 if the entries were compacted.
func readAndCheck(t *testing.T, l *Log, after uint64) int64 {
	durable := l.LastVersion()
	next := after + 1
	err := l.ReadFrom(after, func(e Entry) error {
		if e.Version != next || string(e.Payload) != string(payloadFor(next)) {
			return fmt.Errorf("got version %d payload %q, want version %d", e.Version, e.Payload, next)
		}
		next++
		return nil
	})
	if errors.Is(err, ErrCompacted) {
		return 1
	}
	if err != nil {
		t.Errorf("ReadFrom(%d): %v", after, err)
	} else if next-1 < max(durable, after) {
		t.Errorf("ReadFrom(%d) stopped at %d, but %d was durable before it started", after, next-1, durable)
	}
	return 0
}
