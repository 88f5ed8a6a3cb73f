package replica

import (
	"slices"
	"testing"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

// references returns the OP_REFERENCE changes of a writeset, as change()
// prints them, and checks that they come last and carry no row.
func references(t *testing.T, e *certifierpb.LogEntry) []string {
	t.Helper()
	var out []string
	for _, c := range e.GetWriteset().GetChanges() {
		if c.GetOp() == certifierpb.Op_OP_REFERENCE {
			if len(c.GetRow()) != 0 {
				t.Errorf("reference with a row: %v", c)
			}
			out = append(out, change(c))
		} else if len(out) > 0 {
			t.Errorf("change %s after the references %v", change(c), out)
		}
	}
	return out
}

// withRefTriggers is want() for a table with foreign keys: the capture
// triggers plus the two reference triggers with their arguments.
func withRefTriggers(pk, refArgs string) []string {
	w := want(pk)
	return slices.Insert(w, 2, "tashkent_capture_ref_ins:"+refArgs+",", "tashkent_capture_ref_upd:"+refArgs+",")
}

// TestCaptureReferences: inserting a row, or updating its foreign-key
// columns, records the parent key it references, named and encoded as the
// parent's own row change (or unique index value) is, so that the
// certifier sees a parent deleted concurrently on another replica.
func TestCaptureReferences(t *testing.T) {
	srv, c := instance(t, `
		CREATE TABLE parent (id int PRIMARY KEY, code text UNIQUE, v text);
		CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent, v text);
		CREATE TABLE by_code (id int PRIMARY KEY, code text REFERENCES parent (code));
		CREATE TABLE wp (a int, b text, PRIMARY KEY (a, b));
		CREATE TABLE wc (id int PRIMARY KEY, x text, y int, FOREIGN KEY (x, y) REFERENCES wp (b, a) MATCH SIMPLE);
		CREATE TABLE tree (id int PRIMARY KEY, up int REFERENCES tree);
		CREATE TABLE casc (id int PRIMARY KEY, parent_id int REFERENCES parent ON DELETE CASCADE);
		CREATE TABLE tp (at timestamptz PRIMARY KEY);
		CREATE TABLE tc (id int PRIMARY KEY, at timestamptz REFERENCES tp);
		CREATE TABLE pp (id int PRIMARY KEY) PARTITION BY RANGE (id);
		CREATE TABLE pp1 PARTITION OF pp FOR VALUES FROM (0) TO (100);
		CREATE TABLE pc (id int PRIMARY KEY, pp_id int REFERENCES pp);
		CREATE TABLE two (id int PRIMARY KEY, a int REFERENCES parent, b text REFERENCES parent (code));
		CREATE TABLE nofk (id int PRIMARY KEY, v int);`)
	s := session(t, srv)
	run := committer(t, s)

	eqStrings(t, "a table without foreign keys keeps its triggers", triggers(t, c, "nofk"), want("id"))
	eqStrings(t, "parent", triggers(t, c, "parent"), want("id,,1,parent_code_key,s,code"))
	eqStrings(t, "child", triggers(t, c, "child"), withRefTriggers("id", "public.parent,parent_id"))
	eqStrings(t, "through a unique constraint", triggers(t, c, "by_code"), withRefTriggers("id", `public.parent#parent_code_key,code`))
	eqStrings(t, "columns in the parent key's order", triggers(t, c, "wc"), withRefTriggers("id", "public.wp,2,y,x"))
	eqStrings(t, "two one-column foreign keys", triggers(t, c, "two"), withRefTriggers("id", "public.parent,a,public.parent#parent_code_key,b"))
	eqStrings(t, "a partitioned parent, not its partitions", triggers(t, c, "pc"), withRefTriggers("id", "public.pp,pp_id"))

	// Installing again leaves the reference triggers alone (no lock taken).
	oids := func() string {
		var s string
		if err := c.QueryRow(tctx(t), `SELECT string_agg(oid::text, ',' ORDER BY oid) FROM pg_trigger WHERE tgname LIKE 'tashkent%'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := oids()
	if err := Install(tctx(t), c); err != nil {
		t.Fatal(err)
	}
	if oids() != before {
		t.Error("Install recreated triggers that were already right")
	}

	parents := run(`INSERT INTO parent VALUES (1, 'a', 'x'), (2, 'b', 'x'), (3, 'c', 'x'); INSERT INTO wp VALUES (5, 'q"x');
		INSERT INTO tp VALUES ('2024-05-01 12:00:00+00'); INSERT INTO pp VALUES (7)`)
	eqStrings(t, "parents reference nothing", references(t, parents), nil)
	var wpKey, tpKey string
	for _, ch := range parents.GetWriteset().GetChanges() {
		switch ch.GetTable() {
		case "public.wp":
			wpKey = string(ch.GetKey())
		case "public.tp":
			tpKey = string(ch.GetKey())
		}
	}

	e := run(`INSERT INTO child VALUES (1, 1, 'a'), (2, 1, 'b'), (3, NULL, 'c'), (4, 2, 'd')`)
	eqStrings(t, "insert: one reference per parent, none for NULL", references(t, e), []string{
		`R public.parent [1]`, `R public.parent [2]`})
	e = run(`INSERT INTO by_code VALUES (1, 'a'), (2, NULL)`)
	eqStrings(t, "through a unique constraint: the index value's name", references(t, e), []string{
		`R public.parent#parent_code_key ["a"]`})
	e = run(`INSERT INTO wc VALUES (1, 'q"x', 5), (2, 'q"x', NULL), (3, NULL, 5)`)
	eqStrings(t, "two columns: the parent's key text; MATCH SIMPLE", references(t, e), []string{`R public.wp ` + wpKey})
	e = run(`UPDATE wc SET y = 5 WHERE id = 2; UPDATE wc SET x = NULL WHERE id = 1`)
	eqStrings(t, "two columns: an update that completes a key", references(t, e), []string{`R public.wp ` + wpKey})
	e = run(`INSERT INTO two VALUES (1, 1, 'b'), (2, NULL, 'b')`)
	eqStrings(t, "two foreign keys", references(t, e), []string{`R public.parent [1]`, `R public.parent#parent_code_key ["b"]`})
	e = run(`UPDATE two SET b = 'a' WHERE id = 1`)
	eqStrings(t, "two foreign keys: the one that changed", references(t, e), []string{`R public.parent#parent_code_key ["a"]`})
	mustExec(t, s, `SET TimeZone = 'Asia/Tokyo'; SET DateStyle = 'SQL, DMY'`)
	e = run(`INSERT INTO tc VALUES (1, '2024-05-01 21:00:00+09')`)
	mustExec(t, s, `RESET TimeZone; RESET DateStyle`)
	eqStrings(t, "print settings pinned: the parent's key text", references(t, e), []string{`R public.tp ` + tpKey})
	e = run(`INSERT INTO pc VALUES (1, 7)`)
	eqStrings(t, "partitioned parent", references(t, e), []string{`R public.pp [7]`})

	e = run(`UPDATE child SET v = 'z'`)
	eqStrings(t, "an update that keeps the foreign key references nothing new", references(t, e), nil)
	e = run(`UPDATE child SET parent_id = 3 WHERE id = 1; UPDATE child SET parent_id = 1 WHERE id = 4`)
	eqStrings(t, "an update to another parent references it", references(t, e), []string{`R public.parent [1]`, `R public.parent [3]`})
	e = run(`UPDATE child SET parent_id = 2 WHERE id IN (1, 2)`)
	eqStrings(t, "per statement: parents no old row of it held", references(t, e), []string{`R public.parent [2]`})
	e = run(`UPDATE child SET parent_id = CASE parent_id WHEN 1 THEN 2 ELSE 1 END WHERE id IN (2, 4)`)
	eqStrings(t, "parents only swapped between the statement's rows: none new", references(t, e), nil)

	e = run(`INSERT INTO parent VALUES (9, 'i', 'x'); INSERT INTO child VALUES (9, 9, 'n')`)
	eqStrings(t, "a parent the transaction writes itself is not referenced", references(t, e), nil)
	e = run(`INSERT INTO tree VALUES (1, NULL), (2, 1)`)
	eqStrings(t, "self-reference to a row of the same statement", references(t, e), nil)
	e = run(`INSERT INTO tree VALUES (3, 1)`)
	eqStrings(t, "self-reference", references(t, e), []string{`R public.tree [1]`})

	run(`INSERT INTO casc VALUES (1, 3), (2, 3)`)
	e = run(`DELETE FROM child WHERE parent_id = 3; DELETE FROM parent WHERE id = 3`)
	eqStrings(t, "a cascaded delete is captured as row changes", changes(e.GetWriteset().GetChanges()), []string{
		`D public.parent [3]`, `D public.casc [1]`, `D public.casc [2]`, `K public.parent#parent_code_key ["c"]`})

	// Foreign keys added later, and a renamed parent, reach the triggers.
	mustExec(t, c, `ALTER TABLE nofk ADD COLUMN p int REFERENCES parent`)
	e = run(`INSERT INTO nofk VALUES (1, 1, 2)`)
	eqStrings(t, "foreign key added by DDL", references(t, e), []string{`R public.parent [2]`})
	mustExec(t, c, `ALTER TABLE parent RENAME TO mother; ALTER INDEX parent_code_key RENAME TO mother_code_key`)
	e = run(`INSERT INTO child VALUES (10, 1, 'r'); INSERT INTO by_code VALUES (3, 'b')`)
	eqStrings(t, "parent renamed", references(t, e), []string{`R public.mother [1]`, `R public.mother#mother_code_key ["b"]`})
	mustExec(t, c, `ALTER TABLE nofk DROP COLUMN p`)
	eqStrings(t, "foreign key dropped", triggers(t, c, "nofk"), want("id"))
}

// TestCaptureReferencesDeletedFirstInCollapse: Collapse drops references
// to keys the writeset writes, keeps one per key, and sorts them last.
func TestCollapseReferences(t *testing.T) {
	ws, err := Collapse([]Event{
		{Table: "public.p", Op: 'R', Key: []byte("[2]")},
		{Table: "public.c", Op: 'U', Key: []byte("[1]"), Row: []byte("(1,2)")},
		{Table: "public.p", Op: 'R', Key: []byte("[1]")},
		{Table: "public.p", Op: 'U', Key: []byte("[1]"), Row: []byte("(1)")},
		{Table: "public.p#p_code_key", Op: 'K', Key: []byte(`["a"]`)},
		{Table: "public.p#p_code_key", Op: 'R', Key: []byte(`["a"]`)},
		{Table: "public.p", Op: 'R', Key: []byte("[2]")},
		{Table: "public.a", Op: 'R', Key: []byte("[9]")},
	})
	if err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "writeset", changes(ws), []string{
		`U public.c [1] (1,2)`, `U public.p [1] (1)`, `K public.p#p_code_key ["a"]`, `R public.a [9]`, `R public.p [2]`})
	if _, err := Collapse([]Event{{Table: "public.p", Op: 'R'}}); err == nil {
		t.Error("a reference without a key was accepted")
	}
}
