package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// On-disk layout. All integers are little-endian. See doc.go for the rationale.
const (
	// segmentMagic opens every segment file.
	segmentMagic = "TKWL"
	// formatVersion is written in every segment header; Open refuses other values.
	formatVersion uint32 = 1

	// segmentHeaderBytes: magic(4) formatVersion(4) firstVersion(8) headerCRC(4).
	segmentHeaderBytes = 20
	// recordHeaderBytes: payloadLength(4) CRC(4) version(8); the payload follows.
	recordHeaderBytes = 16

	// EntryBytesMax bounds one payload. Readers and recovery allocate a buffer of the length a record
	// header claims, so the bound keeps a damaged length field from turning into a multi-gigabyte
	// allocation; it is also far above any sane writeset (a replicated OLTP transaction that ships
	// 64 MiB of changed rows is a bug upstream, not a workload), and equal to the default segment size
	// so one record never dwarfs a segment.
	EntryBytesMax = 64 << 20

	// segmentBytesDefault is used when Options.SegmentBytes is zero.
	segmentBytesDefault = 64 << 20

	segmentFileSuffix = ".wal"
	// segmentNameDigits is the zero-padded width of a segment file name: enough for any uint64,
	// so lexical order of the names equals numeric order of their first versions.
	segmentNameDigits = 20
)

// crcTable is CRC-32C (Castagnoli): hardware-accelerated on amd64 and arm64 and a better detector of
// burst errors than the IEEE polynomial.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

func segmentFileName(firstVersion uint64) string {
	return fmt.Sprintf("%0*d%s", segmentNameDigits, firstVersion, segmentFileSuffix)
}

// parseSegmentFileName returns the first version encoded in a segment file name.
func parseSegmentFileName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segmentFileSuffix)
	if !ok || len(digits) != segmentNameDigits {
		return 0, false
	}
	version, err := strconv.ParseUint(digits, 10, 64)
	return version, err == nil
}

// appendSegmentHeader appends the header of a segment whose first record has firstVersion.
func appendSegmentHeader(buf []byte, firstVersion uint64) []byte {
	start := len(buf)
	buf = append(buf, segmentMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, formatVersion)
	buf = binary.LittleEndian.AppendUint64(buf, firstVersion)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[start:], crcTable))
}

// headerDefect describes why a segment header cannot be used. A damaged header is a defect (it may
// be a torn write); a well-formed header of an unknown format is not.
type headerDefect string

// decodeSegmentHeader returns the first version stored in a segment header, a defect if the header
// is damaged, or an error if it is intact but of a format this code does not understand.
func decodeSegmentHeader(b []byte) (uint64, headerDefect, error) {
	if len(b) < segmentHeaderBytes {
		return 0, "incomplete segment header", nil
	}
	if string(b[0:4]) != segmentMagic {
		return 0, "bad segment magic", nil
	}
	if crc32.Checksum(b[0:16], crcTable) != binary.LittleEndian.Uint32(b[16:20]) {
		return 0, "segment header checksum mismatch", nil
	}
	if v := binary.LittleEndian.Uint32(b[4:8]); v != formatVersion {
		return 0, "", fmt.Errorf("wal: unsupported segment format version %d (this build reads %d)", v, formatVersion)
	}
	return binary.LittleEndian.Uint64(b[8:16]), "", nil
}

// recordBytes is the size on disk of a record carrying payloadBytes of payload.
func recordBytes(payloadBytes int) int64 {
	return recordHeaderBytes + int64(payloadBytes)
}

// appendRecord encodes e at the end of buf. The checksum covers version and payload; it is computed
// on the encoded bytes so that no temporary buffer is needed.
func appendRecord(buf []byte, e Entry) []byte {
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(e.Payload)))
	buf = binary.LittleEndian.AppendUint32(buf, 0) // checksum, filled below
	buf = binary.LittleEndian.AppendUint64(buf, e.Version)
	buf = append(buf, e.Payload...)
	checksum := crc32.Checksum(buf[start+8:], crcTable)
	binary.LittleEndian.PutUint32(buf[start+4:], checksum)
	return buf
}

// recordHeader is a decoded record header.
type recordHeader struct {
	payloadBytes uint32
	checksum     uint32
	version      uint64
}

func decodeRecordHeader(b []byte) recordHeader {
	return recordHeader{
		payloadBytes: binary.LittleEndian.Uint32(b[0:4]),
		checksum:     binary.LittleEndian.Uint32(b[4:8]),
		version:      binary.LittleEndian.Uint64(b[8:16]),
	}
}

// checksumMatches reports whether payload together with the header's version bytes (raw[8:16])
// hashes to the stored checksum.
func checksumMatches(raw []byte, payload []byte) bool {
	h := decodeRecordHeader(raw)
	return crc32.Update(crc32.Checksum(raw[8:16], crcTable), crcTable, payload) == h.checksum
}
