// Package logentry encodes and decodes the certifier's log entries: one
// committed version, its transaction id and its writeset, as the protobuf
// message certifierpb.LogEntry.
//
// An entry is encoded once, by the certifier, and the same bytes are written
// to the log, delivered to every replica and served by Fetch. Encode splits
// the work so that the expensive part (the writeset) is done before the
// version is known, outside the certifier's critical section: protobuf allows
// a message's fields in any order, so the version field is appended last.
//
// A streamed transaction commits as a span of entries, one per fragment of
// its writeset (AppendSpanEntry); RawHeaderOf reports an entry's span
// without decoding it.
package logentry

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// versionField and epochField are LogEntry.version's and LogEntry.epoch's
// field numbers.
const (
	versionField protowire.Number = 1
	epochField   protowire.Number = 9
)

// VersionBytesMax is what WithVersion adds at most: the version and the
// epoch, each a tag and a varint.
const VersionBytesMax = 2 * (1 + binary.MaxVarintLen64)

// Entry is an encoded log entry with its version.
type Entry struct {
	Version uint64
	Bytes   []byte
}

// Decode parses the whole entry.
func (e Entry) Decode() (*pb.LogEntry, error) { return Decode(e.Bytes) }

// Prefix is an entry encoded without its version.
type Prefix []byte

// EncodePrefix encodes everything but the version.
func EncodePrefix(txn *pb.TxnID, ws *pb.Writeset) Prefix {
	b, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, 0, 64), &pb.LogEntry{Txn: txn, Writeset: ws})
	if err != nil {
		panic(fmt.Sprintf("logentry: encode: %v", err)) // cannot fail for a well-formed message
	}
	return b
}

// writesetField is LogEntry.writeset's field number.
const writesetField protowire.Number = 3

// EncodePrefixOfEncoded is EncodePrefix for a writeset still encoded (an
// encoded Writeset, as CertifyRequestEncoded carries it): the bytes go into
// the entry as they are, with no decoding and no re-encoding, in one
// allocation sized for the whole entry. A LogEntry holding the decoded
// writeset encodes to the same bytes.
func EncodePrefixOfEncoded(txn *pb.TxnID, writeset []byte) Prefix {
	txnBytes := txnSize(txn)
	size := protowire.SizeTag(txnField) + protowire.SizeBytes(txnBytes)
	if len(writeset) > 0 {
		size += protowire.SizeTag(writesetField) + protowire.SizeBytes(len(writeset))
	}
	b := make([]byte, 0, size+VersionBytesMax)
	if txn != nil {
		b = protowire.AppendTag(b, txnField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(txnBytes))
		b = appendTxn(b, txn)
	}
	if len(writeset) > 0 {
		b = protowire.AppendTag(b, writesetField, protowire.BytesType)
		b = protowire.AppendBytes(b, writeset)
	}
	return b
}

// TxnID's fields: origin = 1, seq = 2.
const (
	txnOriginField protowire.Number = 1
	txnSeqField    protowire.Number = 2
)

func txnSize(txn *pb.TxnID) int {
	n := 0
	if o := txn.GetOrigin(); o != "" {
		n += protowire.SizeTag(txnOriginField) + protowire.SizeBytes(len(o))
	}
	if seq := txn.GetSeq(); seq != 0 {
		n += protowire.SizeTag(txnSeqField) + protowire.SizeVarint(seq)
	}
	return n
}

func appendTxn(b []byte, txn *pb.TxnID) []byte {
	if o := txn.GetOrigin(); o != "" {
		b = protowire.AppendTag(b, txnOriginField, protowire.BytesType)
		b = protowire.AppendString(b, o)
	}
	if seq := txn.GetSeq(); seq != 0 {
		b = protowire.AppendTag(b, txnSeqField, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	return b
}

// WithVersion completes the entry with its version and the epoch that
// certified it (omitted at 0, as protobuf does). The prefix must not be
// used afterwards.
func (p Prefix) WithVersion(version, epoch uint64) Entry {
	return Entry{Version: version, Bytes: appendVersion(p, version, epoch)}
}

// appendVersion appends the epoch (unless 0) and the version, the fields
// every entry ends with.
func appendVersion(b []byte, version, epoch uint64) []byte {
	if epoch != 0 {
		b = protowire.AppendTag(b, epochField, protowire.VarintType)
		b = protowire.AppendVarint(b, epoch)
	}
	b = protowire.AppendTag(b, versionField, protowire.VarintType)
	return protowire.AppendVarint(b, version)
}

// Encode encodes a whole entry.
func Encode(e *pb.LogEntry) Entry {
	return EncodePrefix(e.Txn, e.Writeset).WithVersion(e.Version, e.Epoch)
}

// Decode parses an encoded entry.
func Decode(b []byte) (*pb.LogEntry, error) {
	e := &pb.LogEntry{}
	if err := proto.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("decode log entry: %w", err)
	}
	return e, nil
}

// VersionOf reads only the version of an encoded entry, without decoding
// the writeset or the transaction id: what a receiver needs to check that
// entries arrive in order.
func VersionOf(b []byte) (uint64, error) {
	h, err := parseHeader(b, false)
	return h.Version, err
}

// RawHeader is Header with the origin still in the entry's bytes (it
// aliases them): reading it allocates nothing, which matters to a client
// that looks at every delivered entry.
type RawHeader struct {
	Version uint64
	// Epoch is LogEntry.epoch: 0 in an entry written before it existed.
	Epoch  uint64
	Origin []byte
	Seq    uint64
	// SpanFirst and SpanLast are LogEntry.span_first and span_last: the
	// versions of the span the entry is part of, both 0 for an entry that
	// is a transaction of its own.
	SpanFirst, SpanLast uint64
}

// InSpan reports whether the entry is part of a span (a streamed
// transaction, one entry per fragment).
func (h RawHeader) InSpan() bool { return h.SpanLast != 0 }

// RawHeaderOf reads an encoded entry's version, transaction id and span
// without allocating.
func RawHeaderOf(b []byte) (RawHeader, error) {
	var h RawHeader
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return h, fmt.Errorf("log entry: bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == versionField && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return h, fmt.Errorf("log entry: bad version: %w", protowire.ParseError(m))
			}
			h.Version, b = v, b[m:]
		case num == epochField && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return h, fmt.Errorf("log entry: bad epoch: %w", protowire.ParseError(m))
			}
			h.Epoch, b = v, b[m:]
		case (num == spanFirstField || num == spanLastField) && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return h, fmt.Errorf("log entry: bad span: %w", protowire.ParseError(m))
			}
			if num == spanFirstField {
				h.SpanFirst = v
			} else {
				h.SpanLast = v
			}
			b = b[m:]
		case num == txnField && typ == protowire.BytesType:
			txn, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return h, fmt.Errorf("log entry: bad transaction id: %w", protowire.ParseError(m))
			}
			var err error
			if h.Origin, h.Seq, err = parseTxn(txn); err != nil {
				return h, err
			}
			b = b[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return h, fmt.Errorf("log entry: bad field %d: %w", num, protowire.ParseError(m))
			}
			b = b[m:]
		}
	}
	if h.Version == 0 {
		return h, fmt.Errorf("log entry without a version")
	}
	if (h.SpanFirst != 0 || h.SpanLast != 0) && (h.SpanFirst == 0 || h.SpanFirst > h.Version || h.Version > h.SpanLast) {
		return h, fmt.Errorf("log entry %d: version outside its span %d..%d", h.Version, h.SpanFirst, h.SpanLast)
	}
	return h, nil
}

// parseTxn reads an encoded TxnID; as protobuf decoding does, the last
// occurrence of a field wins.
func parseTxn(b []byte) (origin []byte, seq uint64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, 0, fmt.Errorf("log entry: bad transaction id: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var m int
		switch {
		case num == txnOriginField && typ == protowire.BytesType:
			origin, m = protowire.ConsumeBytes(b)
		case num == txnSeqField && typ == protowire.VarintType:
			seq, m = protowire.ConsumeVarint(b)
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return nil, 0, fmt.Errorf("log entry: bad transaction id: %w", protowire.ParseError(m))
		}
		b = b[m:]
	}
	return origin, seq, nil
}

// Header is an entry's version, epoch, transaction id and span
// (RawHeader).
type Header struct {
	Version             uint64
	Epoch               uint64
	Origin              string
	Seq                 uint64
	SpanFirst, SpanLast uint64
}

// txnField is LogEntry.txn's field number; TxnID has origin = 1, seq = 2.
const txnField protowire.Number = 2

// HeaderOf reads an encoded entry's version and transaction id without
// decoding its writeset: what a replica needs to tell its own transactions
// from remote ones.
func HeaderOf(b []byte) (Header, error) { return parseHeader(b, true) }

// parseHeader reads the version and, if withTxn, the transaction id
// (RawHeaderOf, copied out of b).
func parseHeader(b []byte, withTxn bool) (Header, error) {
	raw, err := RawHeaderOf(b)
	if err != nil {
		return Header{}, err
	}
	h := Header{Version: raw.Version, Epoch: raw.Epoch, SpanFirst: raw.SpanFirst, SpanLast: raw.SpanLast}
	if withTxn {
		h.Origin, h.Seq = string(raw.Origin), raw.Seq
	}
	return h, nil
}

// LogEntry's span fields (api/certifierpb/certifier.proto).
const (
	spanFirstField    protowire.Number = 4
	spanLastField     protowire.Number = 5
	certifiedField    protowire.Number = 6
	spanBytesField    protowire.Number = 7
	spanChecksumField protowire.Number = 8
)

// SpanEntry is one entry of a span: a streamed transaction committed as
// the versions First..Last, one entry per fragment of its writeset.
type SpanEntry struct {
	Version     uint64
	Txn         *pb.TxnID
	Fragment    []byte // an encoded Writeset: the fragment at Version
	First, Last uint64
	// Certified is the encoded Writeset the transaction was certified on;
	// written on the last entry (Version == Last) only.
	Certified []byte
	// SpanBytes and SpanChecksum are the size and SpanChecksum of all the
	// span's fragments; written on the last entry only. SpanBytes is 0 for
	// a span encoded without them (a fragment is never empty).
	SpanBytes    uint64
	SpanChecksum uint32
	// Epoch is the epoch of the span's head, which every entry of the
	// span carries.
	Epoch uint64
}

// castagnoli is the CRC-32C table (hardware-assisted on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SpanChecksum extends sum, the CRC-32C of a span's fragments before
// fragment, with fragment: its length (uvarint) then its bytes, as a spool
// file holds it, so that fragment boundaries count. Start with 0.
func SpanChecksum(sum uint32, fragment []byte) uint32 {
	var length [binary.MaxVarintLen64]byte
	sum = crc32.Update(sum, castagnoli, length[:binary.PutUvarint(length[:], uint64(len(fragment)))])
	return crc32.Update(sum, castagnoli, fragment)
}

// AppendSpanEntry appends the encoded entry e to dst (a buffer to reuse:
// a fragment is up to a few MiB) and returns it. The fields are in the
// order Encode writes them, the span fields after the writeset, the
// version last.
func AppendSpanEntry(dst []byte, e SpanEntry) []byte {
	if e.Version < e.First || e.Version > e.Last || e.First == 0 {
		panic(fmt.Sprintf("logentry: span entry %d outside its span %d..%d", e.Version, e.First, e.Last))
	}
	if e.Txn != nil {
		dst = protowire.AppendTag(dst, txnField, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(txnSize(e.Txn)))
		dst = appendTxn(dst, e.Txn)
	}
	if len(e.Fragment) > 0 {
		dst = protowire.AppendTag(dst, writesetField, protowire.BytesType)
		dst = protowire.AppendBytes(dst, e.Fragment)
	}
	dst = protowire.AppendTag(dst, spanFirstField, protowire.VarintType)
	dst = protowire.AppendVarint(dst, e.First)
	dst = protowire.AppendTag(dst, spanLastField, protowire.VarintType)
	dst = protowire.AppendVarint(dst, e.Last)
	if e.Version == e.Last && len(e.Certified) > 0 {
		dst = protowire.AppendTag(dst, certifiedField, protowire.BytesType)
		dst = protowire.AppendBytes(dst, e.Certified)
	}
	if e.Version == e.Last && e.SpanBytes > 0 {
		dst = protowire.AppendTag(dst, spanBytesField, protowire.VarintType)
		dst = protowire.AppendVarint(dst, e.SpanBytes)
	}
	if e.Version == e.Last && e.SpanChecksum != 0 { // omitted at 0, as protobuf does
		dst = protowire.AppendTag(dst, spanChecksumField, protowire.Fixed32Type)
		dst = protowire.AppendFixed32(dst, e.SpanChecksum)
	}
	return appendVersion(dst, e.Version, e.Epoch)
}

// SpanEntryBytesMax bounds the size of a span's last entry (the largest):
// txn's, with a fragment of fragmentBytes and a certified writeset of
// certifiedBytes, at any versions, with its span's size and checksum.
func SpanEntryBytesMax(txn *pb.TxnID, fragmentBytes, certifiedBytes int) int {
	n := 0
	if txn != nil {
		n += protowire.SizeTag(txnField) + protowire.SizeBytes(txnSize(txn))
	}
	if fragmentBytes > 0 {
		n += protowire.SizeTag(writesetField) + protowire.SizeBytes(fragmentBytes)
	}
	if certifiedBytes > 0 {
		n += protowire.SizeTag(certifiedField) + protowire.SizeBytes(certifiedBytes)
	}
	n += protowire.SizeTag(spanChecksumField) + protowire.SizeFixed32()
	return n + 3*VersionBytesMax // the version, epoch, span_first, span_last and span_bytes
}

// Writeset's and Change's field numbers: Writeset.changes, Change.op.
const (
	changesField protowire.Number = 1
	opField      protowire.Number = 2
)

// IsBarrier reports whether an encoded entry is a barrier: a change of
// its writeset truncates a table or runs DDL (pb.Op_OP_TRUNCATE,
// pb.Op_OP_DDL), or the entry is part of a span. Such versions cannot be
// undone row by row, and the certifier delivers them only once durable.
// It reads the ops without decoding the rows.
func IsBarrier(b []byte) (bool, error) {
	h, err := RawHeaderOf(b)
	if err != nil || h.InSpan() {
		return h.InSpan(), err
	}
	barrier := false
	err = eachField(b, writesetField, func(ws []byte) error {
		return eachField(ws, changesField, func(change []byte) error {
			return eachField(change, opField, func(op []byte) error {
				o, _ := protowire.ConsumeVarint(op)
				barrier = barrier || o == uint64(pb.Op_OP_TRUNCATE) || o == uint64(pb.Op_OP_DDL)
				return nil
			})
		})
	})
	return barrier, err
}

// eachField calls f with the value of each field numbered num of an
// encoded message: a bytes field's without its length, a varint's
// encoded.
func eachField(b []byte, num protowire.Number, f func(v []byte) error) error {
	for len(b) > 0 {
		n, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return fmt.Errorf("log entry: bad tag: %w", protowire.ParseError(m))
		}
		b = b[m:]
		m = protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return fmt.Errorf("log entry: bad field %d: %w", n, protowire.ParseError(m))
		}
		v := b[:m]
		b = b[m:]
		if n != num {
			continue
		}
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(v); err != nil {
			return err
		}
	}
	return nil
}
