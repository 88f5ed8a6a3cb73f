package certifier

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// GroupEntryKeys is DecodeEntryKeys without decoding the writeset: the
// certgroup.DecodeFunc of a group member. Every follower restores every
// committed version into its state, and protobuf decoding of the writeset
// was the largest part of a follower's CPU (about 15% at 256 clients). The
// keys are read from the entry's writeset bytes as the leader read them
// from the request (keysOfEncoded): the same bytes, the same reader. An
// entry of an unusual shape (its writeset field repeated, which protobuf
// merges, or malformed) goes through DecodeEntryKeys. An entry of a span
// has keys on its last entry only, read from its certified writeset
// (DecodeEntryKeys); a fragment's rows are never read.
func GroupEntryKeys(b []byte) (certification.TxnID, []certification.Key, error) {
	h, err := logentry.RawHeaderOf(b)
	if err != nil {
		return DecodeEntryKeys(b)
	}
	field := entryWritesetField
	if h.InSpan() {
		if h.Version != h.SpanLast {
			return certification.TxnID{Origin: string(h.Origin), Seq: h.Seq}, nil, nil
		}
		field = entryCertifiedField
	}
	ws, ok := singleBytesField(b, field)
	if !ok {
		return DecodeEntryKeys(b)
	}
	keys, err := keysOfEncoded(make([]certification.Key, 0, keysCapacityGuess), ws)
	if err != nil {
		return DecodeEntryKeys(b)
	}
	return certification.TxnID{Origin: string(h.Origin), Seq: h.Seq}, keys, nil
}

// LogEntry.writeset's and LogEntry.certified's field numbers.
const (
	entryWritesetField  protowire.Number = 3
	entryCertifiedField protowire.Number = 6
)

// singleBytesField returns the encoded writeset in field of a log entry
// (writeset, or certified), if the entry holds exactly one well-formed
// such field.
func singleBytesField(b []byte, field protowire.Number) (ws []byte, ok bool) {
	found := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if num == field && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 || found {
				return nil, false
			}
			ws, found, b = v, true, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, false
		}
		b = b[m:]
	}
	return ws, true // no writeset field: an empty writeset
}
