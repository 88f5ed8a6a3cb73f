package replica

import (
	"testing"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

// keeping prints a change as change does, with "M" for an upsert that
// keeps its row (KeepsRow).
func keeping(cs []*certifierpb.Change) []string {
	out := changes(cs)
	for i, c := range cs {
		if c.GetKeepsRow() {
			out[i] = "M" + out[i][1:]
		}
	}
	return out
}

// TestCollapseKeepingUpdates: a key's change keeps its row only when every
// event of the key in the transaction was a keeping update ('M') and the
// last one an upsert (certification.KeepingWrite; the foreign-key bullet
// of docs/GUARANTEES.md).
func TestCollapseKeepingUpdates(t *testing.T) {
	ev := func(op byte, key, row string) Event {
		return Event{Table: "public.p", Op: op, Key: []byte(key), Row: []byte(row)}
	}
	for _, tc := range []struct {
		name string
		evs  []Event
		want []string
	}{
		{"one keeping update", []Event{ev('M', "[1]", "(1,a)")}, []string{"M public.p [1] (1,a)"}},
		{"two keeping updates", []Event{ev('M', "[1]", "(1,a)"), ev('M', "[1]", "(1,b)")}, []string{"M public.p [1] (1,b)"}},
		{"insert then keeping update", []Event{ev('U', "[1]", "(1,a)"), ev('M', "[1]", "(1,b)")}, []string{"U public.p [1] (1,b)"}},
		{"keeping update then plain upsert", []Event{ev('M', "[1]", "(1,a)"), ev('U', "[1]", "(1,b)")}, []string{"U public.p [1] (1,b)"}},
		{"keeping update then delete", []Event{ev('M', "[1]", "(1,a)"), ev('D', "[1]", "")}, []string{"D public.p [1]"}},
		{"delete, insert, keeping update", []Event{ev('D', "[1]", ""), ev('U', "[1]", "(1,a)"), ev('M', "[1]", "(1,b)")},
			[]string{"U public.p [1] (1,b)"}},
		{"key moved in, then kept", []Event{ev('D', "[1]", ""), ev('U', "[2]", "(2,a)"), ev('M', "[2]", "(2,b)")},
			[]string{"D public.p [1]", "U public.p [2] (2,b)"}},
		{"keys apart", []Event{ev('M', "[1]", "(1,a)"), ev('U', "[2]", "(2,a)"), ev('M', "[3]", "(3,a)")},
			[]string{"M public.p [1] (1,a)", "U public.p [2] (2,a)", "M public.p [3] (3,a)"}},
		// A reference to a row the transaction keeps is dropped: the
		// keeping write conflicts with every plain write a reference would.
		{"reference to a kept row", []Event{ev('M', "[1]", "(1,a)"), {Table: "public.p", Op: 'R', Key: []byte("[1]")}},
			[]string{"M public.p [1] (1,a)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Collapse(tc.evs)
			if err != nil {
				t.Fatal(err)
			}
			eqStrings(t, tc.name, keeping(got), tc.want)
		})
	}
	if _, err := Collapse([]Event{{Table: "public.p", Op: 'M'}}); err == nil {
		t.Error("a keyless keeping update was accepted")
	}
}

// TestCaptureKeepingUpdates: capture_key records a one-row UPDATE that
// moved no key as a keeping update, on a parent referenced by its primary
// key as on any table; a key-moving UPDATE, an insert then an update, a
// multi-row UPDATE (conservative: no per-row comparison) and the tables
// that capture (not capture_key) covers are plain writes.
func TestCaptureKeepingUpdates(t *testing.T) {
	srv, c := instance(t, `
		CREATE TABLE parent (id int PRIMARY KEY, v text);
		CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent, v text);
		CREATE TABLE coded (id int PRIMARY KEY, code text UNIQUE, v text);
		CREATE TABLE by_code (id int PRIMARY KEY, code text REFERENCES coded (code));
		INSERT INTO parent VALUES (1, 'a'), (2, 'b'), (3, 'c');
		INSERT INTO child VALUES (1, 1, 'x');
		INSERT INTO coded VALUES (1, 'c1', 'a');`)
	eqStrings(t, "parent triggers", triggers(t, c, "parent"), want("id"))
	s := session(t, srv)
	for i, tc := range []struct {
		sql  string
		want []string
	}{
		{`UPDATE parent SET v = 'a2' WHERE id = 1`, []string{"M public.parent [1] (1,a2)"}},
		{`UPDATE child SET v = 'y' WHERE id = 1`, []string{"M public.child [1] (1,1,y)"}},
		{`UPDATE child SET parent_id = 2 WHERE id = 1`, []string{"M public.child [1] (1,2,y)", "R public.parent [2]"}},
		{`UPDATE parent SET id = 4 WHERE id = 3`, []string{"D public.parent [3]", "U public.parent [4] (4,c)"}},
		{`INSERT INTO parent VALUES (5, 'e'); UPDATE parent SET v = 'e2' WHERE id = 5`, []string{"U public.parent [5] (5,e2)"}},
		{`UPDATE parent SET v = 'm' WHERE id IN (1, 2)`, []string{"U public.parent [1] (1,m)", "U public.parent [2] (2,m)"}},
		{`UPDATE coded SET v = 'b' WHERE id = 1`, []string{"U public.coded [1] (1,c1,b)"}},
		{`UPDATE parent SET v = 'z' WHERE id = 1; DELETE FROM parent WHERE id = 4`, []string{"M public.parent [1] (1,z)", "D public.parent [4]"}},
	} {
		e := commitLocal(t, s, uint64(i+1), tc.sql)
		eqStrings(t, tc.sql, keeping(e.GetWriteset().GetChanges()), tc.want)
	}
}
