package wal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sort"
)

// readBufferBytes is the read buffer of one ReadFrom call.
const readBufferBytes = 256 << 10

// ReadFrom calls fn for every entry with Version > after, in version order, reading from disk. It
// finds the first segment to read with the in-memory index of segment start versions (no scan from
// the start of the log); inside that segment it skips earlier records by their length without
// reading their payloads.
//
// ReadFrom is safe to call concurrently with Append and TruncateBefore. It delivers the entries that
// were durable when it started (up to the LastVersion() of that moment) and then returns nil; call it
// again to get later ones. Each Payload is freshly allocated and may be retained by fn. Every
// delivered record is verified (checksum, version); a failure returns an error wrapping ErrCorrupt.
// If fn returns an error, ReadFrom stops and returns it unchanged.
//
// If after < FirstVersion()-1 it returns ErrCompacted: entries were removed by retention. It also
// returns ErrCompacted if retention removes a segment before ReadFrom gets to it.
func (l *Log) ReadFrom(after uint64, fn func(Entry) error) error {
	segments, err := l.segmentsToRead(after)
	if err != nil {
		return err
	}
	r := segmentReader{buf: bufio.NewReaderSize(nil, readBufferBytes), after: after, next: after + 1}
	for _, s := range segments {
		if err := r.read(s, fn); err != nil {
			return err
		}
	}
	return nil
}

// segmentsToRead snapshots the index entries of the segments holding versions above after.
func (l *Log) segmentsToRead(after uint64) ([]segment, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	l.stateMu.RLock()
	defer l.stateMu.RUnlock()
	if len(l.segments) == 0 || after >= l.lastVersionLocked() {
		return nil, nil
	}
	if first := l.segments[0].firstVersion; after+1 < first {
		return nil, fmt.Errorf("%w: asked for versions after %d, oldest stored is %d", ErrCompacted, after, first)
	}
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].lastVersion > after })
	return slices.Clone(l.segments[i:]), nil
}

// segmentReader reads consecutive segments for one ReadFrom call.
type segmentReader struct {
	buf   *bufio.Reader
	after uint64 // records up to this version are skipped
	next  uint64 // version the next delivered record must carry
}

func (r *segmentReader) read(s segment, fn func(Entry) error) error {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: segment %s was removed while reading", ErrCompacted, s.path)
	}
	if err != nil {
		return fmt.Errorf("wal: open segment: %w", err)
	}
	defer f.Close()
	r.buf.Reset(io.NewSectionReader(f, 0, s.sizeBytes)) // never past what was durable at the snapshot
	if err := r.readHeader(s); err != nil {
		return err
	}
	for offset := int64(segmentHeaderBytes); offset < s.sizeBytes; {
		n, err := r.readRecord(s, offset, fn)
		if err != nil {
			return err
		}
		offset += n
	}
	return nil
}

func (r *segmentReader) readHeader(s segment) error {
	var b [segmentHeaderBytes]byte
	if _, err := io.ReadFull(r.buf, b[:]); err != nil {
		return r.readError(s, 0, err)
	}
	firstVersion, defect, err := decodeSegmentHeader(b[:])
	if err != nil {
		return err
	}
	if defect != "" || firstVersion != s.firstVersion {
		return &CorruptError{File: s.path, Offset: 0, Version: s.firstVersion, Reason: "segment header changed since Open"}
	}
	return nil
}

// readRecord handles the record at offset (skipping or delivering it) and returns its size on disk.
func (r *segmentReader) readRecord(s segment, offset int64, fn func(Entry) error) (int64, error) {
	var raw [recordHeaderBytes]byte
	if _, err := io.ReadFull(r.buf, raw[:]); err != nil {
		return 0, r.readError(s, offset, err)
	}
	h := decodeRecordHeader(raw[:])
	size := recordBytes(int(h.payloadBytes))
	if h.payloadBytes > EntryBytesMax || offset+size > s.sizeBytes {
		return 0, r.corrupt(s, offset, fmt.Sprintf("record length %d does not fit the segment", h.payloadBytes))
	}
	if h.version <= r.after && r.next == r.after+1 { // still before the first wanted record
		_, err := r.buf.Discard(int(h.payloadBytes))
		return size, r.readError(s, offset, err)
	}
	payload := make([]byte, h.payloadBytes)
	if _, err := io.ReadFull(r.buf, payload); err != nil {
		return 0, r.readError(s, offset, err)
	}
	if !checksumMatches(raw[:], payload) || h.version != r.next {
		return 0, r.corrupt(s, offset, fmt.Sprintf("record (version %d) fails verification", h.version))
	}
	if err := fn(Entry{Version: h.version, Payload: payload}); err != nil {
		return 0, err
	}
	r.next++
	return size, nil
}

// readError turns a read failure into an error; running out of bytes below the durable size means the
// file shrank, which is corruption.
func (r *segmentReader) readError(s segment, offset int64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return r.corrupt(s, offset, "segment is shorter than when it was written")
	default:
		return fmt.Errorf("wal: read %s: %w", s.path, err)
	}
}

func (r *segmentReader) corrupt(s segment, offset int64, reason string) error {
	return &CorruptError{File: s.path, Offset: offset, Version: r.next, Reason: reason}
}
