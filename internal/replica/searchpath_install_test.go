package replica

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// The rest of tashkent's own SQL under a hostile search_path (see
// searchpath_test.go for the decoys): Checksum, Install with the session
// set-up it creates, and the sequence set-up.

// checksumSchema holds values whose text depends on the print settings
// Checksum pins (a timestamptz prints in the session's time zone), so a
// Checksum that did not pin them would differ between sessions.
const checksumSchema = `
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE stamps (id int PRIMARY KEY, at timestamptz, d float8, b bytea, i interval);
CREATE SCHEMA other;
CREATE TABLE other.nokey (v text);
INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, NULL);
INSERT INTO stamps VALUES (1, '2026-11-21 12:00:00+00', 0.1, '\xdeadbeef', '1 day 2 hours'),
	(2, '1999-12-31 23:59:59.5+05', -0.0, '', '-3 months');
INSERT INTO other.nokey VALUES ('x'), ('x'), ('y');
`

// checksumBeforeQualifying is Checksum as it was before its SQL was
// qualified, run the same way: on a clean search_path its
// values must be today's, so that checksums stay comparable.
func checksumBeforeQualifying(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	ctx := tctx(t)
	tables := queryStrings(t, conn, `
SELECT format('%I.%I', n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence <> 't'
	AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'tashkent', 'pg_toast')
	AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
ORDER BY 1`)
	out := map[string]string{}
	mustExec(t, conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	mustExec(t, conn, `SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true),
		set_config('IntervalStyle', 'postgres', true), set_config('extra_float_digits', '1', true),
		set_config('bytea_output', 'hex', true)`)
	for _, tbl := range tables {
		var n int64
		var sum string
		if err := conn.QueryRow(ctx, `SELECT count(*), md5(coalesce(string_agg(s.h, '' ORDER BY s.h), ''))
			FROM (SELECT md5((tashkent_t.*)::text) AS h FROM ONLY `+tbl+` AS tashkent_t) AS s`).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		out[tbl] = fmt.Sprintf("%d:%s", n, sum)
	}
	mustExec(t, conn, "COMMIT")
	return out
}

// TestChecksumUnderAHostileSearchPath: Checksum is how tests, the demo and
// `tashkent status` tell that replicas converged. Under a search_path that
// finds decoys of md5, string_agg, count, the catalog's = operators and
// set_config first (and a session time zone that prints timestamptz
// differently), it must give the value it gives under a clean search_path
// on the same rows, which is the value of the query before it was
// qualified: a decoy md5 would make two diverged replicas look equal.
func TestChecksumUnderAHostileSearchPath(t *testing.T) {
	srv, admin := instance(t, checksumSchema)
	mustExec(t, admin, decoySQL)

	clean := cleanSession(t, srv)
	want := checksumBeforeQualifying(t, clean)
	if len(want) != 3 {
		t.Fatalf("the old checksum query saw %d tables, want 3: %v", len(want), want)
	}
	sameChecksums(t, want, checksum(t, clean))

	hostile := hostileSession(t, srv)
	mustExec(t, hostile, `SET TimeZone = 'Asia/Tashkent'; SET extra_float_digits = 0; SET bytea_output = 'escape'`)
	got := checksum(t, hostile)
	if len(got) != len(want) {
		t.Errorf("Checksum under the decoy search_path covers %d tables, want %d", len(got), len(want))
	}
	sameChecksums(t, want, got)
}

// hostileInstance starts a PostgreSQL, runs schema, makes the database's
// search_path the decoys' (decoySQL) and then runs Install on a session
// that finds the decoys first.
func hostileInstance(t *testing.T, schema string) *pgserver.Server {
	t.Helper()
	srv := pgtest.Start(t)
	admin := pgtest.Connect(t, srv, "postgres")
	mustExec(t, admin, schema)
	mustExec(t, admin, decoySQL)
	conn := hostileSession(t, srv)
	if err := Install(tctx(t), conn); err != nil {
		t.Fatalf("Install under the decoy search_path: %v", err)
	}
	var mark string
	if err := conn.QueryRow(tctx(t), `SELECT coalesce(pg_catalog.current_setting('decoy.skipped_lock', true), '')`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	if mark != "" {
		t.Errorf("Install called the decoy pg_advisory_xact_lock: concurrent installs are not serialized")
	}
	return srv
}

// installSchema has tables of each capture kind: one key column
// (capture_key), two (capture), a unique index, a foreign key, a serial
// column, and a table without a primary key.
const installSchema = hostileSearchPathSchema + `
CREATE TABLE uniq (id int PRIMARY KEY, u text UNIQUE);
CREATE TABLE child (id int PRIMARY KEY, t_id int REFERENCES t);
CREATE TABLE counted (id serial PRIMARY KEY, v text);
CREATE TABLE nokey (v text);
`

// allTriggers lists the tashkent triggers of every user table with their
// arguments and functions.
func allTriggers(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	return queryStrings(t, conn, `SELECT tgrelid::regclass::text || ' ' || tgname || ' ' || encode(tgargs, 'escape')
		|| ' ' || tgfoid::regproc::text || ' ' || tgenabled::text
		FROM pg_trigger WHERE tgname LIKE 'tashkent%' ORDER BY 1`)
}

// decoyDependents lists the objects outside schema decoy that depend on a
// function or operator in it: a default, CHECK constraint or view that
// Install (or a session's set-up) created while a decoy was found first
// keeps calling that decoy.
func decoyDependents(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	return queryStrings(t, conn, `
WITH decoys AS (
	SELECT 'pg_proc'::regclass AS cls, p.oid FROM pg_proc p WHERE p.pronamespace = 'decoy'::regnamespace
	UNION ALL
	SELECT 'pg_operator'::regclass, o.oid FROM pg_operator o WHERE o.oprnamespace = 'decoy'::regnamespace)
SELECT DISTINCT pg_describe_object(d.classid, d.objid, d.objsubid) || ' uses ' || pg_describe_object(d.refclassid, d.refobjid, 0)
FROM pg_depend d JOIN decoys r ON r.cls = d.refclassid AND r.oid = d.refobjid
WHERE NOT EXISTS (SELECT FROM decoys x WHERE x.cls = d.classid AND x.oid = d.objid)
ORDER BY 1`)
}

// hostileCaptureSession opens a session with the decoy search_path and
// prepares it for capture twice, as the proxy does again after a client's
// DISCARD ALL.
func hostileCaptureSession(t *testing.T, srv *pgserver.Server) *pgx.Conn {
	t.Helper()
	conn := hostileSession(t, srv)
	for i := 1; i <= 2; i++ {
		if err := PrepareSession(tctx(t), conn); err != nil {
			t.Fatalf("PrepareSession (call %d) under the decoy search_path: %v", i, err)
		}
	}
	return conn
}

// TestInstallUnderAHostileSearchPath: Install run on a database whose
// search_path finds decoys first must install what it installs under a
// clean one (the same triggers on the same tables, no default or CHECK
// bound to a decoy, the install lock taken), and the sessions it prepares
// there must capture and collect as anywhere else (Tashkent §4: the
// writeset holds the transaction's effects). Apply under such a
// search_path: TestApplyUnderAHostileSearchPath. A is installed with a clean search_path, B with the decoys;
// the same transactions run on both, with B's sessions finding the decoys.
func TestInstallUnderAHostileSearchPath(t *testing.T) {
	srvA, _ := instance(t, installSchema)
	srvB := hostileInstance(t, installSchema)
	cleanA, cleanB := cleanSession(t, srvA), cleanSession(t, srvB)

	eqStrings(t, "tashkent triggers on B (installed under the decoy search_path)", allTriggers(t, cleanB), allTriggers(t, cleanA))
	eqStrings(t, "objects on B that call a decoy", decoyDependents(t, cleanB), nil)

	sessA, sessB := session(t, srvA), hostileCaptureSession(t, srvB)
	for v, sql := range []string{
		`INSERT INTO t VALUES (1, 'a'), (2, 'b'); INSERT INTO pair VALUES (1, 'x', 'p');
			INSERT INTO uniq VALUES (1, 'u1'); INSERT INTO child VALUES (1, 1); INSERT INTO counted (v) VALUES ('c')`,
		// The transactions' own operators are qualified: on B they run
		// under the decoy search_path too, and a decoy = would match no row.
		`UPDATE t SET v = 'b2' WHERE id OPERATOR(pg_catalog.=) 2; DELETE FROM pair WHERE a OPERATOR(pg_catalog.=) 1;
			UPDATE uniq SET u = 'u2'; INSERT INTO child VALUES (2, 2)`,
	} {
		wantWS := changes(commitLocal(t, sessA, uint64(v+1), sql).GetWriteset().GetChanges())
		gotWS := changes(commitLocal(t, sessB, uint64(v+1), sql).GetWriteset().GetChanges())
		eqStrings(t, fmt.Sprintf("writeset of version %d captured on B", v+1), gotWS, wantWS)
	}

	sameChecksums(t, checksum(t, cleanA), checksum(t, cleanB))
}

// TestSequenceSetupUnderAHostileSearchPath: the sequence set-up the proxy
// sends at start (SequenceSettings, ConfigureSequences), on a database
// installed and configured under the decoy search_path, records the
// replica's place and aligns the sequences as under a clean one.
func TestSequenceSetupUnderAHostileSearchPath(t *testing.T) {
	srv := hostileInstance(t, installSchema+`INSERT INTO counted (v) VALUES ('a'), ('b'), ('c');`)
	conn := hostileSession(t, srv)
	ctx := context.Background()
	if _, _, ok, err := SequenceSettings(ctx, conn); err != nil || ok {
		t.Fatalf("SequenceSettings before ConfigureSequences: ok %v, %v; want none", ok, err)
	}
	if err := ConfigureSequences(ctx, conn, 3, 16); err != nil {
		t.Fatalf("ConfigureSequences under the decoy search_path: %v", err)
	}
	if index, stride, ok, err := SequenceSettings(ctx, conn); err != nil || !ok || index != 3 || stride != 16 {
		t.Fatalf("SequenceSettings = %d, %d, %v, %v; want 3, 16", index, stride, ok, err)
	}
	vals := nextvals(t, cleanSession(t, srv), "counted_id_seq", 3)
	if vals[0] != 19 {
		t.Errorf("first value after alignment = %d, want 19 (past the column's 3, congruent to 3 mod 16)", vals[0])
	}
	checkAligned(t, "counted_id_seq", vals, 3, 16)
}
