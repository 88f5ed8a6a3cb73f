package replica

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// convergenceSchema exercises the value types and table shapes the
// applier must carry across verbatim.
const convergenceSchema = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE pair AS (x int, y text);
CREATE DOMAIN posint AS int NOT NULL CHECK (VALUE > 0);
CREATE TABLE kinds (
	id    int PRIMARY KEY,
	t     text,
	n     numeric,
	n2    numeric(10, 3),
	ts    timestamptz,
	tsn   timestamp,
	d     date,
	tm    time,
	iv    interval,
	b     bytea,
	j     jsonb,
	js    json,
	arr   int[],
	tarr  text[],
	f     float8,
	r     real,
	bo    boolean,
	u     uuid,
	m     mood,
	p     pair,
	pi    posint,
	ip    inet,
	big   bigint,
	ch    char(5),
	nul   text
);
CREATE TABLE comp (a int, b text, v text, PRIMARY KEY (b, a));
CREATE TABLE gen (id int PRIMARY KEY, x int, y int GENERATED ALWAYS AS (x * 2) STORED);
CREATE TABLE ident (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
CREATE TABLE parent (id int PRIMARY KEY, v text);
CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES parent ON DELETE CASCADE, v text);
CREATE TABLE keyonly (a int, b int, PRIMARY KEY (a, b));
CREATE TABLE tspk (at timestamptz PRIMARY KEY, v int);
CREATE SCHEMA "Weird ""Schema""";
CREATE TABLE "Weird ""Schema"""."T-1" ("Key Col" text PRIMARY KEY, "val'q" text, "select" int,
	tashkent_n text DEFAULT 'n', tashkent_o text DEFAULT 'o', tashkent_t text DEFAULT 't', j text DEFAULT 'j', s text DEFAULT 's', r text DEFAULT 'r');
`

func TestApplyConvergence(t *testing.T) {
	srvA, a := instance(t, convergenceSchema)
	_, b := applyInstance(t, convergenceSchema)
	s := session(t, srvA)
	// A client with unusual settings: the values must still travel intact.
	mustExec(t, s, `SET TimeZone = 'America/St_Johns'; SET DateStyle = 'German, DMY'; SET IntervalStyle = 'iso_8601';
		SET bytea_output = 'escape'; SET extra_float_digits = 0`)

	txns := []string{
		`INSERT INTO kinds VALUES (1, 'it''s "quoted" \ back', 123456789012345678901234567890.123456789, 1.5,
			'2024-02-29 23:59:59.123456+05:30', '2024-02-29 23:59:59.654321', '2024-02-29', '13:14:15.5', '1 year 2 mons -3 days 04:05:06.7',
			'\xdeadbeef00', '{"k": [1, 2.50, null, "x"], "e": {}}', '{"b": 1,   "a": [2, 1]}', '{1,NULL,3}', '{"a b","c,d","","NULL"}',
			0.1, 3.4028235e38, true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'happy', ROW(1, 'x"y'), 7, '10.1.2.3/24',
			9223372036854775807, 'ab', NULL),
			(2, NULL, 'NaN', NULL, 'infinity', '-infinity', NULL, NULL, NULL, '', 'null', 'null', '{}', '{}', 'NaN', '-Infinity',
			NULL, NULL, NULL, NULL, 1, NULL, NULL, NULL, NULL),
			(3, E'tab\tnewline\nunicode \u00e9\u4e2d', -0.0, 0, now(), now(), now(), now(), '0', '\x', '[]', '[]', '{{1,2},{3,4}}', '{}',
			-0.0, 1e-40, false, gen_random_uuid(), 'sad', ROW(NULL, NULL), 2, '::1', -1, '', '')`,
		`INSERT INTO comp VALUES (1, 'x', 'one'), (2, 'x', 'two'), (1, 'y', 'three');
		 INSERT INTO gen (id, x) VALUES (1, 10), (2, 20);
		 INSERT INTO ident (v) VALUES ('a'), ('b'), ('c');
		 INSERT INTO parent VALUES (1, 'p1'), (2, 'p2');
		 INSERT INTO child VALUES (10, 1, 'c10'), (11, 1, 'c11'), (20, 2, 'c20');
		 INSERT INTO keyonly VALUES (1, 1), (1, 2);
		 INSERT INTO tspk VALUES ('2024-01-01 00:00:00+00', 1), ('2024-06-01 12:00:00-07', 2);
		 INSERT INTO "Weird ""Schema"""."T-1" VALUES ('k''1', 'v"1', 1), ('K 2', NULL, 2);`,
		`UPDATE kinds SET t = t || '!', n = n * 2, arr = arr || 4, j = j || '{"z": true}' WHERE id = 1;
		 UPDATE gen SET x = x + 1;
		 UPDATE comp SET a = 3 WHERE a = 2 AND b = 'x';
		 DELETE FROM comp WHERE b = 'y';
		 UPDATE tspk SET v = v + 10;
		 UPDATE "Weird ""Schema"""."T-1" SET "val'q" = 'changed', "select" = NULL WHERE "Key Col" = 'K 2';
		 INSERT INTO keyonly VALUES (2, 2) ON CONFLICT DO NOTHING;
		 INSERT INTO keyonly VALUES (1, 1) ON CONFLICT DO NOTHING;`,
		// ON DELETE CASCADE: the child rows the cascade removes are captured.
		`DELETE FROM parent WHERE id = 1`,
		`UPDATE ident SET v = v || v; DELETE FROM ident WHERE v = 'bb'`,
		`INSERT INTO parent VALUES (3, 'p3'); INSERT INTO child VALUES (30, 3, 'c30')`,
	}
	var entries []*certifierpb.LogEntry
	for i, sql := range txns {
		entries = append(entries, commitLocal(t, s, uint64(i+1), sql))
	}
	// Foreign keys: the applier must not care about the order of tables.
	// Put the child's changes first in every entry (writesets are sets).
	for _, e := range entries {
		cs := e.GetWriteset().GetChanges()
		slices.SortStableFunc(cs, func(x, y *certifierpb.Change) int {
			return -strings.Compare(x.GetTable(), y.GetTable()) // public.parent after public.child
		})
	}
	if !slices.ContainsFunc(entries[3].GetWriteset().GetChanges(), func(c *certifierpb.Change) bool {
		return c.GetTable() == "public.child" && c.GetOp() == certifierpb.Op_OP_DELETE
	}) {
		t.Fatalf("cascaded deletes not captured: %v", changes(entries[3].GetWriteset().GetChanges()))
	}

	ctx := tctx(t)
	ap := NewApplier()
	// Apply in two calls: one entry, then the rest as one batch.
	if err := ap.Apply(ctx, b, entries[:1]); err != nil {
		t.Fatal(err)
	}
	if err := ap.Apply(ctx, b, entries[1:]); err != nil {
		t.Fatal(err)
	}
	ca, cb := checksum(t, a), checksum(t, b)
	if len(ca) != 9 {
		t.Errorf("checksum covers %d tables, want 9: %v", len(ca), ca)
	}
	sameChecksums(t, ca, cb)
	if t.Failed() {
		for tbl := range ca {
			if ca[tbl] != cb[tbl] {
				t.Logf("%s on A:\n%s\non B:\n%s", tbl, dump(t, a, tbl), dump(t, b, tbl))
			}
		}
	}
	if v, err := ReadVersion(ctx, b); err != nil || v != uint64(len(txns)) {
		t.Errorf("ReadVersion on B = %d, %v; want %d", v, err, len(txns))
	}
	// The generated column was computed on B, not copied (the same here).
	var y int
	if err := b.QueryRow(ctx, `SELECT y FROM gen WHERE id = 2`).Scan(&y); err != nil || y != 42 {
		t.Errorf("gen.y on B = %d, %v; want 42", y, err)
	}
}

func TestApplyTruncateAndDDL(t *testing.T) {
	const schema = `CREATE TABLE p (id int PRIMARY KEY); CREATE TABLE c (id int PRIMARY KEY, p int REFERENCES p);
		CREATE TABLE solo (id int PRIMARY KEY, v text);`
	srvA, a := instance(t, schema)
	_, b := applyInstance(t, schema)
	s := session(t, srvA)
	ctx := tctx(t)

	var entries []*certifierpb.LogEntry
	add := func(sql string) *certifierpb.LogEntry {
		e := commitLocal(t, s, uint64(len(entries)+1), sql)
		entries = append(entries, e)
		return e
	}
	add(`INSERT INTO p VALUES (1), (2); INSERT INTO c VALUES (1, 1); INSERT INTO solo VALUES (1, 'a'), (2, 'b')`)
	// TRUNCATE of two tables that reference each other must stay one
	// statement, or the replica refuses it.
	e := add(`TRUNCATE c, p; INSERT INTO p VALUES (5); INSERT INTO solo VALUES (3, 'c')`)
	eqStrings(t, "truncate writeset", changes(e.GetWriteset().GetChanges()), []string{
		"T public.c", "T public.p", `U public.p [5] (5)`, `U public.solo [3] (3,c)`})
	add(`TRUNCATE solo`)
	add(`INSERT INTO solo VALUES (4, 'd')`)
	add(`TRUNCATE p CASCADE`)

	// DDL, as the proxy would log it: the statement runs on A through the
	// proxy, and its SQL travels as an OP_DDL change.
	ddl := `CREATE TABLE later (id int PRIMARY KEY, v text); ALTER TABLE solo ADD COLUMN extra int DEFAULT 7`
	e = add(ddl + `; INSERT INTO later VALUES (1, 'x'); UPDATE solo SET extra = 8 WHERE id = 4`)
	e.Writeset.Changes = append([]*certifierpb.Change{{Op: certifierpb.Op_OP_DDL, Row: []byte(ddl)}}, e.Writeset.Changes...)
	add(`INSERT INTO later VALUES (2, 'y'); INSERT INTO solo VALUES (5, 'e', 9)`)

	ap := NewApplier()
	// The first entry on its own, so that the applier caches solo's columns
	// before the DDL changes them.
	if err := ap.Apply(ctx, b, entries[:1]); err != nil {
		t.Fatal(err)
	}
	if err := ap.Apply(ctx, b, entries[1:]); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a), checksum(t, b))
	var role string
	if err := b.QueryRow(ctx, `SHOW session_replication_role`).Scan(&role); err != nil || role != "origin" {
		t.Errorf("session_replication_role after Apply = %q, %v", role, err)
	}
}

func TestApplyRecordsVersionAndStaysSilent(t *testing.T) {
	const schema = `CREATE TABLE t (id int PRIMARY KEY, v text)`
	srvA, _ := instance(t, schema)
	srvB, b := applyInstance(t, schema)
	s := session(t, srvA)
	ctx := tctx(t)
	e1 := commitLocal(t, s, 1, `INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
	e2 := commitLocal(t, s, 2, `UPDATE t SET v = 'c' WHERE id = 1; DELETE FROM t WHERE id = 2`)

	if v, err := ReadVersion(ctx, b); err != nil || v != 0 {
		t.Fatalf("ReadVersion of a fresh replica = %d, %v", v, err)
	}
	if err := Apply(ctx, b, []*certifierpb.LogEntry{e1}); err != nil {
		t.Fatal(err)
	}
	// Another registered applier connection goes on from the version the
	// first one committed.
	other := pgtest.Connect(t, srvB, "postgres")
	registerApplier(t, srvB, other)
	if err := Apply(ctx, other, []*certifierpb.LogEntry{e2}); err != nil {
		t.Fatal(err)
	}
	if v, err := ReadVersion(ctx, b); err != nil || v != 2 {
		t.Errorf("ReadVersion = %d, %v; want 2", v, err)
	}
	if got := dump(t, b, "t"); got != "(1,c)" {
		t.Errorf("t on B = %q", got)
	}

	// Invariants: consecutive versions; a version applied twice fails and
	// leaves the connection idle and the data unchanged.
	e3 := &certifierpb.LogEntry{Version: 3, Writeset: &certifierpb.Writeset{}}
	e5 := &certifierpb.LogEntry{Version: 5, Writeset: &certifierpb.Writeset{}}
	if err := Apply(ctx, b, []*certifierpb.LogEntry{e3, e5}); err == nil || !strings.Contains(err.Error(), "not consecutive") {
		t.Errorf("gap: %v", err)
	}
	if err := Apply(ctx, b, []*certifierpb.LogEntry{e2}); !IsAlreadyCommitted(err) {
		t.Errorf("re-apply: %v, want %s", err, CodeAlreadyCommitted)
	}
	// A batch whose first version does not follow the replica's waits for
	// its turn, for one version as for several, until cancelled.
	e4 := &certifierpb.LogEntry{Version: 4, Writeset: &certifierpb.Writeset{}}
	for _, batch := range [][]*certifierpb.LogEntry{{e4}, {e4, e5}} {
		waiting := pgtest.Connect(t, srvB, "postgres") // pgx closes it when the context ends
		registerApplier(t, srvB, waiting)
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := Apply(wctx, waiting, batch)
		cancel()
		if err == nil {
			t.Errorf("version 4 (%d versions) committed after version 2", len(batch))
		}
	}
	if st := b.PgConn().TxStatus(); st != 'I' {
		t.Errorf("connection status after a failed Apply: %q", st)
	}
	bad := &certifierpb.LogEntry{Version: 3, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{
		{Table: "public.t", Op: certifierpb.Op_OP_UPSERT, Key: []byte("[9]"), Row: []byte(`{"id":9,"v":"z"}`)},
		{Table: "public.missing", Op: certifierpb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte(`{"id":1}`)},
	}}}
	if err := Apply(ctx, b, []*certifierpb.LogEntry{bad}); err == nil || !strings.Contains(err.Error(), "public.missing does not exist") {
		t.Errorf("unknown table: %v", err)
	}
	inj := &certifierpb.LogEntry{Version: 3, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{
		{Table: "public.t; DROP TABLE t; --", Op: certifierpb.Op_OP_TRUNCATE},
	}}}
	if err := Apply(ctx, b, []*certifierpb.LogEntry{inj}); err == nil {
		t.Error("a table name with SQL in it was accepted")
	}
	if v, err := ReadVersion(ctx, b); err != nil || v != 2 {
		t.Errorf("ReadVersion after failed applies = %d, %v; want 2", v, err)
	}
	if got := dump(t, b, "t"); got != "(1,c)" {
		t.Errorf("t on B after failed applies = %q", got)
	}
}

func TestApplyUniqueSecondarySwap(t *testing.T) {
	// The origin moved unique values between rows through an intermediate
	// value; the collapsed writeset has only the end state, which one
	// INSERT ... ON CONFLICT cannot apply (row 1 takes 'b' while row 2 still
	// has it). The applier retries by deleting the keys first.
	const schema = `CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE);
		INSERT INTO u VALUES (1, 'a'), (2, 'b');`
	srvA, a := instance(t, schema)
	_, b := applyInstance(t, schema)
	e := commitLocal(t, session(t, srvA), 1, `UPDATE u SET email = 'tmp' WHERE id = 1;
		UPDATE u SET email = 'a' WHERE id = 2; UPDATE u SET email = 'b' WHERE id = 1;`)
	if err := Apply(tctx(t), b, []*certifierpb.LogEntry{e}); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a), checksum(t, b))
}

func TestApplyNoticesDDLOutsideApply(t *testing.T) {
	// The applier caches table definitions. A DDL that reached the replica
	// another way (a local DDL transaction) must not leave it with a stale
	// column list, which would silently drop the new column's values.
	const schema = `CREATE TABLE t (id int PRIMARY KEY, v text)`
	srvA, a := instance(t, schema)
	srvB, b := applyInstance(t, schema)
	s := session(t, srvA)
	ap := NewApplier()
	ctx := tctx(t)
	if err := ap.Apply(ctx, b, []*certifierpb.LogEntry{commitLocal(t, s, 1, `INSERT INTO t VALUES (1, 'a')`)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Querier{a, pgtest.Connect(t, srvB, "postgres")} {
		if _, err := c.Exec(ctx, `ALTER TABLE t ADD COLUMN w int`); err != nil {
			t.Fatal(err)
		}
	}
	e := commitLocal(t, s, 2, `INSERT INTO t VALUES (2, 'b', 22); UPDATE t SET w = 11 WHERE id = 1`)
	if err := ap.Apply(ctx, b, []*certifierpb.LogEntry{e}); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a), checksum(t, b))
	if got := dump(t, b, "t"); got != "(1,a,11)\n(2,b,22)" {
		t.Errorf("t on B = %q", got)
	}
}

func TestApplyManyVersionsSameRow(t *testing.T) {
	// Later entries overwrite earlier ones for the same key; one batch.
	const schema = `CREATE TABLE t (id int PRIMARY KEY, n int)`
	srvA, a := instance(t, schema)
	_, b := applyInstance(t, schema)
	s := session(t, srvA)
	var entries []*certifierpb.LogEntry
	for i := 1; i <= 20; i++ {
		sql := fmt.Sprintf(`INSERT INTO t VALUES (1, %d) ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n`, i)
		if i%7 == 0 {
			sql = `DELETE FROM t WHERE id = 1`
		}
		entries = append(entries, commitLocal(t, s, uint64(i), sql))
	}
	if err := Apply(tctx(t), b, entries); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a), checksum(t, b))
	if got := dump(t, b, "t"); got != "(1,20)" {
		t.Errorf("t on B = %q", got)
	}
}

// TestApplyKeepsItsPlansOnAPreparedSession: on a session that went through
// PrepareApplySession, an apply transaction builds no plan for statements
// earlier applies prepared, whether its batch holds one version or several;
// on a plain session every apply builds them all again, since setting
// session_replication_role for the transaction (and its revert at the end)
// drops the session's cached plans. debug_print_plan sends a LOG message
// for every plan the planner builds. The counted apply follows `warmups`
// others: PostgreSQL plans a statement with parameters afresh (a custom
// plan) at each of its first five executions, and only then settles on its
// generic plan if that costs no more.
func TestApplyKeepsItsPlansOnAPreparedSession(t *testing.T) {
	const warmups = 6
	const schema = `CREATE TABLE t (id int PRIMARY KEY, v text)`
	srvA, _ := instance(t, schema)
	srvB, _ := applyInstance(t, schema)
	commit := committer(t, session(t, srvA))
	committed := 0
	// batches returns warmups+1 batches of the next versions, of sizes
	// cycling through sizes.
	batches := func(sizes ...int) [][]*certifierpb.LogEntry {
		var bs [][]*certifierpb.LogEntry
		for i := range warmups + 1 {
			var batch []*certifierpb.LogEntry
			for range sizes[i%len(sizes)] {
				batch = append(batch, commit(fmt.Sprintf(`INSERT INTO t VALUES (1, 'v%d') ON CONFLICT (id) DO UPDATE SET v = excluded.v`, committed)))
				committed++
			}
			bs = append(bs, batch)
		}
		return bs
	}

	plansBuilt := func(prepared bool, batches [][]*certifierpb.LogEntry) int {
		cfg, err := pgx.ParseConfig(srvB.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		plans := 0
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			if n.Severity == "LOG" && n.Message == "plan:" {
				plans++
			}
		}
		conn, err := pgx.ConnectConfig(tctx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		registerApplier(t, srvB, conn)
		if prepared {
			if err := PrepareApplySession(tctx(t), conn); err != nil {
				t.Fatal(err)
			}
		}
		mustExec(t, conn, `SET debug_print_plan = on; SET client_min_messages = log`)
		a := NewApplier()
		for i, batch := range batches {
			if i == warmups {
				plans = 0
			}
			if err := a.Apply(tctx(t), conn, batch); err != nil {
				t.Fatal(err)
			}
		}
		return plans
	}

	if n := plansBuilt(false, batches(1)); n == 0 {
		t.Errorf("a plain session built no plan in its last apply: the test no longer shows what it guards against")
	}
	if n := plansBuilt(true, batches(1)); n != 0 {
		t.Errorf("a prepared apply session built %d plans in its last apply of one version, want 0", n)
	}
	if n := plansBuilt(true, batches(2, 3)); n != 0 {
		t.Errorf("a prepared apply session built %d plans in its last apply of several versions, want 0", n)
	}
	if got, want := dump(t, pgtest.Connect(t, srvB, "postgres"), "t"), fmt.Sprintf("(1,v%d)", committed-1); got != want {
		t.Errorf("t on B = %q, want %q", got, want)
	}
}

// TestCheckDDLGenerationUnderAHostileSearchPath: check_ddl_generation has
// no SET clause (it runs in every apply transaction, and a SET clause costs
// every call a GUC nest level), so it must qualify every function and
// operator it uses: a max(bigint) aggregate and a <> operator on bigint
// found first on the caller's search_path must change nothing. Install
// over a database whose function still has the old SET clause must drop
// it (CREATE OR REPLACE replaces the whole definition). (Apply's own
// statements are qualified too: TestApplyUnderAHostileSearchPath.)
func TestCheckDDLGenerationUnderAHostileSearchPath(t *testing.T) {
	const schema = `CREATE TABLE t (id int PRIMARY KEY, v text)`
	_, b := instance(t, schema)
	ctx := tctx(t)
	mustExec(t, b, `ALTER FUNCTION tashkent.check_ddl_generation(bigint) SET search_path = pg_catalog, pg_temp`)
	if err := Install(ctx, b); err != nil {
		t.Fatal(err)
	}
	var config []string
	if err := b.QueryRow(ctx, `SELECT proconfig FROM pg_catalog.pg_proc
		WHERE oid = 'tashkent.check_ddl_generation(bigint)'::regprocedure`).Scan(&config); err != nil || config != nil {
		t.Errorf("check_ddl_generation's settings after Install = %q, %v; want none", config, err)
	}

	mustExec(t, b, `CREATE SCHEMA decoy;
		CREATE FUNCTION decoy.always(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		CREATE OPERATOR decoy.<> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = decoy.always);
		CREATE FUNCTION decoy.keep(bigint, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 99::bigint';
		CREATE AGGREGATE decoy.max(bigint) (SFUNC = decoy.keep, STYPE = bigint, INITCOND = '99');
		SET search_path = decoy, public, pg_catalog`)
	var gen int64
	if err := b.QueryRow(ctx, `SELECT coalesce(pg_catalog.max(gen), 0) FROM tashkent.ddl_log`).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	var decoyMax int64
	if err := b.QueryRow(ctx, `SELECT max(gen) FROM (VALUES (1::bigint)) AS x(gen)`).Scan(&decoyMax); err != nil || decoyMax != 99 {
		t.Fatalf("the decoy max is not the one found first: %d, %v", decoyMax, err)
	}
	if _, err := b.Exec(ctx, `SELECT tashkent.check_ddl_generation($1)`, gen); err != nil {
		t.Errorf("check_ddl_generation(%d), the current generation, under a decoy search_path: %v", gen, err)
	}
	if e := pgErr(t, func() error { _, err := b.Exec(ctx, `SELECT tashkent.check_ddl_generation($1)`, gen+1); return err }()); e.Code != "TK001" {
		t.Errorf("check_ddl_generation(%d), a stale generation: %v, want TK001", gen+1, e)
	}
}
