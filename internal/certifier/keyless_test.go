package certifier_test

import (
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

func insertRow(table, row string) *pb.Change {
	return &pb.Change{Table: table, Op: pb.Op_OP_INSERT_ROW, Row: []byte(row)}
}

func deleteRow(table, row string) *pb.Change {
	return &pb.Change{Table: table, Op: pb.Op_OP_DELETE_ROW, Key: []byte(row)}
}

// Rows of a table without a primary key, certified: inserts from two
// replicas commit, equal rows included; two updates (or deletes) of equal
// rows from the same snapshot conflict, the abort naming the row; a
// TRUNCATE concurrent with an insert conflicts; an operation this
// certifier does not know is refused as invalid, never certified.
func TestCertifyKeylessRows(t *testing.T) {
	srv := listen(t, certifier.Config{})
	a, b := connect(t, srv, "a", 0), connect(t, srv, "b", 0)

	if r := a.certify(t, 0, insertRow("public.h", "(1,x)")); r.Decision != pb.Decision_DECISION_COMMIT { // 1
		t.Fatalf("insert: %v", r)
	}
	if r := b.certify(t, 0, insertRow("public.h", "(1,x)")); r.Decision != pb.Decision_DECISION_COMMIT { // 2
		t.Fatalf("an equal row inserted concurrently: %v", r)
	}
	if r := a.certify(t, 2, deleteRow("public.h", "(1,x)"), insertRow("public.h", "(1,y)")); r.Decision != pb.Decision_DECISION_COMMIT { // 3
		t.Fatalf("update: %v", r)
	}
	r := b.certify(t, 2, deleteRow("public.h", "(1,x)"), insertRow("public.h", "(1,z)"))
	if r.Decision != pb.Decision_DECISION_ABORT || r.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || r.ConflictVersion != 3 ||
		!strings.Contains(r.Detail, "public.h row (1,x)") {
		t.Fatalf("a concurrent update of an equal row: %v", r)
	}
	if r := b.certify(t, 2, deleteRow("public.h", "(1,w)")); r.Decision != pb.Decision_DECISION_COMMIT { // 4
		t.Fatalf("a concurrent delete of another row: %v", r)
	}
	if r := b.certify(t, 4, &pb.Change{Table: "public.h", Op: pb.Op_OP_TRUNCATE}); r.Decision != pb.Decision_DECISION_COMMIT { // 5
		t.Fatalf("truncate: %v", r)
	}
	r = a.certify(t, 4, insertRow("public.h", "(2,x)"))
	if r.Decision != pb.Decision_DECISION_ABORT || r.ConflictVersion != 5 {
		t.Fatalf("an insert concurrent with a TRUNCATE: %v", r)
	}
	r = a.certify(t, 5, insertRow("public.h", "(2,x)"), &pb.Change{Table: "public.h", Op: pb.Op(99), Key: []byte("[1]")})
	if r.Decision != pb.Decision_DECISION_ABORT || r.AbortReason != pb.AbortReason_ABORT_REASON_INVALID ||
		!strings.Contains(r.Detail, "unknown operation") {
		t.Fatalf("an unknown operation: %v", r)
	}
	for _, bad := range []*pb.Change{{Op: pb.Op_OP_INSERT_ROW, Row: []byte("(1)")}, {Op: pb.Op_OP_DELETE_ROW, Table: "public.h"}} {
		if _, err := certifier.KeysOf(&pb.Writeset{Changes: []*pb.Change{bad}}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
