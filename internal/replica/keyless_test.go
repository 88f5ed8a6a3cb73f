package replica

import (
	"slices"
	"testing"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

func keylessEntry(version uint64, changes ...*certifierpb.Change) *certifierpb.LogEntry {
	return &certifierpb.LogEntry{Version: version, Writeset: &certifierpb.Writeset{Changes: changes}}
}

func ins(row string) *certifierpb.Change {
	return &certifierpb.Change{Table: "public.h", Op: certifierpb.Op_OP_INSERT_ROW, Row: []byte(row)}
}

func del(row string) *certifierpb.Change {
	return &certifierpb.Change{Table: "public.h", Op: certifierpb.Op_OP_DELETE_ROW, Key: []byte(row)}
}

// The changes of a table without a primary key, over a run of versions,
// are planned as the rows to delete among those already there and the
// rows to insert: a delete takes back the latest earlier insert of an
// equal row, if there is one; equal rows count one for one; TRUNCATE and
// DDL end the step.
func TestPlanKeylessRows(t *testing.T) {
	plan, err := buildPlan([]*certifierpb.LogEntry{
		keylessEntry(1, ins("(1)"), ins("(1)"), ins("(2)")),
		keylessEntry(2, del("(1)"), ins("(3)"), del("(9)")),
		keylessEntry(3, del("(1)"), del("(1)"), del("(9)"), ins("(1)")),
		keylessEntry(4, &certifierpb.Change{Table: "public.h", Op: certifierpb.Op_OP_TRUNCATE}),
		keylessEntry(5, del("(5)"), ins("(5)")),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 3 || plan[0].kind != stepRows || plan[1].kind != stepTruncate || plan[2].kind != stepRows {
		t.Fatalf("plan %+v: want rows, truncate, rows", plan)
	}
	k := plan[0].byName["public.h"].keyless
	if got, want := k.deleted, []string{"(9)", "(1)", "(9)"}; !slices.Equal(got, want) {
		t.Errorf("deleted %q, want %q", got, want)
	}
	if got, want := k.inserts(), []string{"(2)", "(3)", "(1)"}; !slices.Equal(got, want) {
		t.Errorf("inserted %q, want %q", got, want)
	}
	k = plan[2].byName["public.h"].keyless
	if !slices.Equal(k.deleted, []string{"(5)"}) || !slices.Equal(k.inserts(), []string{"(5)"}) {
		t.Errorf("after the TRUNCATE: deleted %q, inserted %q; want (5) and (5)", k.deleted, k.inserts())
	}
	if _, err := buildPlan([]*certifierpb.LogEntry{keylessEntry(1, &certifierpb.Change{Table: "public.h", Op: certifierpb.Op_OP_DELETE_ROW})}); err == nil {
		t.Error("a DELETE_ROW without its row was planned")
	}
}
