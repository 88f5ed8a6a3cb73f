package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Append makes entries durable, in order, as one group commit: the caller batches everything pending
// into one call. The batch is encoded into a reused buffer and written with ONE write call per segment
// touched, followed by ONE fsync of that segment (plus one fsync of the directory when a segment file
// is created). A batch that does not cross a segment boundary therefore costs one write and one fsync.
//
// Entries must have consecutive versions starting at LastVersion()+1; anything else is a programming
// error and panics. An empty batch is a no-op.
//
// When Append returns nil, every entry is on stable storage. A payload larger than 64 MiB is refused
// with ErrEntryTooLarge before anything is written, and the log stays usable. Any other error means
// the outcome on disk is unknown (after a failed fsync, the kernel may have dropped the dirty pages
// while reporting the error once only): the log is unusable, every later Append and TruncateBefore
// returns the same error, and the caller must stop the process. The next Open recovers the log from
// what is on disk.
func (l *Log) Append(entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	l.mustContinue(entries, l.writtenVersionLocked())
	if err := checkPayloadSizes(entries); err != nil {
		return err
	}
	return l.appendNowLocked(entries) // after any pipelined batch (pipeline.go)
}

// mustContinue panics unless entries continue the log (whose last version
// written is last) without gap or repetition.
func (l *Log) mustContinue(entries []Entry, last uint64) {
	want := last + 1
	for i, e := range entries {
		if e.Version != want {
			panic(fmt.Sprintf("wal: Append entry %d of %d has version %d, want %d (versions must be consecutive from LastVersion()+1)",
				i, len(entries), e.Version, want))
		}
		want++
	}
}

func checkPayloadSizes(entries []Entry) error {
	for _, e := range entries {
		if len(e.Payload) > EntryBytesMax {
			return fmt.Errorf("%w: version %d has %d bytes, limit %d", ErrEntryTooLarge, e.Version, len(e.Payload), EntryBytesMax)
		}
	}
	return nil
}

// appendToOneSegment makes a prefix of entries durable in a single segment (the active one, or a new
// one when the active one is full) and returns how many entries it wrote.
func (l *Log) appendToOneSegment(entries []Entry) (int, error) {
	startsSegment := l.mustRoll(entries[0])
	segmentBytesBefore := int64(0)
	l.buf = l.buf[:0]
	if startsSegment {
		l.buf = appendSegmentHeader(l.buf, entries[0].Version)
	} else {
		segmentBytesBefore = l.activeSegmentBytes()
	}
	written := l.encodeWhileSegmentFits(entries, segmentBytesBefore)
	var err error
	if startsSegment {
		err = l.writeNewSegment(entries[0].Version)
	} else {
		err = l.writeDurably(l.active, segmentBytesBefore)
	}
	if err != nil {
		return 0, err
	}
	l.publish(startsSegment, entries[0].Version, entries[written-1].Version, int64(len(l.buf)))
	l.noteWritten(l.activeSegmentBytes())
	l.releaseHugeBuffer()
	return written, nil
}

// mustRoll reports whether e has to start a new segment.
func (l *Log) mustRoll(e Entry) bool {
	if l.active == nil {
		return true
	}
	return l.activeSegmentBytes()+recordBytes(len(e.Payload)) > l.segmentBytesMax
}

// activeSegmentBytes requires appendMu.
func (l *Log) activeSegmentBytes() int64 {
	return l.segments[len(l.segments)-1].sizeBytes
}

// encodeWhileSegmentFits appends records to l.buf until the next one would push the segment past
// segmentBytesMax. The first record is always taken (the caller made room for it, or it starts a new
// segment), so a record larger than a segment gets a segment of its own.
func (l *Log) encodeWhileSegmentFits(entries []Entry, segmentBytesBefore int64) int {
	n := 0
	for n < len(entries) {
		segmentBytesAfter := segmentBytesBefore + int64(len(l.buf)) + recordBytes(len(entries[n].Payload))
		if n > 0 && segmentBytesAfter > l.segmentBytesMax {
			break
		}
		l.buf = appendRecord(l.buf, entries[n])
		n++
	}
	return n
}

// writeNewSegment creates the segment file for firstVersion and makes l.buf (header and records)
// durable in it, directory entry included. The previous segment is already durable: it is closed
// first, so a later segment never exists on disk before the earlier one is complete.
func (l *Log) writeNewSegment(firstVersion uint64) error {
	if l.active != nil {
		if err := l.closeFullSegment(); err != nil {
			return err
		}
	}
	path := filepath.Join(l.dir, segmentFileName(firstVersion))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("wal: create segment: %w", err)
	}
	l.active = f
	l.setZeroed(f, 0, 0)
	l.segmentsCreated.Add(1)
	if err := l.writeDurably(f, 0); err != nil {
		return err
	}
	return l.syncLogDir()
}

// closeFullSegment trims the active segment's preallocated zeros, durably, and closes it: only the
// last segment may end in zeros (recovery takes zeros anywhere else for corruption).
func (l *Log) closeFullSegment() error {
	f := l.active
	l.setZeroed(nil, 0, 0) // waits for a chunk being zeroed in f
	if err := f.Truncate(l.activeSegmentBytes()); err != nil {
		return fmt.Errorf("wal: trim full segment %s: %w", f.Name(), err)
	}
	if err := l.syncFile(f); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("wal: close full segment: %w", err)
	}
	l.active = nil
	return nil
}

// writeDurably writes l.buf to f at offset in one call and makes it durable. The bytes are written
// over zeros preallocated (and fsynced) beforehand (prealloc.go), so the file's size and block map do
// not change and fdatasync has only the data to flush. Recovery takes a tail of zeros after the last
// record for this preallocated space (recover.go).
func (l *Log) writeDurably(f *os.File, offset int64) error {
	if err := l.writeOnly(f, offset); err != nil {
		return err
	}
	return l.syncData(f)
}

// publish makes durable bytes visible to readers.
func (l *Log) publish(startsSegment bool, firstVersion, lastVersion uint64, bytes int64) {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	l.sizeBytes += bytes
	if startsSegment {
		path := filepath.Join(l.dir, segmentFileName(firstVersion))
		l.segments = append(l.segments, segment{path: path, firstVersion: firstVersion, lastVersion: lastVersion, sizeBytes: bytes})
		return
	}
	active := &l.segments[len(l.segments)-1]
	active.lastVersion = lastVersion
	active.sizeBytes += bytes
}

// releaseHugeBuffer drops an encoding buffer that a huge batch grew, so that it is not retained.
func (l *Log) releaseHugeBuffer() {
	if cap(l.buf) > appendBufferBytesRetainMax {
		l.buf = make([]byte, 0, appendBufferBytesInitial)
	}
}

// TruncateBefore removes, oldest first, whole segment files whose entries are all below version
// (retention). It never removes the active (last) segment, so the log never becomes empty this way.
// Each removal is made durable (directory fsync) before the next, so a crash leaves a contiguous log.
// Readers that need removed entries get ErrCompacted.
func (l *Log) TruncateBefore(version uint64) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	for l.oldestSegmentIsBelow(version) {
		if err := l.removeOldestSegment(); err != nil {
			return err
		}
	}
	return nil
}

// oldestSegmentIsBelow requires appendMu.
func (l *Log) oldestSegmentIsBelow(version uint64) bool {
	return len(l.segments) > 1 && l.segments[0].lastVersion < version
}

func (l *Log) removeOldestSegment() error {
	oldest := l.segments[0]
	if err := os.Remove(oldest.path); err != nil {
		return fmt.Errorf("wal: remove segment: %w", err)
	}
	l.stateMu.Lock()
	l.segments = slices.Delete(l.segments, 0, 1)
	l.sizeBytes -= oldest.sizeBytes
	l.stateMu.Unlock()
	return l.syncLogDir()
}
