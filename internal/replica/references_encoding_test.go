package replica

import (
	"strings"
	"testing"
)

// TestCaptureReferencesNameTheParentsKeyText: a reference meets the
// parent's writes in certification only if its key is byte for byte the
// key the parent's own capture prints. A foreign key compares values with
// its equality operator, under which equal values can print differently:
// numeric 1.5 = 1.50 (even in one column), char(2) 'ab' = char(4) 'ab  ',
// int 2 = numeric 2.0, timestamp = timestamptz, float8 0 = -0, jsonb
// 'null' (not a SQL NULL), 'abc' = 'ABC' under a nondeterministic
// collation. Printing the referencing row's own values named no parent (or
// none at all, for jsonb 'null'), so a parent deleted on one replica while
// a child of it was inserted on another certified both: the orphan the
// references exist to prevent. Such foreign keys look the parent row up.
func TestCaptureReferencesNameTheParentsKeyText(t *testing.T) {
	srv, c := instance(t, `
		CREATE COLLATION nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
		CREATE DOMAIN money2 AS numeric;
		CREATE TABLE pn (id numeric PRIMARY KEY, code numeric UNIQUE);
		CREATE TABLE cn (id int PRIMARY KEY, p numeric REFERENCES pn);
		CREATE TABLE ci (id int PRIMARY KEY, p int REFERENCES pn);
		CREATE TABLE cu (id int PRIMARY KEY, code numeric REFERENCES pn (code));
		CREATE TABLE cd (id int PRIMARY KEY, p money2 REFERENCES pn);
		CREATE TABLE pb (id char(4) PRIMARY KEY);
		CREATE TABLE cb (id int PRIMARY KEY, p char(2) REFERENCES pb);
		CREATE TABLE cv (id int PRIMARY KEY, p varchar REFERENCES pb);
		CREATE TABLE pt (at timestamptz PRIMARY KEY);
		CREATE TABLE ct (id int PRIMARY KEY, at timestamp REFERENCES pt);
		CREATE TABLE cdt (id int PRIMARY KEY, d date REFERENCES pt);
		CREATE TABLE pts (at timestamp PRIMARY KEY);
		CREATE TABLE ctz (id int PRIMARY KEY, at timestamptz REFERENCES pts);
		CREATE TABLE pf (x float8 PRIMARY KEY);
		CREATE TABLE cf (id int PRIMARY KEY, x float8 REFERENCES pf);
		CREATE TABLE pj (j jsonb PRIMARY KEY);
		CREATE TABLE cj (id int PRIMARY KEY, j jsonb REFERENCES pj);
		CREATE TABLE pc (k text COLLATE nocase PRIMARY KEY);
		CREATE TABLE cc (id int PRIMARY KEY, k text COLLATE nocase REFERENCES pc);
		CREATE TABLE pm (a int, b numeric, PRIMARY KEY (a, b));
		CREATE TABLE cm (id int PRIMARY KEY, x int, b numeric, FOREIGN KEY (x, b) REFERENCES pm (a, b));
		CREATE TABLE pp (id numeric PRIMARY KEY) PARTITION BY RANGE (id);
		CREATE TABLE pp1 PARTITION OF pp FOR VALUES FROM (0) TO (100);
		CREATE TABLE cp (id int PRIMARY KEY, p numeric REFERENCES pp);`)
	s := session(t, srv)
	run := committer(t, s)
	// parentKey inserts a parent row and returns the key text capture
	// certifies its writes under.
	parentKey := func(sql string) string {
		t.Helper()
		return string(run(sql).GetWriteset().GetChanges()[0].GetKey())
	}
	n150 := parentKey(`INSERT INTO pn VALUES (1.50, 7.0)`)
	n20 := parentKey(`INSERT INTO pn VALUES (2.0, 8.00)`)
	b := parentKey(`INSERT INTO pb VALUES ('ab')`)
	ts := parentKey(`INSERT INTO pt VALUES ('2024-01-01 00:00:00+00')`)
	ts0 := parentKey(`INSERT INTO pt VALUES ('2023-12-31 23:00:00+00')`)
	tsl := parentKey(`INSERT INTO pts VALUES ('2024-01-01 18:00:00')`)
	f := parentKey(`INSERT INTO pf VALUES ('-0')`)
	j := parentKey(`INSERT INTO pj VALUES ('null')`)
	ck := parentKey(`INSERT INTO pc VALUES ('ABC')`)
	m := parentKey(`INSERT INTO pm VALUES (1, 1.50)`)
	p := parentKey(`INSERT INTO pp VALUES (3.0)`)
	for _, tc := range []struct{ what, sql, want string }{
		{"numeric scale", `INSERT INTO cn VALUES (1, 1.5)`, "public.pn " + n150},
		{"int referencing numeric", `INSERT INTO ci VALUES (1, 2)`, "public.pn " + n20},
		{"through a unique index", `INSERT INTO cu VALUES (1, 7)`, `public.pn#pn_code_key [7.0]`},
		{"a domain", `INSERT INTO cd VALUES (1, 2.000)`, "public.pn " + n20},
		{"char of another length", `INSERT INTO cb VALUES (1, 'ab')`, "public.pb " + b},
		{"varchar referencing char", `INSERT INTO cv VALUES (1, 'ab')`, "public.pb " + b},
		{"timestamp referencing timestamptz", `INSERT INTO ct VALUES (1, '2024-01-01 00:00:00')`, "public.pt " + ts},
		{"timestamp referencing timestamptz, in the session's time zone",
			`SET LOCAL TimeZone = 'Asia/Tokyo'; INSERT INTO ct VALUES (2, '2024-01-01 09:00:00')`, "public.pt " + ts},
		{"date referencing timestamptz, in the session's time zone",
			`SET LOCAL TimeZone = 'Etc/GMT-1'; INSERT INTO cdt VALUES (1, '2024-01-01')`, "public.pt " + ts0},
		{"timestamptz referencing timestamp, in the session's time zone",
			`SET LOCAL TimeZone = 'Asia/Tokyo'; INSERT INTO ctz VALUES (1, '2024-01-01 09:00:00+00')`, "public.pts " + tsl},
		{"float 0 and -0", `INSERT INTO cf VALUES (1, 0)`, "public.pf " + f},
		{"jsonb null is a value", `INSERT INTO cj VALUES (1, 'null')`, "public.pj " + j},
		{"nondeterministic collation", `INSERT INTO cc VALUES (1, 'abc')`, "public.pc " + ck},
		{"two columns", `INSERT INTO cm VALUES (1, 1, 1.5), (2, NULL, 1.5)`, "public.pm " + m},
		{"partitioned parent", `INSERT INTO cp VALUES (1, 3)`, "public.pp " + p},
		{"update to another parent", `UPDATE cn SET p = 2 WHERE id = 1`, "public.pn " + n20},
		{"update to an equal value: the old row held the parent", `UPDATE cn SET p = 2.00 WHERE id = 1`, ""},
		{"update of another column", `UPDATE cb SET id = 2`, ""},
	} {
		want := []string(nil)
		if tc.want != "" {
			want = []string{"R " + tc.want}
		}
		eqStrings(t, tc.what, references(t, run(tc.sql)), want)
	}

	// These foreign keys go through the parent lookup ('L'); those whose
	// values print alike keep the cheap trigger (TestCaptureReferences).
	for _, tbl := range []string{"cn", "cb", "cm"} {
		if got := strings.Join(triggers(t, c, tbl), " "); !strings.Contains(got, ",L,ONLY ") {
			t.Errorf("%s: %s, want the parent lookup", tbl, got)
		}
	}
}

// TestCaptureReferencesToAPartition: a foreign key may reference a
// partition itself, but the parent's rows, written through the
// partitioned table, are captured under the root's name (and its index's).
// Named by the partition, the reference met none of the parent's writes.
func TestCaptureReferencesToAPartition(t *testing.T) {
	srv, c := instance(t, `
		CREATE TABLE pq (id int PRIMARY KEY, code int, UNIQUE (code, id)) PARTITION BY RANGE (id);
		CREATE TABLE pq1 PARTITION OF pq FOR VALUES FROM (0) TO (100);
		CREATE TABLE cr (id int PRIMARY KEY, p int REFERENCES pq1);
		CREATE TABLE cs (id int PRIMARY KEY, code int, p int, FOREIGN KEY (code, p) REFERENCES pq1 (code, id));`)
	s := session(t, srv)
	run := committer(t, s)
	eqStrings(t, "the parent, written through the root", changes(run(`INSERT INTO pq VALUES (3, 4)`).GetWriteset().GetChanges()),
		[]string{`U public.pq [3] (3,4)`, `K public.pq#pq_code_id_key [4,3]`})
	eqStrings(t, "primary key", references(t, run(`INSERT INTO cr VALUES (1, 3)`)), []string{`R public.pq [3]`})
	eqStrings(t, "unique index", references(t, run(`INSERT INTO cs VALUES (1, 4, 3)`)), []string{`R public.pq#pq_code_id_key [4,3]`})
	mustExec(t, c, `ALTER TABLE pq RENAME TO pr`)
	eqStrings(t, "root renamed", references(t, run(`INSERT INTO cr VALUES (2, 3)`)), []string{`R public.pr [3]`})
}

// TestCaptureReferencesAfterTheParentIsDropped: DROP TABLE ... CASCADE and
// ALTER TABLE ... DROP ... CASCADE on a parent drop the children's foreign
// keys without a command on the children, and DROP reports no objects to
// the event trigger. A child whose reference trigger looks the parent up
// would then fail every write (the parent, or its column, is gone): the
// event trigger refreshes the tables whose reference triggers look up. A
// renamed schema renames the parents in it: every reference trigger is
// refreshed (before, references kept the old name and met no write).
func TestCaptureReferencesAfterTheParentIsDropped(t *testing.T) {
	srv, c := instance(t, `
		CREATE TABLE pn (id numeric PRIMARY KEY, code numeric UNIQUE);
		CREATE TABLE cn (id int PRIMARY KEY, p numeric REFERENCES pn);
		CREATE TABLE cu (id int PRIMARY KEY, code numeric REFERENCES pn (code));
		INSERT INTO pn VALUES (1, 1);`)
	s := session(t, srv)
	run := committer(t, s)
	mustExec(t, c, `ALTER TABLE pn DROP COLUMN code CASCADE`)
	eqStrings(t, "unique column dropped", triggers(t, c, "cu"), want("id"))
	eqStrings(t, "its child writes", changes(run(`INSERT INTO cu VALUES (1, 1)`).GetWriteset().GetChanges()),
		[]string{`U public.cu [1] (1,1)`})
	mustExec(t, c, `CREATE SCHEMA s; CREATE TABLE s.pi (id int PRIMARY KEY); CREATE TABLE s.pn (id numeric PRIMARY KEY);
		CREATE TABLE ci (id int PRIMARY KEY, p int REFERENCES s.pi); CREATE TABLE cs (id int PRIMARY KEY, p numeric REFERENCES s.pn)`)
	run(`INSERT INTO s.pi VALUES (1); INSERT INTO s.pn VALUES (1)`)
	mustExec(t, c, `ALTER SCHEMA s RENAME TO s2`)
	eqStrings(t, "schema renamed under a parent", references(t, run(`INSERT INTO ci VALUES (1, 1); INSERT INTO cs VALUES (1, 1)`)),
		[]string{"R s2.pi [1]", "R s2.pn [1]"})
	mustExec(t, c, `DROP TABLE pn CASCADE`)
	eqStrings(t, "parent dropped", triggers(t, c, "cn"), want("id"))
	eqStrings(t, "the child writes", changes(run(`INSERT INTO cn VALUES (1, 1)`).GetWriteset().GetChanges()),
		[]string{`U public.cn [1] (1,1)`})
}
