package certification

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// Foreign-key references (Reference keys) are shared keys, as Galera's
// reference keys: a reference conflicts with a write of the same row
// committed after the transaction's snapshot, a write conflicts with a
// reference committed after the writer's snapshot, and references never
// conflict with each other (Tashkent §6.1's rule over writes and shared
// keys). The pair tests: both transactions start at version 1; the first
// commits; the second must commit or abort as listed.
func TestReferencePairs(t *testing.T) {
	parent := row("public.parent", 7)
	refParent := ref("public.parent", 7)
	uniqueValue := RowKey("public.parent#parent_code_key", []byte(`["x"]`))
	refUnique := ReferenceKey("public.parent#parent_code_key", []byte(`["x"]`))
	for _, tc := range []struct {
		name   string
		first  Key
		second Key
		want   Reason // ReasonNone: the second commits too
	}{
		{"parent deleted, then child inserted", parent, refParent, ReasonReferenceConflict},
		{"child inserted, then parent deleted", refParent, parent, ReasonReferenceConflict},
		{"two children of one parent", refParent, refParent, ReasonNone},
		{"parent table truncated, then child inserted", TableKey("public.parent"), refParent, ReasonReferenceConflict},
		{"child inserted, then parent table truncated", refParent, TableKey("public.parent"), ReasonReferenceConflict},
		{"schema DDL, then child inserted", SchemaKey, refParent, ReasonReferenceConflict},
		{"child inserted, then schema DDL", refParent, SchemaKey, ReasonReferenceConflict},
		{"another parent row deleted", row("public.parent", 8), refParent, ReasonNone},
		{"child inserted, another parent row deleted", refParent, row("public.parent", 8), ReasonNone},
		{"unique value freed, then child inserted", uniqueValue, refUnique, ReasonReferenceConflict},
		{"child inserted, then unique value freed", refUnique, uniqueValue, ReasonReferenceConflict},
		{"a row of another table", row("public.child", 7), refParent, ReasonNone},
		// A keeping update (non-key columns only) leaves the parent in
		// place: it and a child insert both commit, where PostgreSQL alone
		// lets both through too (FOR KEY SHARE vs FOR NO KEY UPDATE).
		{"parent kept, then child inserted", keep("public.parent", 7), refParent, ReasonNone},
		{"child inserted, then parent kept", refParent, keep("public.parent", 7), ReasonNone},
		{"parent kept, then child of the unique value", RowKey("public.parent#parent_code_key", []byte(`["y"]`)), refUnique, ReasonNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{WindowVersions: 100}, 0)
			s.Certify(Request{Txn: TxnID{"x", 1}, Keys: []Key{row("public.z", 0)}}) // version 1
			a := s.Certify(Request{Txn: TxnID{"r1", 1}, StartVersion: 1, Keys: []Key{tc.first}})
			b := s.Certify(Request{Txn: TxnID{"r2", 1}, StartVersion: 1, Keys: []Key{tc.second}})
			if a.Decision != Commit || a.CommitVersion != 2 {
				t.Fatalf("first: %+v, want commit at 2", a)
			}
			if tc.want == ReasonNone {
				if b.Decision != Commit {
					t.Fatalf("second: %+v, want commit", b)
				}
				return
			}
			if b.Decision != Abort || b.Reason != tc.want || b.ConflictVersion != 2 {
				t.Fatalf("second: %+v, want %v with version 2", b, tc.want)
			}
		})
	}
}

// A plain write of a parent that a keeping write then followed inside the
// window still conflicts with a reference whose snapshot precedes it: the
// index keeps the row's last plain write under its keeping writes.
func TestReferenceMeetsAPlainWriteBehindAKeepingWrite(t *testing.T) {
	s := New(Config{WindowVersions: 100}, 0)
	s.Certify(Request{Txn: TxnID{"x", 1}, Keys: []Key{row("public.z", 0)}})                        // version 1
	s.Certify(Request{Txn: TxnID{"x", 2}, StartVersion: 1, Keys: []Key{row("public.parent", 7)}})  // 2: plain (say the key moved back)
	s.Certify(Request{Txn: TxnID{"x", 3}, StartVersion: 2, Keys: []Key{keep("public.parent", 7)}}) // 3: keeping
	o := s.Certify(Request{Txn: TxnID{"r", 1}, StartVersion: 1, Keys: []Key{ref("public.parent", 7)}})
	if o.Decision != Abort || o.Reason != ReasonReferenceConflict || o.ConflictVersion != 2 {
		t.Fatalf("reference from before the plain write: %+v, want a reference conflict with version 2", o)
	}
	o = s.Certify(Request{Txn: TxnID{"r", 2}, StartVersion: 2, Keys: []Key{ref("public.parent", 7)}})
	if o.Decision != Commit {
		t.Fatalf("reference from after the plain write: %+v, want commit", o)
	}
	// And a delete of the parent still meets the keeping writes and the
	// reference (write-write first).
	o = s.Certify(Request{Txn: TxnID{"d", 1}, StartVersion: 2, Keys: []Key{row("public.parent", 7)}})
	if o.Decision != Abort || o.Reason != ReasonConflict || o.ConflictVersion != 3 {
		t.Fatalf("delete: %+v, want a write-write conflict with version 3", o)
	}
}

// Keeping writes leave the row index with their versions, as writes do.
func TestKeepingWritesLeaveTheIndexWithTheWindow(t *testing.T) {
	s := New(Config{WindowVersions: 4}, 0)
	for i := range 100 {
		s.Certify(Request{Txn: TxnID{"r", uint64(i + 1)}, StartVersion: s.Version(), Keys: []Key{keep("public.parent", i)}})
	}
	if n := s.IndexedRows(); n != 4 {
		t.Fatalf("%d rows indexed, want the window's 4", n)
	}
}

// A reference committed before the writer's snapshot does not conflict:
// the writer's own replica saw the child (its foreign-key check, or its
// cascade, decides).
func TestReferenceBeforeSnapshotDoesNotConflict(t *testing.T) {
	s := New(Config{WindowVersions: 100}, 0)
	s.Certify(Request{Txn: TxnID{"r1", 1}, Keys: []Key{row("public.child", 1), ref("public.parent", 7)}}) // version 1
	o := s.Certify(Request{Txn: TxnID{"r2", 1}, StartVersion: 1, Keys: []Key{row("public.parent", 7)}})
	if o.Decision != Commit {
		t.Fatalf("%+v, want commit", o)
	}
}

// A request whose reference is not one row is invalid.
func TestReferenceMustNameARow(t *testing.T) {
	s := New(Config{WindowVersions: 100}, 0)
	for _, k := range []Key{{Kind: Reference}, {Table: TableKey("public.t").Table, Kind: Reference}, {Table: 1, Row: 2, Kind: 9},
		{Kind: KeepingWrite}, {Table: TableKey("public.t").Table, Kind: KeepingWrite}} {
		if o := s.Certify(Request{Txn: TxnID{"r", 1}, Keys: []Key{k}}); o.Reason != ReasonInvalid {
			t.Fatalf("key %+v: %+v, want invalid", k, o)
		}
	}
}

// References are forgotten with their versions at the low-water mark, as
// rows are: the reference index stays bounded.
func TestReferencesLeaveTheIndexWithTheWindow(t *testing.T) {
	s := New(Config{WindowVersions: 4}, 0)
	for i := range 100 {
		s.Certify(Request{Txn: TxnID{"r", uint64(i + 1)}, StartVersion: s.Version(),
			Keys: []Key{row("public.child", i), ref("public.parent", i)}})
	}
	if n := s.IndexedReferences(); n != 4 {
		t.Fatalf("%d references indexed, want the window's 4", n)
	}
}

// TestSnapshotFormat1IsStillRead: a snapshot written before references
// existed (format 1: no kind byte, no lastRowReference) is read, and the
// state decides as the one it was taken from.
func TestSnapshotFormat1IsStillRead(t *testing.T) {
	s := New(Config{WindowVersions: 8}, 0)
	for i := range 20 {
		s.Certify(Request{Txn: TxnID{"r", uint64(i + 1)}, StartVersion: s.Version(),
			Keys: []Key{row("public.t", i%5), TableKey("public.u")}})
	}
	copied, err := Unmarshal(Config{WindowVersions: 8}, marshalFormat1(s))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(copied.Marshal(), s.Marshal()) {
		t.Fatal("a format 1 snapshot decodes to another state")
	}
	bad := marshalFormat1(s)
	bad[len(snapshotMagic)] = snapshotFormat + 1
	if _, err := Unmarshal(Config{WindowVersions: 8}, bad); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("format %d: %v, want ErrBadSnapshot", snapshotFormat+1, err)
	}
}

// TestSnapshotFormat2IsStillRead: a snapshot written before keeping writes
// (format 2: the layout of format 3, no KeepingWrite key) is read, and the
// state decides as the one it was taken from; a format 2 snapshot that
// holds a keeping write is corrupt.
func TestSnapshotFormat2IsStillRead(t *testing.T) {
	s := New(Config{WindowVersions: 8}, 0)
	for i := range 20 {
		s.Certify(Request{Txn: TxnID{"r", uint64(i + 1)}, StartVersion: s.Version(),
			Keys: []Key{row("public.t", i%5), ref("public.p", i%3), TableKey("public.u")}})
	}
	old := marshalWithoutSpans(s, snapshotFormatNoKeepingWrites)
	copied, err := Unmarshal(Config{WindowVersions: 8}, old)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(copied.Marshal(), s.Marshal()) {
		t.Fatal("a format 2 snapshot decodes to another state")
	}
	s.Certify(Request{Txn: TxnID{"r", 100}, StartVersion: s.Version(), Keys: []Key{keep("public.p", 1)}})
	if _, err := Unmarshal(Config{WindowVersions: 8}, marshalWithoutSpans(s, snapshotFormatNoKeepingWrites)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("format 2 with a keeping write: %v, want ErrBadSnapshot", err)
	}
}

// marshalFormat1 is Marshal as it was before references (format 1).
func marshalFormat1(s *State) []byte {
	b := append([]byte(snapshotMagic), snapshotFormatNoReferences)
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
		}
	}
	return b
}
