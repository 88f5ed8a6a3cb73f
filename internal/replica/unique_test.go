package replica

import (
	"slices"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

// uniqueKeys returns the OP_UNIQUE_KEY changes of a writeset, as change()
// prints them, and checks that they come after every row change.
func uniqueKeys(t *testing.T, e *certifierpb.LogEntry) []string {
	t.Helper()
	var out []string
	for _, c := range e.GetWriteset().GetChanges() {
		if c.GetOp() == certifierpb.Op_OP_UNIQUE_KEY {
			if len(c.GetRow()) != 0 {
				t.Errorf("unique key change with a row: %v", c)
			}
			out = append(out, change(c))
		} else if len(out) > 0 {
			t.Errorf("row change %s after the unique keys %v", change(c), out)
		}
	}
	return out
}

func TestCaptureUniqueKeys(t *testing.T) {
	srv, c := instance(t, `
		CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE, a int, b text, v text,
			CONSTRAINT u_ab UNIQUE (a, b));
		CREATE TABLE nnd (id int PRIMARY KEY, code text, x int, CONSTRAINT nnd_code UNIQUE NULLS NOT DISTINCT (code),
			CONSTRAINT nnd_cx UNIQUE NULLS NOT DISTINCT (code, x));
		CREATE TABLE part (id int PRIMARY KEY, code text, active bool, v text);
		CREATE UNIQUE INDEX part_active ON part (code) WHERE active;
		CREATE UNIQUE INDEX part_lower ON part (lower(v));
		CREATE TABLE inc (id int PRIMARY KEY, code text, v text, CONSTRAINT inc_code UNIQUE (code) INCLUDE (v));
		CREATE TABLE doc (id int PRIMARY KEY, d jsonb UNIQUE);
		CREATE TABLE dfr (id int PRIMARY KEY, code int, CONSTRAINT dfr_code UNIQUE (code) DEFERRABLE INITIALLY DEFERRED);
		CREATE TABLE pk_inc (id int, v text, PRIMARY KEY (id) INCLUDE (v));`)
	s := session(t, srv)
	run := committer(t, s)

	eqStrings(t, "u triggers", triggers(t, c, "u"), want("id,,1,u_email_key,s,email,u_ab,s,2,a,b"))
	eqStrings(t, "partial and expression indexes are not certified", triggers(t, c, "part"), want("id"))
	eqStrings(t, "INCLUDE columns are not part of the key", triggers(t, c, "inc"), want("id,,1,inc_code,s,code"))
	eqStrings(t, "NULLS NOT DISTINCT keeps NULLs", triggers(t, c, "nnd"), want("id,,1,nnd_code,n,code,nnd_cx,n,2,code,x"))
	eqStrings(t, "jsonb keeps NULLs (JSON null prints alike)", triggers(t, c, "doc"), want("id,,1,doc_d_key,n,d"))
	eqStrings(t, "a primary key's INCLUDE columns are not key columns", triggers(t, c, "pk_inc"), want("id"))

	// INSERT takes the new rows' values; a key with a NULL is not a value
	// (UNIQUE lets NULLs repeat).
	e := run(`INSERT INTO u VALUES (1, 'x', 1, 'p', 'v1'), (2, NULL, 2, NULL, 'v2'), (3, 'z"q', NULL, 'r', 'v3')`)
	eqStrings(t, "insert", changes(e.GetWriteset().GetChanges()), []string{
		`U public.u [1] (1,x,1,p,v1)`,
		`U public.u [2] (2,,2,,v2)`,
		`U public.u [3] (3,"z""q",,r,v3)`,
		`K public.u#u_ab [1,"p"]`,
		`K public.u#u_email_key ["x"]`,
		`K public.u#u_email_key ["z\"q"]`,
	})
	uniqueKeys(t, e)

	// UPDATE of other columns: no value taken or freed.
	e = run(`UPDATE u SET v = v || '!'`)
	eqStrings(t, "update of a non-unique column", uniqueKeys(t, e), nil)
	// UPDATE of a unique column: the old value is freed, the new one taken.
	e = run(`UPDATE u SET email = 'y' WHERE id = 1`)
	eqStrings(t, "update moves a value", uniqueKeys(t, e), []string{
		`K public.u#u_email_key ["x"]`,
		`K public.u#u_email_key ["y"]`,
	})
	// One column of a composite constraint; to and from NULL.
	e = run(`UPDATE u SET b = 'q' WHERE id = 1; UPDATE u SET email = 'w' WHERE id = 2; UPDATE u SET email = NULL WHERE id = 3`)
	eqStrings(t, "update of composite and NULL", uniqueKeys(t, e), []string{
		`K public.u#u_ab [1,"p"]`,
		`K public.u#u_ab [1,"q"]`,
		`K public.u#u_email_key ["w"]`,
		`K public.u#u_email_key ["z\"q"]`,
	})
	// A primary key change alone moves no unique value.
	e = run(`UPDATE u SET id = 10 WHERE id = 1`)
	eqStrings(t, "primary key change", changes(e.GetWriteset().GetChanges()), []string{
		`D public.u [1]`,
		`U public.u [10] (10,y,1,q,v1!)`,
	})
	// DELETE frees the old rows' values.
	e = run(`DELETE FROM u WHERE id = 10; DELETE FROM u WHERE id = 3`)
	eqStrings(t, "delete", changes(e.GetWriteset().GetChanges()), []string{
		`D public.u [10]`,
		`D public.u [3]`,
		`K public.u#u_ab [1,"q"]`,
		`K public.u#u_email_key ["y"]`,
	})
	// One change per value, whatever the transaction did with it; a
	// TRUNCATE does not remove them.
	e = run(`INSERT INTO u VALUES (20, 'k', NULL, NULL, NULL); UPDATE u SET email = 'k2' WHERE id = 20;
		UPDATE u SET email = 'k' WHERE id = 20; DELETE FROM u WHERE id = 20; TRUNCATE u`)
	eqStrings(t, "collapsed and kept across TRUNCATE", changes(e.GetWriteset().GetChanges()), []string{
		`T public.u`,
		`K public.u#u_email_key ["k"]`,
		`K public.u#u_email_key ["k2"]`,
	})

	// NULLS NOT DISTINCT: NULL is a value like any other.
	e = run(`INSERT INTO nnd VALUES (1, NULL, NULL), (2, 'a', NULL)`)
	eqStrings(t, "nulls not distinct", uniqueKeys(t, e), []string{
		`K public.nnd#nnd_code ["a"]`,
		`K public.nnd#nnd_code [null]`,
		`K public.nnd#nnd_cx ["a",null]`,
		`K public.nnd#nnd_cx [null,null]`,
	})
	// Partial and expression indexes: nothing (not certified).
	e = run(`INSERT INTO part VALUES (1, 'a', true, 'V'); UPDATE part SET code = 'b', v = 'W'; DELETE FROM part`)
	eqStrings(t, "partial and expression indexes", uniqueKeys(t, e), nil)
	// INCLUDE columns do not make the key.
	e = run(`INSERT INTO inc VALUES (1, 'a', 'x'); UPDATE inc SET v = 'y'`)
	eqStrings(t, "include", uniqueKeys(t, e), []string{`K public.inc#inc_code ["a"]`})
	// jsonb: SQL NULL and a JSON null print alike, so both are certified.
	e = run(`INSERT INTO doc VALUES (1, NULL), (2, 'null'), (3, '{"b": 1, "a": [1, 2]}')`)
	eqStrings(t, "jsonb", uniqueKeys(t, e), []string{`K public.doc#doc_d_key [null]`, `K public.doc#doc_d_key [{"a": [1, 2], "b": 1}]`})
	// A deferrable constraint still holds at COMMIT: certified.
	e = run(`INSERT INTO dfr VALUES (1, 7), (2, 8)`)
	eqStrings(t, "deferrable", uniqueKeys(t, e), []string{`K public.dfr#dfr_code [7]`, `K public.dfr#dfr_code [8]`})
	// Values swapped between rows in one statement stay held, by rows the
	// transaction writes: nothing to certify beyond the rows.
	e = run(`UPDATE dfr SET code = 15 - code`)
	eqStrings(t, "swap", uniqueKeys(t, e), nil)
	if n := len(e.GetWriteset().GetChanges()); n != 2 {
		t.Errorf("swap: %d changes, want the two rows", n)
	}
	// A primary key with INCLUDE columns: only its key columns name the row.
	e = run(`INSERT INTO pk_inc VALUES (1, 'a'); UPDATE pk_inc SET v = 'b'`)
	eqStrings(t, "primary key with INCLUDE", changes(e.GetWriteset().GetChanges()), []string{`U public.pk_inc [1] (1,b)`})
}

// The capture triggers follow the table's unique indexes as they are
// created, renamed and dropped, by CREATE / ALTER / DROP INDEX and by
// ALTER TABLE, on plain and partitioned tables.
func TestCaptureTriggersFollowUniqueIndexes(t *testing.T) {
	srv, c := instance(t, `CREATE TABLE t (id int PRIMARY KEY, a int, b int, v text);
		CREATE TABLE other (id int PRIMARY KEY, x int UNIQUE);
		INSERT INTO t VALUES (1, 1, 1, 'x'), (2, 1, 2, 'x');`)
	s := session(t, srv)
	ctx := tctx(t)
	v := uint64(0)
	run := func(sql string) []string {
		t.Helper()
		v++
		return uniqueKeys(t, commitLocal(t, s, v, sql))
	}
	var gen0 int64
	if err := c.QueryRow(ctx, `SELECT coalesce(max(gen), 0) FROM tashkent.ddl_log`).Scan(&gen0); err != nil {
		t.Fatal(err)
	}

	eqStrings(t, "no unique index", triggers(t, c, "t"), want("id"))
	mustExec(t, c, `CREATE UNIQUE INDEX t_b ON t (b)`)
	eqStrings(t, "after CREATE UNIQUE INDEX", triggers(t, c, "t"), want("id,,1,t_b,s,b"))
	eqStrings(t, "capture after CREATE UNIQUE INDEX", run(`INSERT INTO t VALUES (3, 3, 3, 'y')`), []string{`K public.t#t_b [3]`})
	var gen1 int64
	if err := c.QueryRow(ctx, `SELECT coalesce(max(gen), 0) FROM tashkent.ddl_log`).Scan(&gen1); err != nil || gen1 <= gen0 {
		t.Errorf("ddl_log generation %d -> %d (%v): the applier would not notice the change", gen0, gen1, err)
	}
	mustExec(t, c, `CREATE INDEX t_v ON t (v)`) // not unique: nothing changes
	eqStrings(t, "after CREATE INDEX", triggers(t, c, "t"), want("id,,1,t_b,s,b"))
	mustExec(t, c, `ALTER INDEX t_b RENAME TO "t B"`)
	eqStrings(t, "after ALTER INDEX RENAME", triggers(t, c, "t"), want(`id,,1,"t B",s,b`))
	eqStrings(t, "capture names the index quoted", run(`UPDATE t SET b = 4 WHERE id = 3`), []string{`K public.t#"t B" [3]`, `K public.t#"t B" [4]`})
	mustExec(t, c, `ALTER TABLE t ADD CONSTRAINT t_ab UNIQUE (a, b)`)
	eqStrings(t, "after ADD CONSTRAINT UNIQUE", triggers(t, c, "t"), want(`id,,1,"t B",s,b,t_ab,s,2,a,b`))
	mustExec(t, c, `ALTER TABLE t RENAME CONSTRAINT t_ab TO t_ab2`)
	eqStrings(t, "after RENAME CONSTRAINT", triggers(t, c, "t"), want(`id,,1,"t B",s,b,t_ab2,s,2,a,b`))
	mustExec(t, c, `DROP INDEX "t B"`)
	eqStrings(t, "after DROP INDEX", triggers(t, c, "t"), want("id,,0,t_ab2,s,2,a,b"))
	eqStrings(t, "other table untouched by DROP INDEX", triggers(t, c, "other"), want("id,,1,other_x_key,s,x"))
	mustExec(t, c, `ALTER TABLE t DROP CONSTRAINT t_ab2`)
	eqStrings(t, "after DROP CONSTRAINT", triggers(t, c, "t"), want("id"))
	eqStrings(t, "capture after the last unique index is gone", run(`UPDATE t SET b = 5 WHERE id = 3`), nil)

	// An index that failed to build (CREATE INDEX CONCURRENTLY over
	// duplicates) is invalid and enforces nothing: not certified.
	if _, err := c.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY t_a ON t (a)`); err == nil {
		t.Fatal("CREATE UNIQUE INDEX CONCURRENTLY over duplicates succeeded")
	}
	mustExec(t, c, `ALTER TABLE t ADD COLUMN w int`) // reinstalls t's triggers
	eqStrings(t, "invalid index", triggers(t, c, "t"), want("id"))
	mustExec(t, c, `DROP INDEX t_a`)

	// Partitioned: the index on the parent reaches every partition.
	mustExec(t, c, `CREATE TABLE p (id int, r int, code text, PRIMARY KEY (id, r)) PARTITION BY RANGE (r);
		CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)`)
	mustExec(t, c, `CREATE UNIQUE INDEX p_code ON p (code, r)`)
	eqStrings(t, "partitioned parent", triggers(t, c, "p"), want("id,r,,0,p_code,s,2,code,r"))
	eqStrings(t, "partition", triggers(t, c, "p1"), want("id,r,,0,p1_code_r_idx,s,2,code,r"))
	eqStrings(t, "capture through the parent", run(`INSERT INTO p VALUES (1, 1, 'c')`), []string{`K public.p#p_code ["c",1]`})
	mustExec(t, c, `DROP INDEX p_code`)
	eqStrings(t, "partitioned parent after DROP INDEX", triggers(t, c, "p"), want("id,r"))
	eqStrings(t, "partition after DROP INDEX", triggers(t, c, "p1"), want("id,r"))

	// Running Install again changes nothing.
	before := strings.Join(triggers(t, c, "other"), "|")
	if err := Install(ctx, c); err != nil {
		t.Fatal(err)
	}
	if after := strings.Join(triggers(t, c, "other"), "|"); after != before {
		t.Errorf("reinstall: %s -> %s", before, after)
	}
}

// Apply skips OP_UNIQUE_KEY changes: a writeset with unique keys applies
// like its row changes alone, and a key naming no table does not matter.
func TestApplyIgnoresUniqueKeys(t *testing.T) {
	schema := `CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE, v text);
		INSERT INTO u VALUES (1, 'a', 'one'), (2, 'b', 'two');`
	srcSrv, src := instance(t, schema)
	_, dst := applyInstance(t, schema)
	s := session(t, srcSrv)
	es := []*certifierpb.LogEntry{
		commitLocal(t, s, 1, `INSERT INTO u VALUES (3, 'c', 'three'); UPDATE u SET email = 'a2' WHERE id = 1`),
		commitLocal(t, s, 2, `DELETE FROM u WHERE id = 2; INSERT INTO u VALUES (4, 'b', 'four')`),
	}
	for _, e := range es {
		if len(uniqueKeys(t, e)) == 0 {
			t.Fatalf("version %d has no unique keys to ignore: %v", e.GetVersion(), changes(e.GetWriteset().GetChanges()))
		}
	}
	// A version of unique keys only, one of them of an index this replica
	// does not have.
	es = append(es, &certifierpb.LogEntry{Version: 3, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{
		{Table: "public.u#u_email_key", Op: certifierpb.Op_OP_UNIQUE_KEY, Key: []byte(`["zz"]`)},
		{Table: `public.nosuch#"idx"`, Op: certifierpb.Op_OP_UNIQUE_KEY, Key: []byte(`[1]`)},
	}}})
	if err := Apply(tctx(t), dst, es); err != nil {
		t.Fatal(err)
	}
	if v, err := ReadVersion(tctx(t), dst); err != nil || v != 3 {
		t.Fatalf("ReadVersion = %d, %v; want 3", v, err)
	}
	sameChecksums(t, checksum(t, src), checksum(t, dst))
	if got := dump(t, dst, "u"); got != "(1,a2,one)\n(3,c,three)\n(4,b,four)" {
		t.Errorf("u on the applied replica:\n%s", got)
	}
}

func TestCollapseUniqueKeys(t *testing.T) {
	ev := func(tbl string, op byte, key, row string) Event {
		e := Event{Table: tbl, Op: op}
		if key != "" {
			e.Key = []byte(key)
		}
		if row != "" {
			e.Row = []byte(row)
		}
		return e
	}
	got, err := Collapse([]Event{
		ev("a", 'U', "[1]", "r1"),
		ev("a#i", 'K', `["y"]`, ""),
		ev("a#i", 'K', `["x"]`, ""),
		ev("a", 'D', "[2]", ""),
		ev("a#i", 'K', `["x"]`, ""), // again: one change
		ev("a#j", 'K', `["x"]`, ""), // another index: another change
		ev("a", 'K', `[1]`, ""),     // spelled like a row of a: still a unique key
		ev("a", 'T', "", ""),        // drops a's rows, not the unique keys
		ev("b", 'U', "[1]", "b1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "collapse", changes(got), []string{
		"T a",
		"U b [1] b1",
		"K a [1]",
		`K a#i ["x"]`,
		`K a#i ["y"]`,
		`K a#j ["x"]`,
	})
	if _, err := Collapse([]Event{ev("a#i", 'K', "", "")}); err == nil {
		t.Error("unique key event without a key accepted")
	}
	if !slices.ContainsFunc(got, func(c *certifierpb.Change) bool { return c.GetOp() == certifierpb.Op_OP_UNIQUE_KEY }) {
		t.Error("no OP_UNIQUE_KEY change")
	}
}
