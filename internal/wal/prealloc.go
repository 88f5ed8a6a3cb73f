package wal

import (
	"fmt"
	"os"
	"sync/atomic"
)

// Preallocation: the active segment is written over zeros that were
// written and fsynced beforehand, so an append's fdatasync flushes data
// only, never the file's size or block map (the way PostgreSQL zero-fills
// WAL segments). Zeroing a chunk costs a full fsync; done in the append
// path it stalls every commit of the batch that crosses a chunk boundary,
// which showed in the certifier's p99 latency. So a background goroutine
// keeps the active segment zeroed ahead of the writer, and the writer
// zeroes synchronously only when it has caught up with the goroutine (a
// burst larger than the headroom, a new segment).

// preallocChunkBytes is how much zero-filled space is added at a time: at
// most this much to scan for zeros at recovery.
const preallocChunkBytes = 1 << 20

// preallocAheadBytes is how far ahead of the records the background
// goroutine keeps the active segment zeroed.
const preallocAheadBytes = 2 * preallocChunkBytes

var zeroChunk = make([]byte, preallocChunkBytes)

// zeroedFile is the active segment as the preallocator sees it. Zeroing
// (and changing file) happens under allocMu, held through the write and
// the fsync; the writer takes allocMu only when it must zero synchronously
// or switch segments, so it waits for an in-progress chunk rather than
// racing it, and never waits otherwise: it reads allocated and publishes
// written through atomics.
type zeroedFile struct {
	file      *os.File     // nil while the log has no active segment; guarded by allocMu
	allocated atomic.Int64 // bytes of file that are durable: records, then zeros; stored under allocMu
	written   atomic.Int64 // bytes of records in file
	byWriter  atomic.Int64 // times the writer had to zero synchronously
}

// startPreallocator starts the background goroutine; Close stops it.
func (l *Log) startPreallocator() {
	l.preallocWake = make(chan struct{}, 1)
	l.preallocDone = make(chan struct{})
	go l.preallocLoop()
}

func (l *Log) preallocLoop() {
	defer close(l.preallocDone)
	for range l.preallocWake {
		for l.zeroOneChunkAhead() {
		}
	}
}

// wakePreallocator tells the goroutine that the records grew.
func (l *Log) wakePreallocator() {
	if l.preallocWake == nil {
		return
	}
	select {
	case l.preallocWake <- struct{}{}:
	default:
	}
}

// zeroOneChunkAhead zeroes one more chunk if the headroom is under
// preallocAheadBytes, and reports whether it did. A failure is left for
// the writer to meet, and report, when it has to zero synchronously.
func (l *Log) zeroOneChunkAhead() bool {
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	z := &l.zeroed
	allocated := z.allocated.Load()
	if z.file == nil || l.closed.Load() || allocated-z.written.Load() >= preallocAheadBytes ||
		allocated >= l.segmentBytesMax {
		return false
	}
	if err := l.zeroTo(z, allocated+preallocChunkBytes); err != nil {
		l.logger.Debug("wal: background preallocation failed; the writer will retry", "err", err)
		return false
	}
	return true
}

// ensureZeroed makes the active segment durable up to at least end, with
// zeros after the records, before the writer writes there.
func (l *Log) ensureZeroed(end int64) error {
	if end <= l.zeroed.allocated.Load() {
		return nil
	}
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	if end <= l.zeroed.allocated.Load() {
		return nil
	}
	l.zeroed.byWriter.Add(1)
	return l.zeroTo(&l.zeroed, (end+preallocChunkBytes-1)/preallocChunkBytes*preallocChunkBytes)
}

// zeroTo writes zeros from z.allocated up to target and fsyncs the file,
// size and block map included. It requires allocMu.
func (l *Log) zeroTo(z *zeroedFile, target int64) error {
	for at := z.allocated.Load(); at < target; {
		n := min(int64(len(zeroChunk)), target-at)
		if _, err := z.file.WriteAt(zeroChunk[:n], at); err != nil {
			return fmt.Errorf("wal: preallocate %s: %w", z.file.Name(), err)
		}
		at += n
	}
	if !l.noSync {
		if err := z.file.Sync(); err != nil {
			return fmt.Errorf("wal: fsync %s after preallocating: %w", z.file.Name(), err)
		}
	}
	l.zeroedChunks.Add(uint64((target - z.allocated.Load() + preallocChunkBytes - 1) / preallocChunkBytes))
	z.allocated.Store(target)
	return nil
}

// setZeroed records the writer's view of the active segment: a new or
// closed segment (file), or records appended (written).
func (l *Log) setZeroed(file *os.File, allocated, written int64) {
	l.allocMu.Lock()
	l.zeroed.file = file
	l.zeroed.allocated.Store(allocated)
	l.zeroed.written.Store(written)
	l.allocMu.Unlock()
}

// noteWritten records that the active segment's records now end at
// written, and wakes the preallocator if the headroom fell under
// preallocAheadBytes and the segment is not zeroed to its end: only
// then has it anything to do (zeroOneChunkAhead). Waking it at every
// write would cost every group commit a goroutine hand-off, and with an
// idle processor a thread woken from its futex for nothing.
func (l *Log) noteWritten(written int64) {
	l.zeroed.written.Store(written)
	allocated := l.zeroed.allocated.Load()
	if allocated-written < preallocAheadBytes && allocated < l.segmentBytesMax {
		l.wakePreallocator()
	}
}
