package replica

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// hostileSearchPathSchema is the schema of the search_path tests: an int
// key, a two-column (int, text) key, and a bigint key.
const hostileSearchPathSchema = `
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE pair (a int, b text, v text, PRIMARY KEY (a, b));
CREATE TABLE big (id bigint PRIMARY KEY, n bigint);
`

// decoySQL creates, in schema decoy, a function, aggregate or operator
// with the name and argument types of each builtin the applier's SQL could
// call unqualified, each giving a wrong answer (never an error, so that
// only the results can tell): a max(bigint) that is always 99, an
// unnest(anyarray) that returns no row, equality operators on int, bigint,
// text and oid that never hold, a <= and a <> on bigint that always hold,
// a > on bigint that never holds, a bigint - that does not subtract, a
// json -> int that finds nothing, set_config that sets nothing,
// current_setting that reads nothing, to_regclass that finds no table and
// format_type that names every type text. For Checksum, Install and the
// session set-up: an md5(text) and a string_agg(text, text) that answer
// 'decoy' whatever the rows, a count(*) that is always 99, a "char" = that
// never holds, int >= and <= that never hold (a CHECK made with them
// refuses every row), a now() stuck in 2000, a pg_current_xact_id() that
// is always 1, and a pg_advisory_xact_lock(bigint) that takes no lock but
// leaves a mark (decoy.skipped_lock) in the session that called it.
const decoySQL = `
CREATE SCHEMA decoy;
CREATE FUNCTION decoy.keep(bigint, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 99::bigint';
CREATE AGGREGATE decoy.max(bigint) (SFUNC = decoy.keep, STYPE = bigint, INITCOND = '99');
CREATE FUNCTION decoy.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE sql
	AS 'SELECT x FROM pg_catalog.unnest($1) AS x LIMIT 0';
CREATE FUNCTION decoy.never_int(int, int) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE FUNCTION decoy.never_bigint(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE FUNCTION decoy.always_bigint(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION decoy.never_text(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE FUNCTION decoy.never_oid(oid, oid) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE FUNCTION decoy.left_bigint(bigint, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT $1';
CREATE FUNCTION decoy.no_field(json, int) RETURNS json LANGUAGE sql AS 'SELECT NULL::pg_catalog.json';
CREATE OPERATOR decoy.= (LEFTARG = int, RIGHTARG = int, FUNCTION = decoy.never_int);
CREATE OPERATOR decoy.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = decoy.never_bigint);
CREATE OPERATOR decoy.= (LEFTARG = text, RIGHTARG = text, FUNCTION = decoy.never_text);
CREATE OPERATOR decoy.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = decoy.never_oid);
CREATE OPERATOR decoy.<> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = decoy.always_bigint);
CREATE OPERATOR decoy.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = decoy.always_bigint);
CREATE OPERATOR decoy.> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = decoy.never_bigint);
CREATE OPERATOR decoy.- (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = decoy.left_bigint);
CREATE OPERATOR decoy.-> (LEFTARG = json, RIGHTARG = int, FUNCTION = decoy.no_field);
CREATE FUNCTION decoy.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS 'SELECT $2';
CREATE FUNCTION decoy.current_setting(text) RETURNS text LANGUAGE sql AS 'SELECT ''decoy''::pg_catalog.text';
CREATE FUNCTION decoy.to_regclass(text) RETURNS regclass LANGUAGE sql AS 'SELECT NULL::pg_catalog.regclass';
CREATE FUNCTION decoy.format_type(oid, int) RETURNS text LANGUAGE sql AS 'SELECT ''text''::pg_catalog.text';
CREATE OPERATOR decoy.>= (LEFTARG = int, RIGHTARG = int, FUNCTION = decoy.never_int);
CREATE OPERATOR decoy.<= (LEFTARG = int, RIGHTARG = int, FUNCTION = decoy.never_int);
CREATE FUNCTION decoy.never_char("char", "char") RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE OPERATOR decoy.= (LEFTARG = "char", RIGHTARG = "char", FUNCTION = decoy.never_char);
CREATE FUNCTION decoy.md5(text) RETURNS text LANGUAGE sql AS 'SELECT ''decoy''::pg_catalog.text';
CREATE FUNCTION decoy.keep_text(text, text, text) RETURNS text LANGUAGE sql AS 'SELECT $1';
CREATE AGGREGATE decoy.string_agg(text, text) (SFUNC = decoy.keep_text, STYPE = text, INITCOND = 'decoy');
CREATE FUNCTION decoy.keep_count(bigint) RETURNS bigint LANGUAGE sql AS 'SELECT $1';
CREATE AGGREGATE decoy.count(*) (SFUNC = decoy.keep_count, STYPE = bigint, INITCOND = '99');
ALTER DATABASE postgres SET search_path = decoy, public, pg_catalog;
`

// TestApplyUnderAHostileSearchPath: the applier's statements and the
// version it reads back mean the same whatever search_path the database
// gives its sessions. An operator may set one (ALTER DATABASE ... SET
// search_path) that lists a schema before pg_catalog, and a function,
// aggregate or operator there with a builtin's name and argument types is
// found first, by every unqualified call. Here the replica's apply session
// (a new connection, as the agent's, that went through
// PrepareApplySession) finds decoys of everything the applier uses: the
// replica must still end equal to the origin, with the right version read
// back.
func TestApplyUnderAHostileSearchPath(t *testing.T) {
	c, a, b := newPair(t, hostileSearchPathSchema)
	first := len(c.log)
	for _, sql := range []string{
		`INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c');
			INSERT INTO pair VALUES (1, 'x', 'p1'), (2, 'y', 'p2');
			INSERT INTO big VALUES (5000000000, 1), (6000000000, 2)`,
		`UPDATE t SET v = 'b2' WHERE id = 2; DELETE FROM t WHERE id = 3;
			DELETE FROM pair WHERE a = 1 AND b = 'x'; DELETE FROM big WHERE id = 6000000000`,
		`INSERT INTO t VALUES (4, 'd'); UPDATE pair SET v = 'p2b' WHERE a = 2;
			INSERT INTO pair VALUES (1, 'z', 'p3')`,
		`DELETE FROM t WHERE id = 1; UPDATE big SET n = n + 1`,
		`UPDATE t SET v = v || '!'; DELETE FROM pair WHERE b = 'z'; INSERT INTO pair VALUES (3, 'x', 'p4')`,
	} {
		c.commit(0, sql)
	}
	entries := c.log[first:]
	c.local(1, decoySQL)

	ctx := tctx(t)
	conn := hostileSession(t, b.srv)
	b.agent.RegisterApplier(conn)
	if err := PrepareApplySession(ctx, conn); err != nil {
		t.Fatal(err)
	}
	ap := NewApplier()
	// One version alone, then a batch of four (its deletes, upserts and
	// version range in one transaction).
	if err := ap.Apply(ctx, conn, entries[:1]); err != nil {
		t.Fatalf("apply version %d under the decoy search_path: %v", entries[0].GetVersion(), err)
	}
	if err := ap.Apply(ctx, conn, entries[1:]); err != nil {
		t.Fatalf("apply versions %d.. under the decoy search_path: %v", entries[1].GetVersion(), err)
	}

	if v, err := ReadVersion(ctx, conn); err != nil || v != uint64(len(c.log)) {
		t.Errorf("ReadVersion under the decoy search_path = %d, %v; want %d", v, err, len(c.log))
	}
	clean := cleanSession(t, b.srv)
	sameChecksums(t, checksum(t, cleanSession(t, a.srv)), checksum(t, clean))
	for table, want := range map[string]string{
		"t":    "(2,b2!)\n(4,d!)",
		"pair": "(2,y,p2b)\n(3,x,p4)",
		"big":  "(5000000000,2)",
	} {
		if got := dump(t, clean, "public."+table); got != want {
			t.Errorf("%s on B:\n%s\nwant:\n%s", table, got, want)
		}
	}
}

// TestCheckDDLGenerationUnderAHostileSearchPath: the extension's
// check_ddl_generation has no SET clause (it runs in every apply
// transaction, and a SET clause costs every call a GUC nest level), so it
// must qualify every function and operator it uses: a max(bigint)
// aggregate and a <> operator on bigint found first on the caller's
// search_path must change nothing.
func TestCheckDDLGenerationUnderAHostileSearchPath(t *testing.T) {
	c := newCluster(t, 1)
	c.commit(0, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	c.local(0, decoySQL)
	conn := hostileSession(t, c.nodes[0].srv)
	ctx := tctx(t)
	var config []string
	if err := conn.QueryRow(ctx, `SELECT p.proconfig FROM pg_catalog.pg_proc AS p
		WHERE p.oid OPERATOR(pg_catalog.=) 'tashkent.check_ddl_generation(bigint)'::pg_catalog.regprocedure`).Scan(&config); err != nil || config != nil {
		t.Errorf("check_ddl_generation's settings = %q, %v; want none", config, err)
	}
	var gen int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.max(d.gen), 0) FROM tashkent.ddl_log AS d`).Scan(&gen); err != nil || gen == 0 {
		t.Fatalf("DDL generation %d, %v; want the CREATE TABLE's", gen, err)
	}
	if _, err := conn.Exec(ctx, `SELECT tashkent.check_ddl_generation($1)`, gen); err != nil {
		t.Errorf("check_ddl_generation(%d), the current generation, under a decoy search_path: %v", gen, err)
	}
	if e := pgErr(t, func() error { _, err := conn.Exec(ctx, `SELECT tashkent.check_ddl_generation($1)`, gen+1); return err }()); e.Code != pgcode.DDLGenerationChanged {
		t.Errorf("check_ddl_generation(%d), a stale generation: %v, want TK001", gen+1, e)
	}
}

// hostileSession opens a connection to srv that runs with the database's
// decoy search_path (decoySQL) and checks that the decoys are what it
// finds first.
func hostileSession(t *testing.T, srv *pgserver.Server) *pgx.Conn {
	t.Helper()
	conn := pgtest.Connect(t, srv, "postgres")
	var decoyMax int64
	if err := conn.QueryRow(tctx(t), `SELECT max(x) FROM (VALUES (1::bigint)) AS v(x)`).Scan(&decoyMax); err != nil || decoyMax != 99 {
		t.Fatalf("the session does not find the decoy max first: %d, %v", decoyMax, err)
	}
	var decoyEq bool
	if err := conn.QueryRow(tctx(t), `SELECT 1::int = 1::int`).Scan(&decoyEq); err != nil || decoyEq {
		t.Fatalf("the session does not find the decoy = first: %v, %v", decoyEq, err)
	}
	return conn
}

// cleanSession opens a connection to srv whose search_path finds only
// builtins, for the test's own checks.
func cleanSession(t *testing.T, srv *pgserver.Server) *pgx.Conn {
	t.Helper()
	conn := pgtest.Connect(t, srv, "postgres")
	mustExec(t, conn, `SET search_path = pg_catalog, public`)
	return conn
}
