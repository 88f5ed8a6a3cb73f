package wal

import (
	"fmt"
	"sync"
	"testing"
)

// A pipelined writer: batches written one after the other, each waited for
// by a goroutine of its own, with small segments so that some batches roll
// over (the synchronous path) while others are still unsynced, and Append
// mixed in. Whatever order the goroutines run in, readers see only
// published, contiguous versions, LastVersion never runs ahead of a batch
// whose Wait has not returned, and everything is there after a reopen.
func TestPipelinedWritesPublishInOrderAndSurviveReopen(t *testing.T) {
	for _, sync := range []bool{false, true} {
		dir := t.TempDir()
		opts := testOptions(dir, 4<<10)
		opts.NoSync = !sync
		l := mustOpen(t, opts)
		last := pipelineBatches(t, l, 1, 600)
		if err := l.Append(makeEntries(last+1, 3)); err != nil { // after pipelined batches
			t.Fatal(err)
		}
		last += 3
		checkEntries(t, readAll(t, l, 0), 1, last)
		mustClose(t, l)
		l = mustOpen(t, opts)
		if got := l.LastVersion(); got != last {
			t.Fatalf("reopened at version %d, want %d", got, last)
		}
		checkEntries(t, readAll(t, l, 0), 1, last)
		mustClose(t, l)
	}
}

// pipelineBatches writes versions first..last in batches of varying size
// through Write, with Waits on other goroutines, and returns last.
func pipelineBatches(t *testing.T, l *Log, first, last uint64) uint64 {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	waited := uint64(first - 1) // highest version whose Wait returned
	errs := make(chan error, last)
	for v, i := first, 0; v <= last; i++ {
		n := min(uint64(i%13+1), last-v+1)
		p, err := l.Write(makeEntries(v, int(n)))
		if err != nil {
			t.Fatalf("Write(%d..%d): %v", v, v+n-1, err)
		}
		if lv := l.LastVersion(); lv > v-1 && p.seq != 0 {
			mu.Lock()
			ok := lv <= waited
			mu.Unlock()
			if !ok {
				t.Fatalf("LastVersion %d is ahead of every waited batch right after writing %d..%d", lv, v, v+n-1)
			}
		}
		wg.Add(1)
		go func(end uint64) {
			defer wg.Done()
			if err := p.Wait(); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			waited = max(waited, end)
			mu.Unlock()
			if lv := l.LastVersion(); lv < end {
				errs <- fmt.Errorf("the Wait for a batch ending at %d returned with LastVersion %d", end, lv)
			}
		}(v + n - 1)
		v += n
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return last
}

// Write continues from the last version written, not the last durable one,
// and refuses a gap like Append.
func TestWriteContinuesFromTheLastVersionWritten(t *testing.T) {
	l := mustOpen(t, testOptions(t.TempDir(), 1<<20))
	defer mustClose(t, l)
	first, err := l.Write(makeEntries(1, 2)) // starts a segment: durable at once
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Write(makeEntries(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Write(makeEntries(5, 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.LastVersion(); got != 2 {
		t.Fatalf("LastVersion %d before any Wait, want 2 (the synchronous first batch)", got)
	}
	mustPanic(t, func() { l.Write(makeEntries(7, 1)) })
	done := make(chan error, 1)
	go func() { done <- b.Wait() }() // waits for a's publication
	for _, p := range []*Pending{first, a} {
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkEntries(t, readAll(t, l, 0), 1, 5)
}
