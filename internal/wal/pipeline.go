package wal

import (
	"fmt"
	"os"
)

// Pipelined group commit. Append writes a batch and fsyncs it before the
// next batch can be written, so at moderate load a request that arrives
// just after an fsync started waits for that fsync and then for its own:
// up to two fsync times. Write and Pending.Wait split Append in two: Write
// writes the batch (one write call, under the append lock, in order) and
// returns at once; Wait fsyncs it, outside the lock, and then publishes it
// to readers in the order of the writes. A writer can so have the next
// batch written and its fsync started while the previous fsync is still
// running: concurrent fdatasyncs of one file overlap on the devices tried
// (two in flight doubled the syncs per second at the same latency), and a
// request waits for about one fsync.
//
// Durability is unchanged: Wait returns nil only once the batch, and every
// batch written before it, is on stable storage and visible to readers.
// Nothing is ever reported durable that a crash could lose, and recovery
// is the same (records written but not yet synced are a tail like any
// other: whole, torn or missing).
//
// A batch that would start a new segment or cross a segment boundary is
// written the synchronous way, after every earlier batch was published, and
// its Pending is complete at once.

// Pending is a batch written by Write and not yet known to be durable.
type Pending struct {
	l           *Log
	seq         uint64 // order of the write; 0 for a batch Write made durable itself
	file        *os.File
	first, last uint64
	bytes       int64
}

// Write writes entries (consecutive versions from the last version written,
// durable or not) and returns the Pending whose Wait makes them durable.
// Each Pending's Wait must be called exactly once; the Waits of earlier
// batches must be able to run while Write is called (Write may wait for
// them), so call them from other goroutines. Errors are as for Append.
func (l *Log) Write(entries []Entry) (*Pending, error) {
	if len(entries) == 0 {
		return &Pending{}, nil
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return nil, err
	}
	l.mustContinue(entries, l.writtenVersionLocked())
	if err := checkPayloadSizes(entries); err != nil {
		return nil, err
	}
	offset := l.writtenBytesLocked()
	if l.active == nil || offset+batchRecordBytes(entries) > l.segmentBytesMax {
		return &Pending{}, l.appendNowLocked(entries)
	}
	l.buf = l.buf[:0]
	for _, e := range entries {
		l.buf = appendRecord(l.buf, e)
	}
	if err := l.writeOnly(l.active, offset); err != nil {
		l.failed = fmt.Errorf("wal: log unusable after a failed write: %w", err)
		return nil, l.failed
	}
	l.writeSeq++
	p := &Pending{l: l, seq: l.writeSeq, file: l.active, first: entries[0].Version, last: entries[len(entries)-1].Version,
		bytes: int64(len(l.buf))}
	l.unpublished = append(l.unpublished, p)
	l.noteWritten(offset + p.bytes)
	l.releaseHugeBuffer()
	l.appends.Add(1)
	l.entries.Add(uint64(len(entries)))
	return p, nil
}

// Wait makes the batch durable and visible, after every batch written
// before it. On error the log is unusable, as after a failed Append.
func (p *Pending) Wait() error {
	if p.seq == 0 {
		return nil // durable already, or empty
	}
	l := p.l
	syncErr := l.syncData(p.file)
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	for l.publishedSeq != p.seq-1 && l.failed == nil {
		l.published.Wait()
	}
	defer l.published.Broadcast()
	if l.failed != nil {
		return l.failed
	}
	if syncErr != nil {
		l.failed = fmt.Errorf("wal: log unusable after a failed append: %w", syncErr)
		return l.failed
	}
	l.publish(false, p.first, p.last, p.bytes)
	l.unpublished = l.unpublished[1:]
	l.publishedSeq = p.seq
	return nil
}

// appendNowLocked is Append's body: write, fsync and publish, after every
// batch already written was published.
func (l *Log) appendNowLocked(entries []Entry) error {
	if err := l.waitPublishedLocked(); err != nil {
		return err
	}
	for rest := entries; len(rest) > 0; {
		written, err := l.appendToOneSegment(rest)
		if err != nil {
			l.failed = fmt.Errorf("wal: log unusable after a failed append: %w", err)
			l.published.Broadcast()
			return l.failed
		}
		rest = rest[written:]
	}
	l.appends.Add(1)
	l.entries.Add(uint64(len(entries)))
	return nil
}

// waitPublishedLocked waits, releasing appendMu meanwhile, until every
// batch written is published.
func (l *Log) waitPublishedLocked() error {
	for len(l.unpublished) > 0 && l.failed == nil {
		l.published.Wait()
	}
	return l.usable()
}

// writtenVersionLocked is the last version written, durable or not.
func (l *Log) writtenVersionLocked() uint64 {
	if n := len(l.unpublished); n > 0 {
		return l.unpublished[n-1].last
	}
	return l.lastVersionLocked()
}

// writtenBytesLocked is where the next record goes in the active segment.
func (l *Log) writtenBytesLocked() int64 {
	if l.active == nil {
		return 0
	}
	written := l.activeSegmentBytes()
	for _, p := range l.unpublished {
		written += p.bytes
	}
	return written
}

func batchRecordBytes(entries []Entry) int64 {
	n := int64(0)
	for _, e := range entries {
		n += recordBytes(len(e.Payload))
	}
	return n
}

// writeOnly writes l.buf to f at offset in one call, over preallocated
// zeros, without syncing (writeDurably without its fdatasync).
func (l *Log) writeOnly(f *os.File, offset int64) error {
	if err := l.ensureZeroed(offset + int64(len(l.buf))); err != nil {
		return err
	}
	l.writes.Add(1)
	n, err := f.WriteAt(l.buf, offset)
	l.bytesWritten.Add(uint64(n))
	if err != nil {
		return fmt.Errorf("wal: write %s: %w", f.Name(), err)
	}
	return nil
}
