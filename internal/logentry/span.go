package logentry

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// SpanOf reads the span an encoded entry is part of (LogEntry.span_first,
// span_last; both 0 for an entry that is a transaction of its own)
// without decoding the writeset and without allocating: a replica reads it
// from every delivered entry. As in protobuf decoding, the last occurrence
// of a field wins. An entry with only one of the two set, or with first
// above last, is refused.
func SpanOf(b []byte) (first, last uint64, err error) {
	const firstField, lastField protowire.Number = 4, 5 // LogEntry.span_first, span_last
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, fmt.Errorf("log entry: bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var m int
		switch {
		case num == firstField && typ == protowire.VarintType:
			first, m = protowire.ConsumeVarint(b)
		case num == lastField && typ == protowire.VarintType:
			last, m = protowire.ConsumeVarint(b)
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return 0, 0, fmt.Errorf("log entry: bad field %d: %w", num, protowire.ParseError(m))
		}
		b = b[m:]
	}
	if (first == 0) != (last == 0) || first > last {
		return 0, 0, fmt.Errorf("log entry: invalid span %d..%d", first, last)
	}
	return first, last, nil
}

// ParseSpanEntry reads an encoded span entry (AppendSpanEntry's) back,
// its fragment and certified writeset as they are encoded, aliasing b,
// and the span's size and checksum (0 if the entry has none):
// AppendSpanEntry of the result gives b again. A group member rebuilds a
// span's entries from its head this way (the head's certified bytes go
// into its last entry unchanged, so every member writes the same bytes).
func ParseSpanEntry(b []byte) (SpanEntry, error) {
	h, err := RawHeaderOf(b)
	if err != nil {
		return SpanEntry{}, err
	}
	if !h.InSpan() || h.Version < h.SpanFirst || h.Version > h.SpanLast {
		return SpanEntry{}, fmt.Errorf("log entry %d: not an entry of its span %d..%d", h.Version, h.SpanFirst, h.SpanLast)
	}
	e := SpanEntry{Version: h.Version, First: h.SpanFirst, Last: h.SpanLast, Epoch: h.Epoch}
	if h.Origin != nil {
		e.Txn = &pb.TxnID{Origin: string(h.Origin), Seq: h.Seq}
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return SpanEntry{}, fmt.Errorf("log entry: bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == writesetField && typ == protowire.BytesType:
			e.Fragment, n = protowire.ConsumeBytes(b)
		case num == certifiedField && typ == protowire.BytesType:
			e.Certified, n = protowire.ConsumeBytes(b)
		case num == spanBytesField && typ == protowire.VarintType:
			e.SpanBytes, n = protowire.ConsumeVarint(b)
		case num == spanChecksumField && typ == protowire.Fixed32Type:
			e.SpanChecksum, n = protowire.ConsumeFixed32(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return SpanEntry{}, fmt.Errorf("log entry: bad field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return e, nil
}
