package wal

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// scanBufferBytes is the read buffer used while verifying a segment during recovery.
const scanBufferBytes = 1 << 20

// segmentFile is a segment file found in the log directory.
type segmentFile struct {
	path         string
	firstVersion uint64 // from the file name
}

// listSegmentFiles returns the segment files of dir in version order. Files without the segment
// suffix (the lock file, an operator's notes) are ignored; a misnamed segment is an error.
func listSegmentFiles(dir string) ([]segmentFile, error) {
	dirEntries, err := os.ReadDir(dir) // sorted by name, which is version order
	if err != nil {
		return nil, fmt.Errorf("wal: list directory: %w", err)
	}
	var files []segmentFile
	for _, e := range dirEntries {
		if !strings.HasSuffix(e.Name(), segmentFileSuffix) {
			continue
		}
		firstVersion, ok := parseSegmentFileName(e.Name())
		if !ok || firstVersion == 0 || !e.Type().IsRegular() {
			return nil, fmt.Errorf("wal: unexpected file %q in log directory %s", e.Name(), dir)
		}
		files = append(files, segmentFile{path: filepath.Join(dir, e.Name()), firstVersion: firstVersion})
	}
	return files, nil
}

// recoverSegments verifies every segment, repairs a torn tail of the last one and returns the index.
func recoverSegments(files []segmentFile, logger *slog.Logger) ([]segment, error) {
	var segments []segment
	for i, file := range files {
		if err := checkFollows(segments, file); err != nil {
			return nil, err
		}
		scan, err := scanSegment(file)
		if err != nil {
			return nil, err
		}
		if scan.defect != "" {
			isLast := i == len(files)-1
			if err := recoverDefect(scan, isLast, logger); err != nil {
				return nil, err
			}
		}
		if scan.hasRecords() {
			segments = append(segments, scan.segment())
		}
	}
	return segments, nil
}

// checkFollows verifies that file starts right after the last indexed segment.
func checkFollows(segments []segment, file segmentFile) error {
	if len(segments) == 0 {
		return nil // the first segment may start anywhere: retention removed what came before
	}
	want := segments[len(segments)-1].lastVersion + 1
	if file.firstVersion == want {
		return nil
	}
	return &CorruptError{File: file.path, Offset: 0, Version: want,
		Reason: fmt.Sprintf("segment starts at version %d but the previous segment ends at version %d",
			file.firstVersion, want-1)}
}

// segmentScan is what recovery learned from one segment file.
type segmentScan struct {
	segmentFile
	lastVersion uint64 // version of the last good record; firstVersion-1 when there is none
	goodBytes   int64  // end of the last good record; 0 when the header is damaged
	fileBytes   int64
	defect      string // why the good prefix ends before fileBytes (or is empty); "" when sound
}

func (s *segmentScan) hasRecords() bool    { return s.lastVersion >= s.firstVersion }
func (s *segmentScan) nextVersion() uint64 { return s.lastVersion + 1 }

func (s *segmentScan) segment() segment {
	return segment{path: s.path, firstVersion: s.firstVersion, lastVersion: s.lastVersion, sizeBytes: s.goodBytes}
}

func (s *segmentScan) corruptError(reason string) *CorruptError {
	return &CorruptError{File: s.path, Offset: s.goodBytes, Version: s.nextVersion(), Reason: reason}
}

// scanSegment reads and verifies a segment up to its first defect. A defect (damaged or incomplete
// header or record) is reported in the scan, since only the caller knows whether it may be a torn
// tail; an intact record with the wrong version is corruption and returned as an error.
func scanSegment(file segmentFile) (segmentScan, error) {
	scan := segmentScan{segmentFile: file, lastVersion: file.firstVersion - 1}
	f, err := os.Open(file.path)
	if err != nil {
		return scan, fmt.Errorf("wal: open segment: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return scan, fmt.Errorf("wal: stat segment: %w", err)
	}
	scan.fileBytes = info.Size()
	r := bufio.NewReaderSize(f, scanBufferBytes)
	if err := scan.readHeader(r); err != nil || scan.defect != "" {
		return scan, err
	}
	var payload []byte
	for scan.goodBytes < scan.fileBytes && scan.defect == "" {
		if err := scan.readRecord(r, &payload); err != nil {
			return scan, err
		}
	}
	if scan.defect == "" && !scan.hasRecords() {
		scan.defect = "segment holds no records"
	}
	return scan, nil
}

func (s *segmentScan) readHeader(r io.Reader) error {
	if s.fileBytes < segmentHeaderBytes {
		s.defect = fmt.Sprintf("incomplete segment header (%d bytes)", s.fileBytes)
		return nil
	}
	var b [segmentHeaderBytes]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("wal: read %s: %w", s.path, err)
	}
	firstVersion, defect, err := decodeSegmentHeader(b[:])
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	if defect != "" {
		s.defect = string(defect)
		return nil
	}
	if firstVersion != s.firstVersion {
		return s.corruptError(fmt.Sprintf("header says first version %d, file name says %d", firstVersion, s.firstVersion))
	}
	s.goodBytes = segmentHeaderBytes
	return nil
}

// readRecord verifies the record at s.goodBytes and advances past it, or records a defect.
func (s *segmentScan) readRecord(r io.Reader, payload *[]byte) error {
	remaining := s.fileBytes - s.goodBytes
	if remaining < recordHeaderBytes {
		s.defect = fmt.Sprintf("incomplete record header (%d bytes)", remaining)
		return nil
	}
	var raw [recordHeaderBytes]byte
	if _, err := io.ReadFull(r, raw[:]); err != nil {
		return fmt.Errorf("wal: read %s: %w", s.path, err)
	}
	h := decodeRecordHeader(raw[:])
	if defect := recordHeaderDefect(raw, h, remaining); defect != "" {
		s.defect = defect
		return nil
	}
	p := resize(payload, int(h.payloadBytes))
	if _, err := io.ReadFull(r, p); err != nil {
		return fmt.Errorf("wal: read %s: %w", s.path, err)
	}
	if !checksumMatches(raw[:], p) {
		s.defect = "record checksum mismatch"
		return nil
	}
	if h.version != s.nextVersion() {
		return s.corruptError(fmt.Sprintf("record has a valid checksum but version %d", h.version))
	}
	s.lastVersion = h.version
	s.goodBytes += recordBytes(len(p))
	return nil
}

// recordHeaderDefect checks what can be checked before reading the payload.
func recordHeaderDefect(raw [recordHeaderBytes]byte, h recordHeader, remaining int64) string {
	if raw == [recordHeaderBytes]byte{} {
		return "zero-filled record header"
	}
	if h.payloadBytes > EntryBytesMax {
		return fmt.Sprintf("record length %d exceeds the %d-byte limit", h.payloadBytes, EntryBytesMax)
	}
	if need := recordBytes(int(h.payloadBytes)); remaining < need {
		return fmt.Sprintf("incomplete record (%d of %d bytes)", remaining, need)
	}
	return ""
}

// resize returns (*buf)[:n], growing the buffer if needed.
func resize(buf *[]byte, n int) []byte {
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	return (*buf)[:n]
}

// recoverDefect decides whether a defect is a torn tail (repaired) or corruption (error).
// A torn tail can only be at the end of the last segment: a later segment is created only once the
// previous one is durable, and a crash during one Append can only damage bytes of that Append. So a
// defect followed by any valid record, or in an earlier segment, is corruption.
func recoverDefect(scan segmentScan, isLast bool, logger *slog.Logger) error {
	if !isLast {
		return scan.corruptError(scan.defect + ", in a segment that is not the last")
	}
	if scan.hasRecords() {
		zeros, err := onlyZerosAfter(scan)
		if err != nil {
			return err
		}
		if zeros {
			// Preallocated space (append.go), or an unacknowledged batch that never reached the
			// disk: nothing to repair, the next append writes there.
			logger.Debug("wal: zero-filled space after the last record", "file", scan.path,
				"bytes", scan.fileBytes-scan.goodBytes, "last_version", scan.lastVersion)
			return nil
		}
	}
	later, found, err := findValidRecordAfter(scan)
	if err != nil {
		return err
	}
	if found {
		return scan.corruptError(fmt.Sprintf("%s, but a valid record (version %d) follows at offset %d",
			scan.defect, later.version, later.offset))
	}
	return dropTornTail(scan, logger)
}

// onlyZerosAfter reports whether every byte after the segment's good records is zero.
func onlyZerosAfter(scan segmentScan) (bool, error) {
	rest, err := readRange(scan.path, scan.goodBytes, scan.fileBytes-scan.goodBytes)
	if err != nil {
		return false, err
	}
	for _, b := range rest {
		if b != 0 {
			return false, nil
		}
	}
	return true, nil
}

type recordPosition struct {
	offset  int64
	version uint64
}

// findValidRecordAfter searches every byte offset after the defect for a record that verifies and
// carries a version that could follow the good prefix. The length field of the defective record may
// itself be the damaged part, so records cannot be skipped by length. The search reads the rest of
// the file, which after a genuine torn tail is at most one batch.
func findValidRecordAfter(scan segmentScan) (recordPosition, bool, error) {
	from := scan.goodBytes + 1
	if from+recordHeaderBytes > scan.fileBytes {
		return recordPosition{}, false, nil
	}
	rest, err := readRange(scan.path, from, scan.fileBytes-from)
	if err != nil {
		return recordPosition{}, false, err
	}
	for i := 0; i+recordHeaderBytes <= len(rest); i++ {
		offset := from + int64(i)
		versionMax := scan.nextVersion() + uint64(offset-scan.goodBytes)/recordHeaderBytes
		if version, ok := validRecordAt(rest[i:], scan.nextVersion(), versionMax); ok {
			return recordPosition{offset: offset, version: version}, true, nil
		}
	}
	return recordPosition{}, false, nil
}

// validRecordAt reports whether b starts with a complete record that verifies and whose version is in
// [versionMin, versionMax]. The version filter is checked first, which keeps the byte-by-byte search cheap.
func validRecordAt(b []byte, versionMin, versionMax uint64) (uint64, bool) {
	h := decodeRecordHeader(b)
	if h.version < versionMin || h.version > versionMax || h.payloadBytes > EntryBytesMax {
		return 0, false
	}
	end := recordBytes(int(h.payloadBytes))
	if end > int64(len(b)) || !checksumMatches(b, b[recordHeaderBytes:end]) {
		return 0, false
	}
	return h.version, true
}

func readRange(path string, offset, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wal: open segment: %w", err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, offset); err != nil {
		return nil, fmt.Errorf("wal: read %s: %w", path, err)
	}
	return b, nil
}

// dropTornTail cuts the last segment after its last good record (or removes it when it holds no good
// record), makes that durable, and logs it.
func dropTornTail(scan segmentScan, logger *slog.Logger) error {
	droppedBytes := scan.fileBytes - scan.goodBytes
	action := "truncated torn tail of the last segment"
	var err error
	if scan.hasRecords() {
		err = truncateDurably(scan.path, scan.goodBytes)
	} else {
		action, droppedBytes = "removed torn last segment", scan.fileBytes
		err = removeDurably(scan.path)
	}
	if err != nil {
		return err
	}
	logger.Warn("wal: "+action+" (left by a crash during an unacknowledged append)",
		"file", scan.path, "dropped_bytes", droppedBytes, "last_good_version", scan.lastVersion, "defect", scan.defect)
	return nil
}

func truncateDurably(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("wal: open segment for truncation: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("wal: truncate torn tail: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wal: fsync after truncation: %w", err)
	}
	return nil
}

func removeDurably(path string) error {
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("wal: remove torn segment: %w", err)
	}
	return syncDir(filepath.Dir(path))
}
