package certification

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Snapshots of the state (the certifier group compacts its Raft
// log behind a snapshot, and a lagging member installs the leader's).
//
// Only what cannot be rebuilt is written: the version, the low-water mark,
// the per-table and schema versions (kept for the whole history), and the
// window of versions (lowWaterMark, version] with each one's transaction id
// and keys. Unmarshal replays the window through commit, which rebuilds the
// row index and the transaction ids exactly as they were (a row or id is in
// them iff its last write is inside the window), then puts back the table
// and schema versions. The encoding is deterministic (tables sorted), so two
// members with equal states write equal bytes.
//
//	magic "TKCS" | format (1 byte) | version | lowWaterMark | lastSchemaWrite
//	tables: count, then per table (ascending hash): hash (8 bytes) | lastRowWrite | lastTableWrite | lastRowReference
//	window: count, then per version: len(origin) | origin | seq | keys count | keys (17 bytes each: table, row, kind)
//	spans: count, then per span (ascending last version): last | first
//
// A span's versions (Request.Versions) are window elements of their own,
// the keys on the last. The spans section gives the first version of each
// transaction in the window that committed as a span, which a duplicate
// request is answered with (CommittedSpan): a certifier group snapshots
// states that hold spans, and a member restored from one answers a retried
// streamed request with its whole span.
//
// Integers are uvarints unless a size is given. Format 2 added the
// foreign-key references (Reference keys): lastRowReference per table and
// a kind byte per key. Format 3 has the layout of format 2 and adds a key
// kind, KeepingWrite (a keeping update of a row): a reader of format 2
// would refuse such a key as corrupt, so the format number says "newer"
// instead. Format 4 adds, the same way, the kind KeylessInsert (rows
// inserted into a table without a primary key). Format 5 adds the spans
// section. Formats 1 (no references: every key a write, no table
// referenced), 2 (no keeping writes: every row write plain), 3 (no keyless
// inserts) and 4 (no spans: a span is known by its last version only) are
// still read.
const (
	snapshotMagic  = "TKCS"
	snapshotFormat = 5
	// snapshotFormatNoReferences is the format before references.
	snapshotFormatNoReferences = 1
	// snapshotFormatNoKeepingWrites is the format before keeping writes.
	snapshotFormatNoKeepingWrites = 2
	// snapshotFormatNoKeylessInserts is the format before keyless inserts.
	snapshotFormatNoKeylessInserts = 3
	// snapshotFormatNoSpans is the format before the spans section.
	snapshotFormatNoSpans = 4
)

// ErrBadSnapshot is wrapped by Unmarshal for bytes that are not a snapshot
// of this format (truncated, corrupt or of another version).
var ErrBadSnapshot = errors.New("certification: bad state snapshot")

// Marshal encodes the state. The state is not modified.
func (s *State) Marshal() []byte {
	b := make([]byte, 0, 64+len(s.tables)*24+(len(s.window)-s.windowOff)*48)
	b = append(b, snapshotMagic...)
	b = append(b, snapshotFormat)
	b = binary.AppendUvarint(b, s.version)
	b = binary.AppendUvarint(b, s.lowWaterMark)
	b = binary.AppendUvarint(b, s.lastSchemaWrite)
	tables := make([]uint64, 0, len(s.tables))
	for t := range s.tables {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	b = binary.AppendUvarint(b, uint64(len(tables)))
	for _, t := range tables {
		b = binary.BigEndian.AppendUint64(b, t)
		b = binary.AppendUvarint(b, s.tables[t].lastRowWrite)
		b = binary.AppendUvarint(b, s.tables[t].lastTableWrite)
		b = binary.AppendUvarint(b, s.tables[t].lastRowReference)
	}
	live := s.window[s.windowOff:]
	b = binary.AppendUvarint(b, uint64(len(live)))
	for _, c := range live {
		b = binary.AppendUvarint(b, uint64(len(c.txn.Origin)))
		b = append(b, c.txn.Origin...)
		b = binary.AppendUvarint(b, c.txn.Seq)
		b = binary.AppendUvarint(b, uint64(len(c.keys)))
		for _, k := range c.keys {
			b = binary.BigEndian.AppendUint64(b, k.Table)
			b = binary.BigEndian.AppendUint64(b, k.Row)
			b = append(b, byte(k.Kind))
		}
	}
	return s.appendSpans(b)
}

// appendSpans writes the spans section: the last and first version of each
// span in the window, by last version (deterministic).
func (s *State) appendSpans(b []byte) []byte {
	type span struct{ first, last uint64 }
	spans := make([]span, 0, len(s.spans))
	for txn, first := range s.spans {
		spans = append(spans, span{first: first, last: s.txns[txn]})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.last, b.last) })
	b = binary.AppendUvarint(b, uint64(len(spans)))
	for _, sp := range spans {
		b = binary.AppendUvarint(b, sp.last)
		b = binary.AppendUvarint(b, sp.first)
	}
	return b
}

// Unmarshal rebuilds a state from Marshal's bytes, with cfg (a smaller
// window than the snapshot's slides it at once).
func Unmarshal(cfg Config, data []byte) (*State, error) {
	r := snapshotReader{b: data}
	if len(data) < len(snapshotMagic)+1 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: no magic", ErrBadSnapshot)
	}
	format := data[len(snapshotMagic)]
	if format < snapshotFormatNoReferences || format > snapshotFormat {
		return nil, fmt.Errorf("%w: format %d, this version reads %d to %d (a snapshot of a newer tashkent?)",
			ErrBadSnapshot, format, snapshotFormatNoReferences, snapshotFormat)
	}
	r.b = data[len(snapshotMagic)+1:]
	r.references = format >= snapshotFormatNoKeepingWrites
	r.keepingWrites = format >= snapshotFormatNoKeylessInserts
	r.keylessInserts = format >= snapshotFormatNoSpans
	version, lowWaterMark, lastSchemaWrite := r.uvarint(), r.uvarint(), r.uvarint()
	tables := r.tables()
	s := New(cfg, lowWaterMark)
	n := r.count(3) // a window element takes at least 3 bytes
	for i := uint64(0); i < n && r.err == nil; i++ {
		txn := TxnID{Origin: string(r.bytes()), Seq: r.uvarint()}
		keys := make([]Key, r.count(r.keyBytes()))
		for j := range keys {
			keys[j] = r.key()
		}
		if r.err == nil && (!allValid(keys) || (!r.keepingWrites && hasKind(keys, KeepingWrite)) ||
			(!r.keylessInserts && hasKind(keys, KeylessInsert))) {
			r.fail("key kind")
		}
		if r.err == nil {
			s.commit(s.version+1, s.version+1, txn, keys)
		}
	}
	if format >= snapshotFormat {
		r.spans(s)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the end", ErrBadSnapshot, len(r.b))
	}
	if s.version != version || lowWaterMark > version {
		return nil, fmt.Errorf("%w: window ends at version %d, snapshot says %d", ErrBadSnapshot, s.version, version)
	}
	s.tables, s.lastSchemaWrite = tables, lastSchemaWrite
	return s, nil
}

func hasKind(keys []Key, kind KeyKind) bool {
	for _, k := range keys {
		if k.Kind == kind {
			return true
		}
	}
	return false
}

// snapshotReader reads Marshal's fields; the first error sticks.
type snapshotReader struct {
	b              []byte
	err            error
	references     bool // format 2 and later: keys and tables carry references
	keepingWrites  bool // format 3 and later: keys may be keeping writes
	keylessInserts bool // format 4 and later: keys may be keyless inserts
}

// keyBytes is the size of one encoded key.
func (r *snapshotReader) keyBytes() int {
	if r.references {
		return 17
	}
	return 16
}

func (r *snapshotReader) key() Key {
	k := Key{Table: r.fixed64(), Row: r.fixed64()}
	if r.references {
		if len(r.b) < 1 {
			r.fail("key")
			return k
		}
		k.Kind, r.b = KeyKind(r.b[0]), r.b[1:]
	}
	return k
}

func (r *snapshotReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or corrupt %s", ErrBadSnapshot, what)
	}
	r.b = nil
}

func (r *snapshotReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("integer")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapshotReader) fixed64() uint64 {
	if len(r.b) < 8 {
		r.fail("key")
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// count reads a count of elements of at least minBytes each, refusing one
// the rest of the data cannot hold (a corrupt count must not allocate).
func (r *snapshotReader) count(minBytes int) uint64 {
	n := r.uvarint()
	if minBytes > 0 && n > uint64(len(r.b)/minBytes)+1 {
		r.fail("count")
		return 0
	}
	return n
}

func (r *snapshotReader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("string")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *snapshotReader) tables() map[uint64]*tableVersions {
	n := r.count(10) // at least 8 + 2 bytes (format 1)
	tables := make(map[uint64]*tableVersions, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		t := r.fixed64()
		tables[t] = &tableVersions{lastRowWrite: r.uvarint(), lastTableWrite: r.uvarint()}
		if r.references {
			tables[t].lastRowReference = r.uvarint()
		}
	}
	return tables
}

// spans reads the spans section into s, whose window is replayed: each
// span names the window element of its last version, whose transaction
// must be known at that version. A span whose last version is below s's
// low-water mark (cfg's window is smaller than the snapshot's) is gone
// with its transaction id.
func (r *snapshotReader) spans(s *State) {
	n := r.count(2)
	for i := uint64(0); i < n && r.err == nil; i++ {
		last, first := r.uvarint(), r.uvarint()
		if r.err != nil {
			return
		}
		if first == 0 || first >= last || last > s.version {
			r.fail("span")
			return
		}
		if last <= s.lowWaterMark {
			continue
		}
		txn := s.window[s.windowOff+int(last-s.lowWaterMark-1)].txn
		if v, ok := s.txns[txn]; !ok || v != last {
			r.fail("span")
			return
		}
		s.spans[txn] = first
	}
}
