package certification

import (
	"errors"
	"slices"
	"testing"
)

// Rows inserted into a table without a primary key have no identity:
// concurrent inserts into the table never conflict with each other nor
// with row writes of it, but do with a TRUNCATE or DDL of the table (or
// the schema), in either order.
func TestKeylessInsertConflictsOnlyWithWholeTableWrites(t *testing.T) {
	s := New(Config{WindowVersions: 100}, 0)
	seq := uint64(0)
	certify := func(start uint64, keys ...Key) Outcome {
		seq++
		return s.Certify(Request{Txn: TxnID{"r", seq}, StartVersion: start, Keys: keys})
	}
	ins := KeylessInsertKey("public.h")
	if o := certify(0, ins); o.Decision != Commit {
		t.Fatalf("first insert: %+v", o)
	}
	for _, k := range []Key{TableKey("public.h"), SchemaKey} {
		if o := certify(0, k); o.Decision != Abort || o.Reason != ReasonConflict || o.ConflictVersion != 1 {
			t.Fatalf("%+v from before the insert: %+v, want a conflict with version 1", k, o)
		}
	}
	for _, k := range []Key{ins, RowKey("public.h", []byte("(1,2)")), ReferenceKey("public.h#u", []byte("[1]")),
		TableKey("public.g")} {
		if o := certify(0, k); o.Decision != Commit {
			t.Fatalf("%+v from before the insert: %+v, want commit", k, o)
		}
	}
	truncated := certify(s.Version(), TableKey("public.h")).CommitVersion
	if o := certify(truncated-1, ins); o.Decision != Abort || o.Reason != ReasonConflict || o.ConflictVersion != truncated {
		t.Fatalf("insert from before the TRUNCATE: %+v, want a conflict with version %d", o, truncated)
	}
	ddl := certify(s.Version(), SchemaKey).CommitVersion
	if o := certify(ddl-1, ins); o.Decision != Abort || o.ConflictVersion != ddl {
		t.Fatalf("insert from before the DDL: %+v, want a conflict with version %d", o, ddl)
	}
	if o := certify(ddl, ins); o.Decision != Commit {
		t.Fatalf("insert after the DDL: %+v", o)
	}
	if s.IndexedRows() != 1 {
		t.Fatalf("%d rows indexed, want 1 (the row key; inserts index none)", s.IndexedRows())
	}
	bad := RowKey("public.h", []byte("(1)"))
	bad.Kind = KeylessInsert
	if o := certify(s.Version(), bad); o.Decision != Abort || o.Reason != ReasonInvalid {
		t.Fatalf("a keyless insert naming a row: %+v, want invalid", o)
	}
}

// TestSnapshotFormat3IsStillRead: a snapshot written before keyless
// inserts (format 3: the layout of format 4) is read, and the state
// decides as the one it was taken from; a format 3 snapshot that holds a
// keyless insert is corrupt. A format 4 snapshot keeps what a keyless
// insert left: the TRUNCATE it conflicts with is still refused.
func TestSnapshotFormat3IsStillRead(t *testing.T) {
	s := New(Config{WindowVersions: 8}, 0)
	for i := range 20 {
		s.Certify(Request{Txn: TxnID{"r", uint64(i + 1)}, StartVersion: s.Version(),
			Keys: []Key{row("public.t", i%5), keep("public.p", i%3), TableKey("public.u")}})
	}
	old := marshalWithoutSpans(s, snapshotFormatNoKeylessInserts)
	copied, err := Unmarshal(Config{WindowVersions: 8}, old)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(copied.Marshal(), s.Marshal()) {
		t.Fatal("a format 3 snapshot decodes to another state")
	}
	inserted := s.Certify(Request{Txn: TxnID{"r", 100}, StartVersion: s.Version(), Keys: []Key{KeylessInsertKey("public.h")}})
	withInsert := s.Marshal()
	restored, err := Unmarshal(Config{WindowVersions: 8}, withInsert)
	if err != nil {
		t.Fatal(err)
	}
	o := restored.Certify(Request{Txn: TxnID{"r", 101}, StartVersion: inserted.CommitVersion - 1, Keys: []Key{TableKey("public.h")}})
	if o.Decision != Abort || o.ConflictVersion != inserted.CommitVersion {
		t.Fatalf("TRUNCATE concurrent with a keyless insert, after a snapshot: %+v", o)
	}
	if _, err := Unmarshal(Config{WindowVersions: 8}, marshalWithoutSpans(s, snapshotFormatNoKeylessInserts)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("format 3 with a keyless insert: %v, want ErrBadSnapshot", err)
	}
}
