package wal

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// TruncateAfter removes the entries after version from the end of the log, durably: for a caller
// whose own recovery finds the log's tail incomplete in its terms (the certifier cuts a streamed
// transaction whose copy into the log a crash interrupted). Segments after the one holding version
// are removed newest first, each removal synced, and that segment is cut after version's record and
// synced, so a crash in between leaves a shorter log that ends at a record, which the caller cuts
// again. It must not run while a Write is waiting for its Wait. Cutting every entry leaves an empty
// log, which starts again at version 1: refused unless the log starts at version 1.
func (l *Log) TruncateAfter(version uint64) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if len(l.unpublished) > 0 {
		panic("wal: TruncateAfter with a Write not yet waited for")
	}
	if version >= l.lastVersionLocked() {
		return nil
	}
	if first := l.segments[0].firstVersion; version+1 < first || (version+1 == first && first > 1) {
		return fmt.Errorf("wal: cutting the log after version %d would remove all of it, and it starts at version %d: "+
			"an empty log starts again at version 1", version, first)
	}
	for len(l.segments) > 0 && l.segments[len(l.segments)-1].firstVersion > version {
		if err := l.removeNewestSegment(); err != nil {
			return err
		}
	}
	if len(l.segments) == 0 {
		return nil
	}
	return l.cutActiveSegmentAfter(version)
}

// removeNewestSegment removes the last segment and makes the one before it the active one.
func (l *Log) removeNewestSegment() error {
	newest := l.segments[len(l.segments)-1]
	if err := l.closeActive(); err != nil {
		return err
	}
	l.stateMu.Lock()
	l.segments = l.segments[:len(l.segments)-1]
	l.sizeBytes -= newest.sizeBytes
	l.stateMu.Unlock()
	if err := os.Remove(newest.path); err != nil {
		return l.unusable(fmt.Errorf("wal: remove segment %s: %w", newest.path, err))
	}
	if err := l.syncLogDir(); err != nil {
		return l.unusable(err)
	}
	if len(l.segments) == 0 {
		return nil
	}
	return l.reopenActive()
}

// cutActiveSegmentAfter truncates the last segment after version's record.
func (l *Log) cutActiveSegmentAfter(version uint64) error {
	last := &l.segments[len(l.segments)-1]
	end, err := recordEndOffset(last.path, version)
	if err != nil {
		return l.unusable(err)
	}
	if err := l.closeActive(); err != nil {
		return err
	}
	if err := truncateDurably(last.path, end); err != nil {
		return l.unusable(err)
	}
	l.stateMu.Lock()
	l.sizeBytes -= last.sizeBytes - end
	last.sizeBytes, last.lastVersion = end, version
	l.stateMu.Unlock()
	return l.reopenActive()
}

// closeActive closes the active segment file (the preallocator lets go of it first).
func (l *Log) closeActive() error {
	if l.active == nil {
		return nil
	}
	l.setZeroed(nil, 0, 0)
	err := l.active.Close()
	l.active = nil
	if err != nil {
		return l.unusable(fmt.Errorf("wal: close active segment: %w", err))
	}
	return nil
}

// reopenActive opens the last segment for appending, its size being its records.
func (l *Log) reopenActive() error {
	last := l.segments[len(l.segments)-1]
	f, err := os.OpenFile(last.path, os.O_WRONLY, 0)
	if err != nil {
		return l.unusable(fmt.Errorf("wal: open active segment: %w", err))
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return l.unusable(fmt.Errorf("wal: stat active segment: %w", err))
	}
	l.active = f
	l.setZeroed(f, info.Size(), last.sizeBytes)
	return nil
}

// unusable marks the log failed: its state on disk is no longer what the index says.
func (l *Log) unusable(err error) error {
	l.failed = fmt.Errorf("wal: log unusable after a failed cut: %w", err)
	return l.failed
}

// recordEndOffset returns the offset after the record of version in the segment at path, reading
// the record headers only (the records were verified when the log was opened).
func recordEndOffset(path string, version uint64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("wal: open segment: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	if _, err := r.Discard(segmentHeaderBytes); err != nil {
		return 0, fmt.Errorf("wal: read %s: %w", path, err)
	}
	offset := int64(segmentHeaderBytes)
	for {
		var raw [recordHeaderBytes]byte
		if _, err := io.ReadFull(r, raw[:]); err != nil {
			return 0, fmt.Errorf("wal: read %s at offset %d: %w", path, offset, err)
		}
		h := decodeRecordHeader(raw[:])
		offset += recordBytes(int(h.payloadBytes))
		if h.version == version {
			return offset, nil
		}
		if h.version > version || h.payloadBytes > EntryBytesMax {
			return 0, &CorruptError{File: path, Offset: offset, Version: version, Reason: "record not found where the index puts it"}
		}
		if _, err := r.Discard(int(h.payloadBytes)); err != nil {
			return 0, fmt.Errorf("wal: read %s: %w", path, err)
		}
	}
}
