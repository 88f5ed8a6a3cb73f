package replica

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// The capture functions before the capture cost work: the reference.
var (
	//go:embed testdata/capture_v0.sql
	captureV0SQL string
	//go:embed testdata/collect_v0.sql
	collectV0SQL string
)

// equivSchema has a table for each way capture can go: one key column
// without unique indexes (capture_key), with a unique index, a wider key,
// a deferrable key (keys swapped within a statement), keys whose text
// depends on settings, a partitioned table, column names that clash
// with the functions' own names, and foreign keys (fkc: its reference
// events come from today's reference triggers in both databases, so the
// comparison checks that they leave the row events alone, and that they
// run under the odd settings and the decoy search_path).
const equivSchema = `
CREATE TABLE a (id int PRIMARY KEY, v text, f float8, ts timestamptz, b bytea, iv interval, j json, n int, o text);
CREATE TABLE tk (k text PRIMARY KEY, n int, tashkent_n int, k2 int);
CREATE TABLE wide (a int, b text, v int, PRIMARY KEY (b, a));
CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE, v int);
CREATE TABLE s (id int PRIMARY KEY DEFERRABLE, v text);
CREATE TABLE tz (at timestamptz PRIMARY KEY, v int);
CREATE TABLE fl (x float8 PRIMARY KEY, v int);
CREATE TABLE p (id int, r int, v text, PRIMARY KEY (id, r)) PARTITION BY RANGE (r);
CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10);
CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10) TO (20);
CREATE TABLE fkc (id int PRIMARY KEY, a_id int REFERENCES a, at timestamptz REFERENCES tz, wa int, wb text,
	FOREIGN KEY (wb, wa) REFERENCES wide (b, a));
CREATE TABLE uu (id uuid PRIMARY KEY, v varchar(10));
CREATE TABLE vc (k varchar(20) PRIMARY KEY, n int2);
CREATE TABLE dc (gone int, id int8 PRIMARY KEY, v text);
ALTER TABLE dc DROP COLUMN gone;
CREATE TABLE pk1 (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE pk1a PARTITION OF pk1 FOR VALUES FROM (0) TO (100);
CREATE TABLE pk1b (v text, id int NOT NULL);
ALTER TABLE pk1 ATTACH PARTITION pk1b FOR VALUES FROM (100) TO (200);`

// keyTables1 are equivSchema's tables that capture_key captures (one key
// column, no certified unique index).
var keyTables1 = []string{"a", "dc", "fkc", "fl", "pk1", "pk1a", "pk1b", "s", "tk", "tz", "uu", "vc"}

// equivTransactions are run in order, each as one transaction, on both
// databases; every statement is deterministic.
var equivTransactions = [][]string{
	{`INSERT INTO a SELECT g, 'v' || g, g / 3.0, '2024-03-01 10:00:00+00'::timestamptz + g * interval '1 hour', '\x00ff'::bytea, g * interval '90 minutes', '{"g": 1}', g, 'o' FROM generate_series(1, 20) g`,
		`INSERT INTO tk VALUES ('x', 1, 1, 1), ('y"q', 2, 2, 2), ('z\', 3, 3, 3)`,
		`INSERT INTO wide VALUES (1, 'a', 1), (2, 'a', 2), (1, 'b', 3)`,
		`INSERT INTO u VALUES (1, 'a@x', 1), (2, 'b@x', 2), (3, NULL, 3)`,
		`INSERT INTO s VALUES (1, 'a'), (2, 'b'), (3, 'c')`,
		`INSERT INTO tz VALUES ('2024-01-02 12:00:00+09', 1), ('2024-06-01 00:00:00+00', 2)`,
		`INSERT INTO fl VALUES (0.1, 1), (1e300, 2), (-0.0, 3)`,
		`INSERT INTO p VALUES (1, 1, 'a'), (2, 11, 'b')`,
		`INSERT INTO fkc VALUES (1, 7, '2024-06-01 00:00:00+00', 1, 'b'), (2, NULL, NULL, NULL, 'b')`,
		`INSERT INTO uu VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'x'), ('00000000-0000-0000-0000-000000000002', NULL)`,
		`INSERT INTO vc VALUES ('k "1"', 1), (E'tab\there', 2), ('ünï', 3)`,
		`INSERT INTO dc VALUES (9000000000, 'big'), (-1, 'neg')`,
		`INSERT INTO pk1 VALUES (5, 'five'), (105, 'one-o-five')`},
	// Single-row updates that keep the key (the fast path), and that move it.
	{`UPDATE a SET v = 'w' WHERE id = 1`, `UPDATE a SET id = 101 WHERE id = 2`, `UPDATE a SET n = n + 1 WHERE id = 3`,
		`UPDATE tk SET n = 9 WHERE k = 'x'`, `UPDATE tk SET k = 'x2' WHERE k = 'y"q'`,
		`UPDATE a SET v = 'none' WHERE id = -1`,
		`UPDATE uu SET v = 'y' WHERE v = 'x'`, `UPDATE uu SET id = 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' WHERE v IS NULL`,
		`UPDATE vc SET n = 7 WHERE n = 1`, `UPDATE vc SET k = 'moved' WHERE n = 2`, `UPDATE dc SET v = 'bigger' WHERE id > 0`,
		`UPDATE pk1 SET v = 'V' WHERE id = 105`, `UPDATE pk1 SET id = 150 WHERE id = 5`, `UPDATE pk1b SET v = 'direct' WHERE id = 150`},
	// Multi-row updates, with and without moved keys; key swaps.
	{`UPDATE a SET v = v || '+' WHERE id BETWEEN 4 AND 9`, `UPDATE a SET id = id + 1000 WHERE id BETWEEN 10 AND 12`,
		`UPDATE a SET id = 2 WHERE id = 101`, `UPDATE s SET id = 3 - id WHERE id IN (1, 2)`, `UPDATE s SET id = 30 WHERE id = 3`,
		`UPDATE wide SET a = a + 10 WHERE b = 'a'`, `UPDATE wide SET v = 0`,
		`INSERT INTO fkc VALUES (3, 8, '2024-06-01 00:00:00+00', 1, 'b')`, `UPDATE fkc SET a_id = 9, wa = 1 WHERE id IN (1, 2)`},
	// Unique indexes, deletes, upserts, partitions, truncate.
	{`UPDATE u SET email = 'c@x' WHERE id = 1`, `UPDATE u SET id = 10 WHERE id = 2`, `DELETE FROM u WHERE id = 3`,
		`INSERT INTO a VALUES (1, 'up') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`,
		`INSERT INTO a VALUES (500, 'new') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`,
		`DELETE FROM a WHERE id IN (4, 5)`, `DELETE FROM a WHERE id = 6`,
		`UPDATE p SET r = 12 WHERE id = 1`, `UPDATE p1 SET v = 'p1' WHERE true`, `DELETE FROM p WHERE id = 2`,
		`UPDATE tz SET at = at + interval '1 second' WHERE v = 1`, `UPDATE fl SET x = 0.2 WHERE v = 1`, `UPDATE fl SET v = 7 WHERE v = 2`,
		`DELETE FROM uu WHERE v = 'y'`, `DELETE FROM vc`, `DELETE FROM dc WHERE id < 0`, `DELETE FROM pk1 WHERE id = 105`, `DELETE FROM pk1a`},
	{`TRUNCATE tk`, `INSERT INTO tk VALUES ('after', 1, 1, 1)`, `UPDATE tk SET k2 = 5`},
}

// equivSettings are the client settings each round runs under: the
// defaults (values print as pinned: capture pins nothing), and settings
// that print differently (capture pins them), with a search_path that
// puts look-alike functions first.
var equivSettings = []string{
	``,
	`SET TimeZone = 'America/New_York'; SET DateStyle = 'SQL, DMY'; SET IntervalStyle = 'sql_standard';
	 SET bytea_output = 'escape'; SET extra_float_digits = 0; SET search_path = decoy, public, pg_catalog`,
}

// TestCaptureSameEventsAsBefore runs the same transactions on two
// databases, one with today's capture functions and one with those from
// before the capture cost work (testdata), and compares the raw event
// streams the buffer returns: same events, same key and row text, same
// order (see "Capture cost" in doc.go).
//
// It runs twice: with tashkent.capture_key in C (csrc/tashkent_capture.c,
// whose fallback to capture_key_plpgsql the second settings round and the
// keys it does not print itself exercise) and in PL/pgSQL.
func TestCaptureSameEventsAsBefore(t *testing.T) {
	t.Run("c", func(t *testing.T) { requireCCapture(t); captureSameEventsAsBefore(t, CaptureC) })
	t.Run("plpgsql", func(t *testing.T) { captureSameEventsAsBefore(t, CapturePLpgSQL) })
}

func captureSameEventsAsBefore(t *testing.T, capture Capture) {
	srv := pgtest.Start(t)
	admin := pgtest.Connect(t, srv, "postgres")
	ctx := tctx(t)
	dbs := map[string]*pgx.Conn{}
	for _, db := range []string{"today", "before"} {
		mustExec(t, admin, "CREATE DATABASE "+db)
		c := pgtest.Connect(t, srv, db)
		mustExec(t, c, equivSchema+`
			CREATE SCHEMA decoy;
			CREATE FUNCTION decoy.to_json(anyelement) RETURNS json LANGUAGE sql AS $$ SELECT 'null'::json $$;
			CREATE FUNCTION decoy.quote_ident(name) RETURNS text LANGUAGE sql AS $$ SELECT 'decoy' $$;
			CREATE FUNCTION decoy.current_setting(text) RETURNS text LANGUAGE sql AS $$ SELECT 'decoy' $$;
			GRANT USAGE ON SCHEMA decoy TO PUBLIC`)
		if err := InstallCapture(ctx, c, capture, nil); err != nil {
			t.Fatal(err)
		}
		dbs[db] = c
	}
	if got, err := CaptureLanguage(ctx, dbs["today"]); err != nil || got != string(capture) {
		t.Fatalf("capture_key in %q (%v), want %s", got, err, capture)
	}
	// Today's triggers call capture or capture_key; in "before" both run
	// the old body.
	for _, fn := range []string{"tashkent.capture", "tashkent.capture_key"} {
		mustExec(t, dbs["before"], strings.ReplaceAll(captureV0SQL, "FUNCNAME", fn))
	}
	mustExec(t, dbs["before"], collectV0SQL)
	var keyTables string
	if err := dbs["today"].QueryRow(ctx, `SELECT string_agg(DISTINCT tgrelid::regclass::text, ',' ORDER BY tgrelid::regclass::text)
		FROM pg_trigger WHERE tgfoid = 'tashkent.capture_key'::regproc`).Scan(&keyTables); err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(keyTables1, ","); keyTables != want {
		t.Errorf("tables captured by capture_key: %s, want %s", keyTables, want)
	}

	events := 0
	for round, settings := range equivSettings {
		got := map[string][]string{}
		for name, c := range dbs {
			s := pgtest.Connect(t, srv, c.Config().Database)
			if err := PrepareSession(ctx, s); err != nil {
				t.Fatal(err)
			}
			if settings != "" {
				mustExec(t, s, settings)
			}
			if round > 0 {
				mustExec(t, s, `SET session_replication_role = replica; TRUNCATE a, tk, wide, u, s, tz, fl, p, fkc, uu, vc, dc, pk1; RESET session_replication_role`)
			}
			for i, stmts := range equivTransactions {
				evs := runCollect(ctx, t, s, stmts)
				got[name] = append(got[name], fmt.Sprintf("-- transaction %d", i))
				got[name] = append(got[name], evs...)
			}
		}
		keeping := keepingAsUpserts(t, got["today"])
		eqStrings(t, fmt.Sprintf("events with settings %q (today, 'M' as 'U', vs before)", settings), got["today"], got["before"])
		if keeping == 0 {
			t.Errorf("settings %q: no keeping update ('M') recorded", settings)
		}
		for _, ref := range []string{`R public.a [7] <null>`, `R public.tz ["2024-06-01T00:00:00+00:00"] <null>`,
			`R public.wide ["b",1] <null>`, `R public.a [9] <null>`} {
			if !slices.Contains(got["today"], ref) {
				t.Errorf("settings %q: no reference event %s", settings, ref)
			}
		}
		events += len(got["today"])
	}
	if events < 100 {
		t.Errorf("only %d events: the workload does not exercise capture", events)
	}
}

// keepingAsUpserts rewrites today's keeping updates ('M', which the old
// capture recorded as 'U') as 'U' and counts them; only capture_key
// tables record them.
func keepingAsUpserts(t *testing.T, evs []string) int {
	n := 0
	for i, e := range evs {
		if rest, ok := strings.CutPrefix(e, "M "); ok {
			if tbl, _, _ := strings.Cut(rest, " "); !slices.Contains(keyTables1, strings.TrimPrefix(tbl, "public.")) {
				t.Errorf("keeping update on %s, which capture_key does not capture: %s", tbl, e)
			}
			evs[i] = "U " + rest
			n++
		}
	}
	return n
}

// runCollect runs stmts in one transaction on a prepared session and
// returns the raw events CollectSQL gives, then commits.
func runCollect(ctx context.Context, t *testing.T, s *pgx.Conn, stmts []string) []string {
	t.Helper()
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, st := range stmts {
		if _, err := tx.Exec(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	rows, err := tx.Query(ctx, CollectSQL)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var tbl, op string
		var key, row *string
		if err := rows.Scan(&tbl, &op, &key, &row); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s %s %s", op, tbl, deref(key), deref(row)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// TestInstallUpgradesCaptureTriggers: an installation from before
// capture_key has every table's triggers on tashkent.capture, with the
// same names and arguments. Installing again moves the tables capture_key
// covers to it, and captures the same events.
func TestInstallUpgradesCaptureTriggers(t *testing.T) {
	srv, c := instance(t, `CREATE TABLE one (id int PRIMARY KEY, v text); CREATE TABLE two (a int, b int, PRIMARY KEY (a, b))`)
	ctx := tctx(t)
	functions := func() string {
		var s string
		if err := c.QueryRow(ctx, `SELECT string_agg(tgrelid::regclass || '.' || tgname || '=' || tgfoid::regproc, ' ' ORDER BY tgrelid::regclass::text, tgname)
			FROM pg_trigger WHERE tgname LIKE 'tashkent%'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const today = "one.tashkent_capture_del=tashkent.capture_key one.tashkent_capture_ins=tashkent.capture_key " +
		"one.tashkent_capture_trunc=tashkent.capture one.tashkent_capture_upd=tashkent.capture_key " +
		"two.tashkent_capture_del=tashkent.capture two.tashkent_capture_ins=tashkent.capture " +
		"two.tashkent_capture_trunc=tashkent.capture two.tashkent_capture_upd=tashkent.capture"
	if got := functions(); got != today {
		t.Fatalf("trigger functions after Install:\n%s\nwant\n%s", got, today)
	}
	// The triggers as the previous Install created them (DROP TRIGGER and
	// CREATE TRIGGER do not run the event trigger's refresh).
	mustExec(t, c, `DROP TRIGGER tashkent_capture_ins ON one; DROP TRIGGER tashkent_capture_upd ON one; DROP TRIGGER tashkent_capture_del ON one;
		CREATE TRIGGER tashkent_capture_ins AFTER INSERT ON one REFERENCING NEW TABLE AS tashkent_new FOR EACH STATEMENT EXECUTE FUNCTION tashkent.capture('id');
		CREATE TRIGGER tashkent_capture_upd AFTER UPDATE ON one REFERENCING OLD TABLE AS tashkent_old NEW TABLE AS tashkent_new FOR EACH STATEMENT EXECUTE FUNCTION tashkent.capture('id');
		CREATE TRIGGER tashkent_capture_del AFTER DELETE ON one REFERENCING OLD TABLE AS tashkent_old FOR EACH STATEMENT EXECUTE FUNCTION tashkent.capture('id')`)
	if got := functions(); got == today {
		t.Fatal("could not set up the old triggers")
	}
	if err := Install(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := functions(); got != today {
		t.Errorf("trigger functions after upgrading:\n%s\nwant\n%s", got, today)
	}
	e := commitLocal(t, session(t, srv), 1, `INSERT INTO one VALUES (1, 'a'), (2, 'b'); UPDATE one SET id = 3 WHERE id = 1; UPDATE one SET v = 'c' WHERE id = 2`)
	eqStrings(t, "capture after upgrading", changes(e.GetWriteset().GetChanges()), []string{
		`D public.one [1]`, `U public.one [2] (2,c)`, `U public.one [3] (3,a)`})
}

// TestCaptureColumnsNamedLikeVariables: the capture functions' statements
// read the user's columns through the transition tables; columns named
// like the functions' variables must not confuse them.
func TestCaptureColumnsNamedLikeVariables(t *testing.T) {
	srv, _ := instance(t, `CREATE TABLE k1 (id int PRIMARY KEY, v_tbl text, tg_argv int, v_saved text, v_pk1 text);
		CREATE TABLE k2 (id int PRIMARY KEY, v_tbl text UNIQUE, v_sep int, v_pk text, v_one int, tg_op text)`)
	s := session(t, srv)
	e := commitLocal(t, s, 1, `INSERT INTO k1 VALUES (1, 'a', 2, 'b', 'c'); UPDATE k1 SET v_tbl = 'x';
		INSERT INTO k2 VALUES (1, 'a', 2, 'b', 3, 'd'); UPDATE k2 SET id = 2; DELETE FROM k1`)
	eqStrings(t, "events", changes(e.GetWriteset().GetChanges()), []string{
		`D public.k1 [1]`, `D public.k2 [1]`, `U public.k2 [2] (2,a,2,b,3,d)`, `K public.k2#k2_v_tbl_key ["a"]`})
}
