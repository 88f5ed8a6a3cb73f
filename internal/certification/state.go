package certification

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Key is what a transaction wrote, for conflict detection, as 64-bit hashes
// (as Galera certifies key hashes): a fixed-size key keeps the index small and
// the lookups cheap, whatever the primary keys look like. Two different rows
// with equal hashes look like one row, which can only cause a spurious abort
// (about one in 2^64 / (rows in the window) requests), never a missed
// conflict. The hash is xxhash64, the same in every process, so every member
// of a certifier group reaches the same decisions. See the package
// documentation for the three granularities.
type Key struct {
	Table uint64 // hash of the table name; 0 for the whole schema
	Row   uint64 // hash of the table name and primary key; 0 for the whole table
	Kind  KeyKind
}

// KeyKind says how a transaction touched a key.
type KeyKind uint8

const (
	// Write: the transaction wrote the row, table or schema. Writes
	// conflict with writes and with references.
	Write KeyKind = iota
	// Reference: a row the transaction's new rows point to through a
	// foreign key (the parent row), which must still be there when the
	// transaction commits. A shared key, as Galera's reference keys: it
	// conflicts with writes of the row, never with other references, so
	// any number of transactions may insert children of one parent at
	// once, while a parent deleted concurrently with the insert of a child
	// aborts one of the two instead of leaving an orphan on every replica.
	// A reference always names one row (ReferenceKey).
	Reference
	// KeepingWrite: the transaction updated the row but kept it: its
	// primary key and every value a foreign key references are unchanged
	// (a keeping update; the replica decides, see
	// api/certifierpb.Change.keeps_row). It conflicts like a Write with
	// writes and keeping writes of the row (first-committer-wins, §6.1)
	// and with its table and the schema, but not with references: a child
	// inserted concurrently still finds its parent, under the same key, on
	// every replica. A keeping write always names one row
	// (KeepingRowKey).
	KeepingWrite
	// KeylessInsert: the transaction inserted rows into a table without a
	// primary key (api/certifierpb.Op_OP_INSERT_ROW). Such a row has no
	// identity, so nothing can write it concurrently: it conflicts only
	// with writes of its whole table and of the schema (TRUNCATE, DDL),
	// in either order, as an insert into a keyed table does with those;
	// never with rows, references or other inserts. It names a table
	// (KeylessInsertKey) and leaves nothing in the row index.
	KeylessInsert
)

func (k KeyKind) String() string {
	switch k {
	case Write:
		return "write"
	case Reference:
		return "reference"
	case KeepingWrite:
		return "keeping write"
	case KeylessInsert:
		return "keyless insert"
	}
	return fmt.Sprintf("KeyKind(%d)", uint8(k))
}

// SchemaKey overlaps every other key.
var SchemaKey = Key{}

// TableKey is the key of a whole table.
func TableKey(table string) Key { return Key{Table: nonZero(xxhash.Sum64String(table))} }

// RowKey is the key of one row, by its encoded primary key.
func RowKey(table string, primaryKey []byte) Key {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(table)
	d.Write(rowKeySeparator[:])
	d.Write(primaryKey)
	return Key{Table: TableKey(table).Table, Row: nonZero(d.Sum64())}
}

// ReferenceKey is the key of a row referenced through a foreign key: the
// parent row's RowKey (or, for a foreign key on another unique constraint,
// the index value's), as a Reference.
func ReferenceKey(table string, key []byte) Key {
	k := RowKey(table, key)
	k.Kind = Reference
	return k
}

// ReferenceKeyBytes is ReferenceKey of a table name still in its encoded
// bytes (equal to ReferenceKey(string(table), key)).
func ReferenceKeyBytes(table, key []byte) Key {
	k := RowKeyBytes(table, key)
	k.Kind = Reference
	return k
}

// KeepingRowKey is the key of a row updated by a keeping update: its
// RowKey, as a KeepingWrite.
func KeepingRowKey(table string, primaryKey []byte) Key {
	k := RowKey(table, primaryKey)
	k.Kind = KeepingWrite
	return k
}

// KeepingRowKeyBytes is KeepingRowKey of a table name still in its encoded
// bytes (equal to KeepingRowKey(string(table), primaryKey)).
func KeepingRowKeyBytes(table, primaryKey []byte) Key {
	k := RowKeyBytes(table, primaryKey)
	k.Kind = KeepingWrite
	return k
}

// KeylessInsertKey is the key of rows inserted into table, a table without
// a primary key (KeylessInsert).
func KeylessInsertKey(table string) Key {
	k := TableKey(table)
	k.Kind = KeylessInsert
	return k
}

// KeylessInsertKeyBytes is KeylessInsertKey of a table name still in its
// encoded bytes (equal to KeylessInsertKey(string(table))).
func KeylessInsertKeyBytes(table []byte) Key {
	k := TableKeyBytes(table)
	k.Kind = KeylessInsert
	return k
}

// rowKeySeparator ends the table name inside a row key's hash.
var rowKeySeparator = [1]byte{0}

// TableKeyBytes is TableKey of a table name still in its encoded bytes:
// the certifier reads keys straight from an encoded writeset without
// allocating strings (equal to TableKey(string(table))).
func TableKeyBytes(table []byte) Key { return Key{Table: nonZero(xxhash.Sum64(table))} }

// RowKeyBytes is RowKey of a table name still in its encoded bytes (equal
// to RowKey(string(table), primaryKey)).
func RowKeyBytes(table, primaryKey []byte) Key {
	var d xxhash.Digest
	d.Reset()
	d.Write(table)
	d.Write(rowKeySeparator[:])
	d.Write(primaryKey)
	return Key{Table: TableKeyBytes(table).Table, Row: nonZero(d.Sum64())}
}

// nonZero keeps 0 free to mean "the whole table" or "the whole schema".
func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// WritesWholeTable reports whether the key is a write of a whole table or
// of the schema (TRUNCATE, DDL, a streamed writeset's tables), not of rows.
func (k Key) WritesWholeTable() bool { return k.Kind == Write && k.Row == 0 }

func (k Key) isSchema() bool { return k.Table == 0 }
func (k Key) isTable() bool  { return k.Table != 0 && k.Row == 0 }
func (k Key) isRow() bool    { return k.Table != 0 && k.Row != 0 }

// valid reports whether the key is one certification knows: a write of
// any granularity, a reference or keeping write of one row, or a keyless
// insert into one table.
func (k Key) valid() bool {
	switch k.Kind {
	case Write:
		return true
	case Reference, KeepingWrite:
		return k.isRow()
	case KeylessInsert:
		return k.isTable()
	}
	return false
}

// TxnID names a transaction across retries.
type TxnID struct {
	Origin string
	Seq    uint64
}

// Request asks to commit a transaction that started at StartVersion and wrote
// Keys. Keys must not be empty: read-only transactions never ask.
type Request struct {
	Txn          TxnID
	StartVersion uint64
	Keys         []Key
	// Versions is how many consecutive versions the transaction commits
	// as: a streamed transaction commits as a span of versions, one per
	// fragment of its writeset (api/certifierpb.Streamed). 0 and 1 both
	// mean one version; negative is invalid. See Outcome.FirstVersion.
	Versions int
}

// Decision is the certifier's answer.
type Decision int

const (
	Commit Decision = iota + 1
	Abort
)

func (d Decision) String() string {
	switch d {
	case Commit:
		return "commit"
	case Abort:
		return "abort"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Reason says why a request was aborted.
type Reason int

const (
	ReasonNone     Reason = iota
	ReasonConflict        // a transaction committed after StartVersion wrote an overlapping key
	ReasonTooOld          // StartVersion is below the low-water mark
	ReasonInvalid         // StartVersion is in the future, no keys, or a key of an unknown kind
	// ReasonReferenceConflict: a row the request references was written by
	// a transaction committed after StartVersion, or a row the request
	// wrote was referenced by one (see Reference).
	ReasonReferenceConflict
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonConflict:
		return "write-write conflict"
	case ReasonTooOld:
		return "snapshot older than the low-water mark"
	case ReasonInvalid:
		return "invalid request"
	case ReasonReferenceConflict:
		return "foreign-key reference conflict"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Outcome is the answer to one Request.
type Outcome struct {
	Decision      Decision
	CommitVersion uint64 // set when Decision is Commit: the last version of a span
	// FirstVersion is the first version of the span the transaction
	// committed as (Request.Versions): FirstVersion..CommitVersion; equal
	// to CommitVersion for one version. Set when Decision is Commit.
	FirstVersion uint64
	Reason       Reason // set when Decision is Abort
	// ConflictVersion names one committed version that conflicted, and
	// ConflictIndex the request's key it conflicted on (an index into
	// Request.Keys), when Reason is ReasonConflict.
	ConflictVersion uint64
	ConflictIndex   int
	// Duplicate is true when the transaction had already committed; the
	// original CommitVersion is returned and nothing new is committed.
	Duplicate bool
}

// Config bounds the state's memory.
type Config struct {
	// WindowVersions is how many of the latest versions keep their row keys
	// in the conflict index (and their transaction ids for Duplicate
	// detection). A transaction whose snapshot is older than that aborts.
	WindowVersions uint64
	// UnsafeSkipConflictCheck commits every valid request without looking
	// for write-write conflicts. It breaks snapshot isolation on purpose: it
	// is the fault point of the fault-test harness's detector self-test
	// (internal/faults), which must then see lost updates. Never set it
	// anywhere else.
	UnsafeSkipConflictCheck bool
}

// DefaultWindowVersions keeps about 25 s of history at 10,000 commits/s, at
// about 75 bytes of index per key (a 24-byte row slot at half load, since
// keeping writes the slot holds the last plain write too; the key in the
// window): roughly 75 MB at 4 keys per writeset.
const DefaultWindowVersions = 1 << 18

// rowsPresizeMax bounds the row index's initial size: sized for a full window
// of 4-key writesets, growing it under load costs rehashes in the critical
// section, but a huge window should not allocate everything up front.
const rowsPresizeMax = 1 << 20

type tableVersions struct {
	lastRowWrite     uint64 // last version that wrote any row of the table
	lastTableWrite   uint64 // last version that wrote the whole table
	lastRowReference uint64 // last version that referenced any row of the table
}

type committed struct {
	txn  TxnID
	keys []Key
}

// State is the certification state machine. It is not safe for concurrent
// use: the certifier serializes calls, as Raft serializes log application.
type State struct {
	cfg          Config
	version      uint64 // highest version assigned
	lowWaterMark uint64 // requests must have StartVersion >= lowWaterMark

	rows            *rowIndex // row hash -> last version that wrote it, and last plain (not keeping) write
	references      *rowIndex // row hash -> last version that referenced it
	tables          map[uint64]*tableVersions
	lastSchemaWrite uint64
	// lastWrite and lastReference are the last versions that wrote any key
	// and referenced any row: what a schema write conflicts with. Both are
	// rebuilt exactly by replaying the window (snapshot.go): only versions
	// above the low-water mark are ever compared.
	lastWrite     uint64
	lastReference uint64

	// window holds the versions (lowWaterMark, version], oldest first, so
	// that their row keys and transaction ids can be forgotten in order.
	window    []committed
	windowOff int // index of the oldest live element in window
	txns      map[TxnID]uint64
	// spans holds the first version of each transaction in txns that
	// committed as a span of more than one version (txns has its last).
	spans map[TxnID]uint64
}

// New returns an empty state whose history starts after version base: base
// is both the current version and the low-water mark, as for a certifier that
// restores a log whose entries up to base were compacted away.
func New(cfg Config, base uint64) *State {
	if cfg.WindowVersions == 0 {
		cfg.WindowVersions = DefaultWindowVersions
	}
	return &State{
		cfg:          cfg,
		version:      base,
		lowWaterMark: base,
		rows:         newRowIndex(int(min(cfg.WindowVersions*4, rowsPresizeMax))),
		// Starts small: a workload without foreign keys never fills it.
		references: newRowIndex(0),
		tables:     make(map[uint64]*tableVersions),
		txns:       make(map[TxnID]uint64),
		spans:      make(map[TxnID]uint64),
	}
}

// Version is the highest version assigned.
func (s *State) Version() uint64 { return s.version }

// LowWaterMark is the oldest StartVersion that can still be certified.
func (s *State) LowWaterMark() uint64 { return s.lowWaterMark }

// Certify decides a request and, on commit, assigns it the next version,
// or the next Request.Versions versions.
func (s *State) Certify(req Request) Outcome {
	if first, last, ok := s.CommittedSpan(req.Txn); ok {
		return Outcome{Decision: Commit, CommitVersion: last, FirstVersion: first, Duplicate: true}
	}
	if len(req.Keys) == 0 || req.StartVersion > s.version || !allValid(req.Keys) || req.Versions < 0 {
		return Outcome{Decision: Abort, Reason: ReasonInvalid}
	}
	if req.StartVersion < s.lowWaterMark {
		return Outcome{Decision: Abort, Reason: ReasonTooOld}
	}
	for i, k := range req.Keys {
		if s.cfg.UnsafeSkipConflictCheck {
			break
		}
		if v, reason := s.conflict(k, req.StartVersion); v != 0 {
			return Outcome{Decision: Abort, Reason: reason, ConflictVersion: v, ConflictIndex: i}
		}
	}
	first := s.version + 1
	s.commit(first, first+uint64(max(req.Versions, 1))-1, req.Txn, req.Keys)
	return Outcome{Decision: Commit, CommitVersion: s.version, FirstVersion: first}
}

func allValid(keys []Key) bool {
	for _, k := range keys {
		if !k.valid() {
			return false
		}
	}
	return true
}

// conflict returns a version committed after start that conflicts with k,
// and why, or 0. A write or keeping write meets earlier writes of either
// kind first (ReasonConflict); a write then meets references; a reference
// meets plain writes only (§6.1's rule, with Galera's shared keys: two
// references never conflict, and a keeping write leaves the row a
// reference needs in place); a keyless insert meets writes of its whole
// table and of the schema only.
func (s *State) conflict(k Key, start uint64) (uint64, Reason) {
	if k.Kind == KeylessInsert {
		if v := s.lastWholeTableWrite(k); v > start {
			return v, ReasonConflict
		}
		return 0, ReasonNone
	}
	if k.Kind == Reference {
		if v := s.lastPlainOverlap(k); v > start {
			return v, ReasonReferenceConflict
		}
		return 0, ReasonNone
	}
	if v := s.lastOverlap(k); v > start {
		return v, ReasonConflict
	}
	if k.Kind == Write {
		if v := s.lastReferenceOverlap(k); v > start {
			return v, ReasonReferenceConflict
		}
	}
	return 0, ReasonNone
}

// CommittedVersion reports the version a transaction committed at (the
// last of its span), if it is inside the window.
func (s *State) CommittedVersion(txn TxnID) (uint64, bool) {
	v, ok := s.txns[txn]
	return v, ok
}

// CommittedSpan reports the versions a transaction committed as, if its
// last version is inside the window (first == last for one version).
func (s *State) CommittedSpan(txn TxnID) (first, last uint64, ok bool) {
	last, ok = s.txns[txn]
	if !ok {
		return 0, 0, false
	}
	first = last
	if f, isSpan := s.spans[txn]; isSpan {
		first = f
	}
	return first, last, true
}

// Restore records a committed version read back from the log, without
// certifying it again. Versions must be restored in order, each the next one.
func (s *State) Restore(version uint64, txn TxnID, keys []Key) {
	if version != s.version+1 {
		panic(fmt.Sprintf("certification: restore of version %d after version %d", version, s.version))
	}
	s.commit(version, version, txn, keys)
}

// RestoreSpan records a transaction read back from the log that
// committed as the span first..last, with the keys it was certified on,
// as Certify would have recorded it. It continues the state's versions:
// last is above Version() and first at most Version()+1. First may be at
// or below Version() when the restored window starts inside the span
// (its earlier versions are below the low-water mark).
func (s *State) RestoreSpan(first, last uint64, txn TxnID, keys []Key) {
	if first > last || last <= s.version || first > s.version+1 {
		panic(fmt.Sprintf("certification: restore of span %d..%d after version %d", first, last, s.version))
	}
	s.commit(first, last, txn, keys)
}

// lastOverlap returns the highest version in the index that wrote a key
// overlapping k (0 if none is known).
func (s *State) lastOverlap(k Key) uint64 {
	if k.isSchema() {
		return s.lastWrite
	}
	latest := s.lastSchemaWrite
	if t := s.tables[k.Table]; t != nil {
		latest = max(latest, t.lastTableWrite)
		if k.isTable() {
			latest = max(latest, t.lastRowWrite)
		}
	}
	if !k.isTable() {
		latest = max(latest, s.rows.get(k.Row))
	}
	return latest
}

// lastWholeTableWrite returns the highest version in the index that wrote
// the whole table k names, or the schema: what a keyless insert conflicts
// with.
func (s *State) lastWholeTableWrite(k Key) uint64 {
	latest := s.lastSchemaWrite
	if t := s.tables[k.Table]; t != nil {
		latest = max(latest, t.lastTableWrite)
	}
	return latest
}

// lastPlainOverlap returns the highest version in the index that wrote
// the row k names, or its table or the schema, other than by a keeping
// write: what a reference to the row conflicts with.
func (s *State) lastPlainOverlap(k Key) uint64 {
	latest := max(s.lastSchemaWrite, s.rows.getPlain(k.Row))
	if t := s.tables[k.Table]; t != nil {
		latest = max(latest, t.lastTableWrite)
	}
	return latest
}

// lastReferenceOverlap returns the highest version in the index that
// referenced a row the write k covers (0 if none is known).
func (s *State) lastReferenceOverlap(k Key) uint64 {
	switch {
	case k.isSchema():
		return s.lastReference
	case k.isTable():
		if t := s.tables[k.Table]; t != nil {
			return t.lastRowReference
		}
		return 0
	case s.references.len() == 0: // no foreign keys in the window: no probe
		return 0
	default:
		return s.references.get(k.Row)
	}
}

// commit records txn as committed at the versions Version()+1..last (a
// span that started at first, which is lower when a restore starts inside
// it). The window gets one record per version, so that the low-water mark
// and forgetting still move one version at a time; the keys are recorded
// at the last version, which the transaction id maps to: no snapshot
// falls inside a span (a replica moves from first-1 to last at once), and
// a conflict names the version a replica knows the transaction by.
func (s *State) commit(first, last uint64, txn TxnID, keys []Key) {
	for s.version+1 < last {
		s.version++
		s.window = append(s.window, committed{txn: txn})
	}
	s.version++
	v := s.version
	for _, k := range keys {
		s.index(k, v)
	}
	s.window = append(s.window, committed{txn: txn, keys: keys})
	s.txns[txn] = v
	if first < last {
		s.spans[txn] = first
	}
	s.forgetBeyondWindow()
}

func (s *State) index(k Key, v uint64) {
	if k.Kind == Reference {
		s.indexReference(k, v)
		return
	}
	s.lastWrite = v
	if k.isSchema() {
		s.lastSchemaWrite = v
		return
	}
	t := s.tables[k.Table]
	if t == nil {
		t = &tableVersions{}
		s.tables[k.Table] = t
	}
	if k.Kind == KeylessInsert {
		// A row of the table was written: what a later whole-table write
		// (lastOverlap of a table key) conflicts with.
		t.lastRowWrite = v
		return
	}
	if k.isTable() {
		t.lastTableWrite = v
		return
	}
	t.lastRowWrite = v
	if k.Kind == KeepingWrite {
		s.rows.setKeeping(k.Row, v)
		return
	}
	s.rows.set(k.Row, v)
}

// indexReference records that version v referenced the row k.
func (s *State) indexReference(k Key, v uint64) {
	s.lastReference = v
	t := s.tables[k.Table]
	if t == nil {
		t = &tableVersions{}
		s.tables[k.Table] = t
	}
	t.lastRowReference = v
	s.references.set(k.Row, v)
}

// forgetBeyondWindow advances the low-water mark so that at most
// WindowVersions versions are indexed, dropping what the older ones wrote.
// Table and schema versions are single numbers per table and are kept.
func (s *State) forgetBeyondWindow() {
	for s.version-s.lowWaterMark > s.cfg.WindowVersions {
		old := s.window[s.windowOff]
		s.window[s.windowOff] = committed{}
		s.windowOff++
		s.lowWaterMark++
		for _, k := range old.keys {
			switch {
			case !k.isRow():
			case k.Kind == Reference:
				s.references.deleteIf(k.Row, s.lowWaterMark)
			default:
				s.rows.deleteIf(k.Row, s.lowWaterMark)
			}
		}
		if s.txns[old.txn] == s.lowWaterMark {
			delete(s.txns, old.txn)
			delete(s.spans, old.txn)
		}
	}
	// Compact the backing array once half of it is dead.
	if s.windowOff > len(s.window)/2 && s.windowOff > 1024 {
		s.window = append([]committed(nil), s.window[s.windowOff:]...)
		s.windowOff = 0
	}
}

// IndexedRows is the number of row keys in the conflict index (for metrics).
func (s *State) IndexedRows() int { return s.rows.len() }

// IndexedReferences is the number of referenced rows in the index.
func (s *State) IndexedReferences() int { return s.references.len() }
