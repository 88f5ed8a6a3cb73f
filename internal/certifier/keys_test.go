package certifier_test

import (
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

func uniqueKey(index, values string) *pb.Change {
	return &pb.Change{Table: index, Op: pb.Op_OP_UNIQUE_KEY, Key: []byte(values)}
}

func TestKeysOfUniqueKeyIsARowOfTheIndex(t *testing.T) {
	keys, err := certifier.KeysOf(&pb.Writeset{Changes: []*pb.Change{
		upsert("public.users", 1),
		uniqueKey(`public.users#users_email_key`, `["a@x"]`),
		{Table: "public.users", Op: pb.Op_OP_UPSERT, Key: []byte(`["a@x"]`), Row: []byte("(a@x)")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("%d keys for 3 changes", len(keys))
	}
	if want := certification.RowKey(`public.users#users_email_key`, []byte(`["a@x"]`)); keys[1] != want {
		t.Errorf("unique key %v, want RowKey of the index %v", keys[1], want)
	}
	// The same bytes as a row of the table itself are another key: an index
	// value never stands for a primary key, nor for the whole table.
	if keys[1] == keys[2] {
		t.Error("a unique index value and a primary key with the same text share a key")
	}
	if keys[1].Table == certification.TableKey("public.users").Table {
		t.Error("a unique index value falls under the table's key")
	}
	// Another index of the same table, same values: another key.
	other, err := certifier.KeysOf(&pb.Writeset{Changes: []*pb.Change{uniqueKey(`public.users#users_login_key`, `["a@x"]`)}})
	if err != nil {
		t.Fatal(err)
	}
	if other[0] == keys[1] {
		t.Error("two indexes of one table share keys")
	}

	for _, bad := range []*pb.Change{
		{Op: pb.Op_OP_UNIQUE_KEY, Key: []byte(`[1]`)},
		{Op: pb.Op_OP_UNIQUE_KEY, Table: "public.users#users_email_key"},
	} {
		if _, err := certifier.KeysOf(&pb.Writeset{Changes: []*pb.Change{bad}}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// Two replicas insert different primary keys with the same value of a
// unique column: the second to certify aborts on the index value. A
// different value, or the same text as a primary key, does not conflict.
func TestCertifyUniqueKeysConflictAcrossRows(t *testing.T) {
	srv := listen(t, certifier.Config{})
	a, b := connect(t, srv, "a", 0), connect(t, srv, "b", 0)
	const idx = `public.users#users_email_key`

	if r := a.certify(t, 0, upsert("public.users", 1), uniqueKey(idx, `["x"]`)); r.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("first: %v", r)
	}
	r := b.certify(t, 0, upsert("public.users", 2), uniqueKey(idx, `["x"]`))
	if r.Decision != pb.Decision_DECISION_ABORT || r.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || r.ConflictVersion != 1 {
		t.Fatalf("same unique value from another row: %v, want a conflict with version 1", r)
	}
	if r := b.certify(t, 0, upsert("public.users", 3), uniqueKey(idx, `["y"]`)); r.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("another unique value: %v", r)
	}
	if r := b.certify(t, 0, &pb.Change{Table: "public.users", Op: pb.Op_OP_UPSERT, Key: []byte(`["x"]`), Row: []byte("(x)")}); r.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("a primary key spelled like the unique value: %v", r)
	}
	// Once the replica has seen the version that took the value, it may
	// free and take it again.
	if r := b.certify(t, 1, upsert("public.users", 4), uniqueKey(idx, `["x"]`)); r.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("after the snapshot includes version 1: %v", r)
	}
}

func reference(table, key string) *pb.Change {
	return &pb.Change{Table: table, Op: pb.Op_OP_REFERENCE, Key: []byte(key)}
}

// A foreign-key reference is the parent row's key as a Reference: it meets
// the parent's row changes in certification, and is not a write.
func TestKeysOfReferenceIsTheParentRowAsAReference(t *testing.T) {
	keys, err := certifier.KeysOf(&pb.Writeset{Changes: []*pb.Change{reference("public.parent", "[1]")}})
	if err != nil {
		t.Fatal(err)
	}
	if want := certification.ReferenceKey("public.parent", []byte("[1]")); keys[0] != want {
		t.Errorf("reference key %v, want %v", keys[0], want)
	}
	if row := certification.RowKey("public.parent", []byte("[1]")); keys[0].Table != row.Table || keys[0].Row != row.Row {
		t.Errorf("reference key %v does not name the parent row %v", keys[0], row)
	}
	for _, bad := range []*pb.Change{reference("", "[1]"), reference("public.parent", "")} {
		if _, err := certifier.KeysOf(&pb.Writeset{Changes: []*pb.Change{bad}}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// Replica a deletes a parent row while replica b inserts a child that
// references it: the second to certify aborts with the reference-conflict
// reason and a detail that says which side it was. Two children of one
// parent both commit.
func TestCertifyReferenceConflicts(t *testing.T) {
	srv := listen(t, certifier.Config{})
	a, b := connect(t, srv, "a", 0), connect(t, srv, "b", 0)
	deleteParent := &pb.Change{Table: "public.parent", Op: pb.Op_OP_DELETE, Key: []byte("[1]")}

	if r := a.certify(t, 0, upsert("public.child", 1), reference("public.parent", "[1]")); r.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("first child: %v", r)
	}
	if r := b.certify(t, 0, upsert("public.child", 2), reference("public.parent", "[1]")); r.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("second child of the same parent: %v", r)
	}
	r := b.certify(t, 0, deleteParent)
	if r.Decision != pb.Decision_DECISION_ABORT || r.AbortReason != pb.AbortReason_ABORT_REASON_REFERENCE_CONFLICT ||
		!strings.Contains(r.Detail, "references through a foreign key") {
		t.Fatalf("parent deleted under concurrent children: %v", r)
	}
	if r := a.certify(t, 2, deleteParent); r.Decision != pb.Decision_DECISION_COMMIT { // version 3
		t.Fatalf("parent deleted after the children were seen: %v", r)
	}
	r = b.certify(t, 2, upsert("public.child", 3), reference("public.parent", "[1]"))
	if r.Decision != pb.Decision_DECISION_ABORT || r.AbortReason != pb.AbortReason_ABORT_REASON_REFERENCE_CONFLICT ||
		!strings.Contains(r.Detail, "this transaction references (foreign key) public.parent key [1]") || r.ConflictVersion != 3 {
		t.Fatalf("child inserted under a concurrent delete: %v", r)
	}
}
