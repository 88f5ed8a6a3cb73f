package replica

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
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

// The values and table shapes of convergenceSchema, written by a client
// with unusual print settings, travel intact: the replica that applied
// them holds what the origin holds, and its version is the log's.
func TestApplyConvergence(t *testing.T) {
	c, a, b := newPair(t, "")
	schema := c.commit(0, convergenceSchema)
	s := a.connect(t)
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
	for _, sql := range txns {
		entries = append(entries, c.commitOn(0, s, sql)...)
	}
	if len(entries) != len(txns) {
		t.Fatalf("%d transactions certified %d writesets", len(txns), len(entries))
	}
	// Foreign keys: the applier must not care about the order of tables.
	// Put the child's changes first in every entry (writesets are sets).
	for _, e := range entries {
		cs := e.GetWriteset().GetChanges()
		slices.SortStableFunc(cs, func(x, y *certifierpb.Change) int {
			return -strings.Compare(x.GetTable(), y.GetTable()) // public.parent after public.child
		})
	}
	if !slices.Contains(ops(entries[3]), "DELETE public.child") {
		t.Fatalf("cascaded deletes not captured: %v", ops(entries[3]))
	}

	ctx := tctx(t)
	ap := NewApplier()
	// Apply in two calls: the schema and one entry, then the rest as one
	// batch.
	if err := ap.Apply(ctx, b.apply, append(schema, entries[0])); err != nil {
		t.Fatal(err)
	}
	if err := ap.Apply(ctx, b.apply, entries[1:]); err != nil {
		t.Fatal(err)
	}
	ca, cb := checksum(t, a.connect(t)), checksum(t, b.apply)
	if len(ca) != 9 {
		t.Errorf("checksum covers %d tables, want 9: %v", len(ca), ca)
	}
	sameChecksums(t, ca, cb)
	if t.Failed() {
		for tbl := range ca {
			if ca[tbl] != cb[tbl] {
				t.Logf("%s on A:\n%s\non B:\n%s", tbl, dump(t, a.connect(t), tbl), dump(t, b.apply, tbl))
			}
		}
	}
	if v, err := ReadVersion(ctx, b.apply); err != nil || v != uint64(len(c.log)) {
		t.Errorf("ReadVersion on B = %d, %v; want %d", v, err, len(c.log))
	}
	// The generated column was computed on B, not copied (the same here).
	var y int
	if err := b.apply.QueryRow(ctx, `SELECT y FROM gen WHERE id = 2`).Scan(&y); err != nil || y != 42 {
		t.Errorf("gen.y on B = %d, %v; want 42", y, err)
	}
}

// TRUNCATE and DDL are barriers within a batch: the TRUNCATE of tables
// that reference each other stays one statement (the replica would refuse
// it otherwise), DDL runs in its place among the rows, and the rows after
// it are applied with the table definitions it made, though the applier
// had cached the older ones.
func TestApplyTruncateAndDDL(t *testing.T) {
	c, a, b := newPair(t, "")
	c.commit(0, `CREATE TABLE p (id int PRIMARY KEY); CREATE TABLE c (id int PRIMARY KEY, p int REFERENCES p);
		CREATE TABLE solo (id int PRIMARY KEY, v text);`)
	c.commit(0, `INSERT INTO p VALUES (1), (2); INSERT INTO c VALUES (1, 1); INSERT INTO solo VALUES (1, 'a'), (2, 'b')`)
	e := c.commit(0, `TRUNCATE c, p; INSERT INTO p VALUES (5); INSERT INTO solo VALUES (3, 'c')`)[0]
	for _, want := range []string{"TRUNCATE public.c", "TRUNCATE public.p"} {
		if !slices.Contains(ops(e), want) {
			t.Errorf("the TRUNCATE's writeset %v lacks %s", ops(e), want)
		}
	}
	c.commit(0, `TRUNCATE solo`)
	c.commit(0, `INSERT INTO solo VALUES (4, 'd')`)
	c.commit(0, `TRUNCATE p CASCADE`)
	e = c.commit(0, `CREATE TABLE later (id int PRIMARY KEY, v text); ALTER TABLE solo ADD COLUMN extra int DEFAULT 7;
		INSERT INTO later VALUES (1, 'x'); UPDATE solo SET extra = 8 WHERE id = 4`)[0]
	if !slices.Contains(ops(e), "DDL ") {
		t.Fatalf("the DDL's writeset %v has no DDL", ops(e))
	}
	c.commit(0, `INSERT INTO later VALUES (2, 'y'); INSERT INTO solo VALUES (5, 'e', 9)`)

	ap := NewApplier()
	// The schema and the first rows on their own, so that the applier
	// caches solo's columns before the DDL changes them.
	if err := ap.Apply(tctx(t), b.apply, c.log[:2]); err != nil {
		t.Fatal(err)
	}
	if err := ap.Apply(tctx(t), b.apply, c.log[2:]); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a.connect(t)), checksum(t, b.apply))
	var role string
	if err := b.apply.QueryRow(tctx(t), `SHOW session_replication_role`).Scan(&role); err != nil || role != "origin" {
		t.Errorf("session_replication_role after Apply = %q, %v", role, err)
	}
}

// Apply commits its versions and nothing else: another applier
// connection goes on from the version the first committed; versions out of
// order, applied twice, or of a table that does not exist fail and leave
// the data, the version and the connection as they were.
func TestApplyRecordsVersionAndStaysSilent(t *testing.T) {
	c, _, b := newPair(t, "")
	c.commit(0, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	c.commit(0, `INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
	c.commit(0, `UPDATE t SET v = 'c' WHERE id = 1; DELETE FROM t WHERE id = 2`)
	ctx := tctx(t)

	if v, err := ReadVersion(ctx, b.apply); err != nil || v != 0 {
		t.Fatalf("ReadVersion of a fresh replica = %d, %v", v, err)
	}
	if err := Apply(ctx, b.apply, c.log[:2]); err != nil {
		t.Fatal(err)
	}
	other := b.applierConn(t)
	if err := Apply(ctx, other, c.log[2:]); err != nil {
		t.Fatal(err)
	}
	if v, err := ReadVersion(ctx, b.apply); err != nil || v != 3 {
		t.Errorf("ReadVersion = %d, %v; want 3", v, err)
	}
	if got := dump(t, b.apply, "t"); got != "(1,c)" {
		t.Errorf("t on B = %q", got)
	}

	// Invariants: consecutive versions; a version applied twice fails and
	// leaves the connection idle and the data unchanged.
	empty := func(v uint64) *certifierpb.LogEntry {
		return &certifierpb.LogEntry{Version: v, Writeset: &certifierpb.Writeset{}}
	}
	if err := Apply(ctx, other, []*certifierpb.LogEntry{empty(4), empty(6)}); err == nil || !strings.Contains(err.Error(), "not consecutive") {
		t.Errorf("gap: %v", err)
	}
	if err := Apply(ctx, other, c.log[2:]); !IsAlreadyCommitted(err) {
		t.Errorf("re-apply: %v, want %s", err, pgcode.AlreadyCommitted)
	}
	// A batch whose first version does not follow the replica's waits for
	// its turn, for one version as for several, until cancelled.
	for _, batch := range [][]*certifierpb.LogEntry{{empty(5)}, {empty(5), empty(6)}} {
		waiting := b.applierConn(t)
		err := applyUntilCancelled(t, b.connect(t), waiting, NewApplier(), batch)
		if pgcode.Of(err) != pgcode.QueryCanceled {
			t.Errorf("version 5 (%d versions) after version 3: %v, want a cancelled wait", len(batch), err)
		}
		if st := waiting.PgConn().TxStatus(); st != 'I' {
			t.Errorf("connection status after a cancelled Apply: %q", st)
		}
	}
	bad := &certifierpb.LogEntry{Version: 4, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{
		{Table: "public.t", Op: certifierpb.Op_OP_UPSERT, Key: []byte("[9]"), Row: []byte(`(9,z)`)},
		{Table: "public.missing", Op: certifierpb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte(`(1)`)},
	}}}
	other = b.applierConn(t)
	if err := Apply(ctx, other, []*certifierpb.LogEntry{bad}); err == nil || !strings.Contains(err.Error(), "public.missing does not exist") {
		t.Errorf("unknown table: %v", err)
	}
	inj := &certifierpb.LogEntry{Version: 4, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{
		{Table: "public.t; DROP TABLE t; --", Op: certifierpb.Op_OP_TRUNCATE},
	}}}
	if err := Apply(ctx, other, []*certifierpb.LogEntry{inj}); err == nil {
		t.Error("a table name with SQL in it was accepted")
	}
	if st := other.PgConn().TxStatus(); st != 'I' {
		t.Errorf("connection status after a failed Apply: %q", st)
	}
	if v, err := ReadVersion(ctx, other); err != nil || v != 3 {
		t.Errorf("ReadVersion after failed applies = %d, %v; want 3", v, err)
	}
	if got := dump(t, other, "t"); got != "(1,c)" {
		t.Errorf("t on B after failed applies = %q", got)
	}
}

// The origin moved unique values between rows through an intermediate
// value; the collapsed writeset has only the end state, which one INSERT
// ... ON CONFLICT cannot apply (row 1 takes 'b' while row 2 still has
// it). The applier retries by deleting the keys first.
func TestApplyUniqueSecondarySwap(t *testing.T) {
	c, a, b := newPair(t, `CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE);
		INSERT INTO u VALUES (1, 'a'), (2, 'b');`)
	e := c.commit(0, `UPDATE u SET email = 'tmp' WHERE id = 1;
		UPDATE u SET email = 'a' WHERE id = 2; UPDATE u SET email = 'b' WHERE id = 1;`)
	if err := Apply(tctx(t), b.apply, e); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a.connect(t)), checksum(t, b.apply))
	if got := dump(t, b.apply, "u"); got != "(1,b)\n(2,a)" {
		t.Errorf("u on B = %q", got)
	}
}

// Apply skips OP_UNIQUE_KEY changes: a writeset with unique keys applies
// like its row changes alone, and a key naming no table does not matter.
func TestApplyIgnoresUniqueKeys(t *testing.T) {
	c, a, b := newPair(t, `CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE, v text);
		INSERT INTO u VALUES (1, 'a', 'one'), (2, 'b', 'two');`)
	es := append(c.commit(0, `INSERT INTO u VALUES (3, 'c', 'three'); UPDATE u SET email = 'a2' WHERE id = 1`),
		c.commit(0, `DELETE FROM u WHERE id = 2; INSERT INTO u VALUES (4, 'b', 'four')`)...)
	for _, e := range es {
		if !slices.ContainsFunc(ops(e), func(op string) bool { return strings.HasPrefix(op, "UNIQUE_KEY ") }) {
			t.Fatalf("version %d has no unique keys to ignore: %v", e.GetVersion(), ops(e))
		}
	}
	// A version of unique keys only, one of them of an index this replica
	// does not have.
	es = append(es, &certifierpb.LogEntry{Version: uint64(len(c.log)) + 1, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{
		{Table: "public.u#u_email_key", Op: certifierpb.Op_OP_UNIQUE_KEY, Key: []byte(`["zz"]`)},
		{Table: `public.nosuch#"idx"`, Op: certifierpb.Op_OP_UNIQUE_KEY, Key: []byte(`[1]`)},
	}}})
	if err := Apply(tctx(t), b.apply, es); err != nil {
		t.Fatal(err)
	}
	if v, err := ReadVersion(tctx(t), b.apply); err != nil || v != uint64(len(c.log))+1 {
		t.Fatalf("ReadVersion = %d, %v; want %d", v, err, len(c.log)+1)
	}
	sameChecksums(t, checksum(t, a.connect(t)), checksum(t, b.apply))
	if got := dump(t, b.apply, "u"); got != "(1,a2,one)\n(3,c,three)\n(4,b,four)" {
		t.Errorf("u on the applied replica:\n%s", got)
	}
}

// The applier caches table definitions. DDL that reached the replica
// another way (here: a client's DDL on the replica itself, certified and
// committed by its own session) must not leave it with a stale column
// list, which would silently drop the new column's values: the DDL
// generation check sees it.
func TestApplyNoticesDDLOutsideApply(t *testing.T) {
	c, a, b := newPair(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	ap := NewApplier()
	if err := ap.Apply(tctx(t), b.apply, c.commit(0, `INSERT INTO t VALUES (1, 'a')`)); err != nil {
		t.Fatal(err)
	}
	c.commit(1, `ALTER TABLE t ADD COLUMN w int`)
	c.catchUp(0)
	e := c.commit(0, `INSERT INTO t VALUES (2, 'b', 22); UPDATE t SET w = 11 WHERE id = 1`)
	if err := ap.Apply(tctx(t), b.apply, e); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a.connect(t)), checksum(t, b.apply))
	if got := dump(t, b.apply, "t"); got != "(1,a,11)\n(2,b,22)" {
		t.Errorf("t on B = %q", got)
	}
}

// Later versions overwrite earlier ones for the same key, in one batch.
func TestApplyManyVersionsSameRow(t *testing.T) {
	c, a, b := newPair(t, `CREATE TABLE t (id int PRIMARY KEY, n int)`)
	first := len(c.log)
	for i := 1; i <= 20; i++ {
		sql := fmt.Sprintf(`INSERT INTO t VALUES (1, %d) ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n`, i)
		if i%7 == 0 {
			sql = `DELETE FROM t WHERE id = 1`
		}
		c.commit(0, sql)
	}
	if err := Apply(tctx(t), b.apply, c.log[first:]); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, a.connect(t)), checksum(t, b.apply))
	if got := dump(t, b.apply, "t"); got != "(1,20)" {
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
	c, _, b := newPair(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	committed := 0
	// batches returns warmups+1 batches of the next versions, of sizes
	// cycling through sizes.
	batches := func(sizes ...int) [][]*certifierpb.LogEntry {
		var bs [][]*certifierpb.LogEntry
		for i := range warmups + 1 {
			var batch []*certifierpb.LogEntry
			for range sizes[i%len(sizes)] {
				batch = append(batch, c.commit(0, fmt.Sprintf(`INSERT INTO t VALUES (1, 'v%d') ON CONFLICT (id) DO UPDATE SET v = excluded.v`, committed))...)
				committed++
			}
			bs = append(bs, batch)
		}
		return bs
	}

	plansBuilt := func(prepared bool, batches [][]*certifierpb.LogEntry) int {
		cfg, err := pgx.ParseConfig(b.srv.DSN("postgres"))
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
		b.agent.RegisterApplier(conn)
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
	if got, want := dump(t, b.connect(t), "t"), fmt.Sprintf("(1,v%d)", committed-1); got != want {
		t.Errorf("t on B = %q, want %q", got, want)
	}
}

// An apply connection left in a failed transaction (the ROLLBACK after a
// failed attempt was itself cancelled) is rolled back by the next Apply,
// which then applies its versions.
func TestApplyRollsBackAFailedTransactionLeftOnItsConnection(t *testing.T) {
	c, _, b := newPair(t, "")
	c.commit(0, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	c.commit(0, `INSERT INTO t VALUES (1, 'a')`)
	ctx := tctx(t)
	if _, err := b.apply.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.apply.Exec(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("division by zero succeeded")
	}
	if st := b.apply.PgConn().TxStatus(); st != 'E' {
		t.Fatalf("transaction status %q, want E (failed)", st)
	}
	if err := Apply(ctx, b.apply, c.log); err != nil {
		t.Fatalf("Apply on a connection in a failed transaction: %v", err)
	}
	if got := dump(t, b.apply, "t"); got != "(1,a)" {
		t.Errorf("t on B = %q", got)
	}
}
