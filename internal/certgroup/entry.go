package certgroup

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// A Raft entry of the group carries the log entries the leader certified
// since its last proposal, versions contiguous (a batch: Raft framing, the
// record checksum, one message per peer and one apply are paid per batch,
// not per version):
//
//	kindBatch | first version (uvarint) | count (uvarint) | count × (length (uvarint) | log entry bytes)
//
// Logs written before batching hold one certified entry per Raft entry:
//
//	kindCertified | version (uvarint) | log entry bytes (logentry encoding)
//
// Both are read (a member upgraded in place replays its old log: an old
// entry is a batch of one); only batches are written. The first byte tells
// them apart. The versions are in front of the entries so that rebuilding
// the state after a lost leadership can skip old entries without decoding
// them. Raft's own empty entries (a new leader's barrier) and
// configuration changes carry no such payload.
//
// The leader also proposes the service's log retention decisions, opaque
// to the group, which every member applies in log order (certifier's
// group_retention.go) and the next snapshot carries:
//
//	kindRetention | the decision's bytes
//
// A streamed transaction (certification.Request.Versions fragments)
// commits as the versions first..last in an entry of its own, after the
// batch certified before it:
//
//	kindSpan | span head
//
// where the span head is the log entry of version last with an empty
// fragment (logentry.AppendSpanEntry: transaction id, span first..last,
// the writeset it was certified on). The fragments never travel in Raft:
// every member's service copies them into its versioned log from its own
// stage, or fetches them from a member that did.
//
// The group's base (Core.epoch: a log entry's epoch is the base plus the
// Raft term of the leader that certified it) is fixed by the first leader
// that finds none applied, in an entry of its own; every member applies
// the first such entry in log order and ignores any later one:
//
//	kindBase | base (uvarint)
//
// A member of a version before kindRetention, kindSpan or kindBase cannot
// apply such an entry: upgrade every member before the leader runs this
// version.
const (
	kindCertified byte = 1 // one entry (the format before batching)
	kindBatch     byte = 2 // a batch of entries with contiguous versions
	kindRetention byte = 3 // a log retention decision of the service
	kindSpan      byte = 4 // the head of a span of versions (a streamed transaction)
	kindBase      byte = 5 // the group's base
)

// encodeBase frames the group's base as a Raft entry's payload.
func encodeBase(base uint64) []byte {
	return binary.AppendUvarint([]byte{kindBase}, base)
}

// baseOf returns the base a payload carries, or ok false for a payload of
// another kind. A base entry that does not read is an error.
func baseOf(data []byte) (base uint64, ok bool, err error) {
	if len(data) == 0 || data[0] != kindBase {
		return 0, false, nil
	}
	base, n := binary.Uvarint(data[1:])
	if n <= 0 || n != len(data)-1 || base == 0 {
		return 0, true, errors.New("certifier group: raft entry with a bad group base")
	}
	return base, true, nil
}

// encodeSpan frames a span head as a Raft entry's payload.
func encodeSpan(head []byte) []byte {
	return append([]byte{kindSpan}, head...)
}

// spanOf returns the span head a payload carries and its versions, or
// ok false for a payload of another kind. A head that is not the last
// entry of its span is an error.
func spanOf(data []byte) (head logentry.Entry, first uint64, ok bool, err error) {
	if len(data) == 0 || data[0] != kindSpan {
		return logentry.Entry{}, 0, false, nil
	}
	h, err := logentry.RawHeaderOf(data[1:])
	if err != nil {
		return logentry.Entry{}, 0, true, fmt.Errorf("certifier group: raft entry with a bad span head: %w", err)
	}
	if !h.InSpan() || h.Version != h.SpanLast || h.SpanFirst == 0 || h.SpanFirst > h.SpanLast {
		return logentry.Entry{}, 0, true, fmt.Errorf("certifier group: raft entry with a span head at version %d of span %d..%d", h.Version, h.SpanFirst, h.SpanLast)
	}
	return logentry.Entry{Version: h.Version, Bytes: data[1:]}, h.SpanFirst, true, nil
}

// encodeRetention frames a retention decision as a Raft entry's payload.
func encodeRetention(decision []byte) []byte {
	return append([]byte{kindRetention}, decision...)
}

// retentionOf returns the decision a payload carries, or false for a
// payload of another kind.
func retentionOf(data []byte) ([]byte, bool) {
	if len(data) == 0 || data[0] != kindRetention {
		return nil, false
	}
	return data[1:], true
}

// maxBatchBytes bounds the log entry bytes of one proposal: a batch well
// under maxSizePerMsgBytes still travels to a follower with others.
const maxBatchBytes = 1 << 20

// encodeBatch encodes entries whose versions are contiguous.
func encodeBatch(entries []logentry.Entry) []byte {
	size := 1 + 2*binary.MaxVarintLen64
	for _, e := range entries {
		size += binary.MaxVarintLen32 + len(e.Bytes)
	}
	b := make([]byte, 0, size)
	b = append(b, kindBatch)
	b = binary.AppendUvarint(b, entries[0].Version)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(len(e.Bytes)))
		b = append(b, e.Bytes...)
	}
	return b
}

// encodeCertified is the format before batching (kept to test that old
// logs still read).
func encodeCertified(e logentry.Entry) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(e.Bytes))
	b = append(b, kindCertified)
	b = binary.AppendUvarint(b, e.Version)
	return append(b, e.Bytes...)
}

var errBadBatch = errors.New("certifier group: raft entry with a bad batch of log entries")

// decodeEntries reads the log entries of a Raft entry's payload, either
// format. The entries' bytes alias data.
func decodeEntries(data []byte) ([]logentry.Entry, error) {
	first, count, body, err := decodeHeader(data)
	if err != nil {
		return nil, err
	}
	if data[0] == kindCertified {
		return []logentry.Entry{{Version: first, Bytes: body}}, nil
	}
	out := make([]logentry.Entry, 0, count)
	for i := uint64(0); i < count; i++ {
		n, k := binary.Uvarint(body)
		if k <= 0 || n > uint64(len(body)-k) {
			return nil, errBadBatch
		}
		out = append(out, logentry.Entry{Version: first + i, Bytes: body[k : k+int(n)]})
		body = body[k+int(n):]
	}
	if len(body) != 0 {
		return nil, errBadBatch
	}
	return out, nil
}

// decodeCommitted reads the log entries of a payload of certified
// versions: a batch (either format; spanFirst 0), or a span head, one
// entry at the span's last version (spanFirst its first).
func decodeCommitted(data []byte) (entries []logentry.Entry, spanFirst uint64, err error) {
	if head, first, ok, err := spanOf(data); ok {
		if err != nil {
			return nil, 0, err
		}
		return []logentry.Entry{head}, first, nil
	}
	entries, err = decodeEntries(data)
	return entries, 0, err
}

// decodeHeader reads the first version and the count of a payload, and
// returns what follows them.
func decodeHeader(data []byte) (first, count uint64, body []byte, err error) {
	if len(data) < 2 || data[0] != kindCertified && data[0] != kindBatch {
		return 0, 0, nil, fmt.Errorf("certifier group: raft entry of unknown kind (%d bytes)", len(data))
	}
	first, n := binary.Uvarint(data[1:])
	if n <= 0 || first == 0 {
		return 0, 0, nil, fmt.Errorf("certifier group: raft entry with a bad version")
	}
	body = data[1+n:]
	if data[0] == kindCertified {
		return first, 1, body, nil
	}
	count, k := binary.Uvarint(body)
	if k <= 0 || count == 0 || count > uint64(len(body)) {
		return 0, 0, nil, errBadBatch
	}
	return first, count, body[k:], nil
}

// versionsOfData reads only the versions a payload holds, first..last
// (0, 0 for a payload of another kind).
func versionsOfData(data []byte) (first, last uint64) {
	if head, first, ok, err := spanOf(data); ok {
		if err != nil {
			return 0, 0
		}
		return first, head.Version
	}
	first, count, _, err := decodeHeader(data)
	if err != nil {
		return 0, 0
	}
	return first, first + count - 1
}

// certifiedCount is how many log entries a Raft entry carries (0 for
// Raft's own entries; 1 for a span head, the only one of its span in the
// Raft log): what "entries per fsync" counts.
func certifiedCount(e *raftpb.Entry) uint64 {
	if e.GetType() != raftpb.EntryNormal {
		return 0
	}
	if _, _, ok, _ := spanOf(e.GetData()); ok {
		return 1
	}
	first, last := versionsOfData(e.GetData())
	if first == 0 {
		return 0
	}
	return last - first + 1
}
