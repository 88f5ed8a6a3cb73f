package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// TestCCaptureRunsPlainStatementsItself: with capture_key in C, the plain
// statements of an OLTP transaction (inserts, single-row updates that keep
// or move the key, deletes) are captured without the PL/pgSQL function,
// and each case the C function leaves to it (an UPDATE of several rows, a
// key type it does not print, settings that are not the pinned ones, a
// nested statement) goes to it, counted in pg_stat_xact_user_functions.
// The events are the same either way (TestCaptureSameEventsAsBefore); this
// checks who made them, and that each call made the right ones.
func TestCCaptureRunsPlainStatementsItself(t *testing.T) {
	requireCCapture(t)
	srv, admin := instance(t, `CREATE TABLE t (id int PRIMARY KEY, v text);
		CREATE TABLE f (x float8 PRIMARY KEY, v int);
		CREATE TABLE audit (id int PRIMARY KEY, n int);
		INSERT INTO audit VALUES (1, 0);
		CREATE TABLE watched (id int PRIMARY KEY);
		CREATE FUNCTION count_watched() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN UPDATE audit SET n = n + 1 WHERE id = 1; RETURN NULL; END $$;
		CREATE TRIGGER count_watched AFTER INSERT ON watched FOR EACH ROW EXECUTE FUNCTION count_watched();`)
	ctx := tctx(t)
	if err := InstallCapture(ctx, admin, CaptureC, nil); err != nil {
		t.Fatal(err)
	}
	s := session(t, srv)
	mustExec(t, s, `SET track_functions = 'all'`)
	fallbacks := func() int {
		var n int
		if err := s.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
			WHERE schemaname = 'tashkent' AND funcname = 'capture_key_plpgsql'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	steps := []struct {
		sql       string
		fallbacks int // calls of capture_key_plpgsql so far in the transaction
	}{
		{`INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')`, 0},
		{`UPDATE t SET v = 'k' WHERE id = 1`, 0},
		{`UPDATE t SET id = 20 WHERE id = 2`, 0},
		{`DELETE FROM t WHERE id = 3`, 0},
		{`UPDATE t SET v = v || '+'`, 1},
		{`INSERT INTO f VALUES (0.5, 1)`, 2},
		{`SET LOCAL TimeZone = 'America/New_York'`, 2},
		{`INSERT INTO t VALUES (4, 'd')`, 3},
		{`SET LOCAL TimeZone = 'UTC'`, 3},
		// The user trigger's UPDATE of audit runs at depth 2, and flags the
		// transaction: from then on capture records by state, in PL/pgSQL.
		{`INSERT INTO watched VALUES (1)`, 5},
		{`INSERT INTO t VALUES (5, 'e')`, 6},
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
		if got := fallbacks(); got != st.fallbacks {
			t.Errorf("after %s: %d calls of capture_key_plpgsql, want %d", st.sql, got, st.fallbacks)
		}
	}
	ws, err := CollectWriteset(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "writeset", changes(ws), []string{
		`U public.t [1] (1,k+)`,
		`D public.t [2]`,
		`D public.t [3]`,
		`U public.t [20] (20,b+)`,
		`U public.f [0.5] (0.5,1)`,
		`U public.t [4] (4,d)`,
		`U public.audit [1] (1,1)`, // the nested statement's capture runs first
		`U public.watched [1] (1)`,
		`U public.t [5] (5,e)`,
	})
}

// TestCCaptureOfRowsLargerThanWorkMem: a transition table whose rows do
// not fit in work_mem spills to disk, and a row read back from there lives
// in memory the C capture must release before SPI's context goes (review
// h37: a single-row UPDATE of a value larger than work_mem failed with
// XX000, and one of 40 MB crashed the server). The events are the ones the
// PL/pgSQL capture records, for an UPDATE that keeps its key and one that
// moves it, and for a bulk INSERT across several batches.
func TestCCaptureOfRowsLargerThanWorkMem(t *testing.T) {
	srv, admin := serverForBothCaptures(t)
	ctx := tctx(t)
	got := map[Capture][]string{}
	for _, capture := range []Capture{CaptureC, CapturePLpgSQL} {
		db, _ := databaseCapturedIn(t, srv, admin, capture, `CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
		s := pgtest.Connect(t, srv, db)
		if err := PrepareSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		mustExec(t, s, `SET work_mem = '64kB'`)
		got[capture] = runCollect(ctx, t, s, []string{
			`UPDATE t SET v = repeat('x', 300000) WHERE id = 1`,
			`UPDATE t SET id = 3, v = repeat('y', 300000) WHERE id = 2`,
			`INSERT INTO t SELECT g, repeat('z', 100) FROM generate_series(10, 3009) g`,
		})
	}
	if len(got[CaptureC]) != 3003 {
		t.Fatalf("%d events in C, want 3003 (keep, delete and upsert, 3000 inserts)", len(got[CaptureC]))
	}
	if e := got[CaptureC][0]; !strings.HasPrefix(e, "M public.t [1] (1,xxx") || len(e) < 300000 {
		t.Errorf("first event %.40s... (%d bytes), want the keeping update of key 1 with its 300,000 x", e, len(e))
	}
	eqStrings(t, "events (C, then PL/pgSQL)", got[CaptureC], got[CapturePLpgSQL])
}

// The C capture writes only into the buffer create_writeset_buffer makes:
// a pg_temp.tashkent_writeset of tashkent_capture's with the right columns
// but a generated one (made here with the DDL guard off, as only a
// superuser can) is refused, where a heap insert would have put a value
// of its own into the generated column.
func TestCCaptureRefusesABufferItDidNotMake(t *testing.T) {
	requireCCapture(t)
	srv, admin := instance(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	ctx := tctx(t)
	if err := InstallCapture(ctx, admin, CaptureC, nil); err != nil {
		t.Fatal(err)
	}
	s := session(t, srv)
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl DISABLE`)
	mustExec(t, s, `DROP TABLE pg_temp.tashkent_writeset; SET ROLE tashkent_capture;
		CREATE TEMP TABLE tashkent_writeset (seq bigserial, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
			tbl text NOT NULL, op text NOT NULL, key text, row text GENERATED ALWAYS AS (op) STORED);
		RESET ROLE`)
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl ENABLE ALWAYS`)
	_, err := s.Exec(ctx, `INSERT INTO t VALUES (1)`)
	if pe := pgErr(t, err); pe.Code != "55000" || !strings.Contains(pe.Message, "is not the writeset buffer tashkent creates") {
		t.Fatalf("capture into a buffer with a generated column: %s %q", pe.Code, pe.Message)
	}
}

// Two builds of the library are the same bytes: a proxy that starts again
// (a new process, a new build) finds the file an earlier one wrote into
// the data directory and uses it, instead of adding one more at every
// start (they did, while the object recorded the temporary build
// directory's name).
func TestCCaptureLibraryBuildIsReproducible(t *testing.T) {
	requireCCapture(t)
	first, err := BuildCaptureLibrary()
	if err != nil {
		t.Fatal(err)
	}
	second, err := BuildCaptureLibrary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("two builds of the capture library differ (%d and %d bytes)", len(first), len(second))
	}
}

// TestCCaptureLibraryIsReusedNeverRewritten: Install puts the library into
// the server's data directory once, and later installs use that file (a
// file a backend has loaded must not be rewritten); a file with the
// library's name and other contents is never used.
func TestCCaptureLibraryIsReusedNeverRewritten(t *testing.T) {
	requireCCapture(t)
	srv, admin := instance(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	ctx := tctx(t)
	library := func() string {
		var path string
		if err := admin.QueryRow(ctx, `SELECT probin FROM pg_proc WHERE oid = 'tashkent.capture_key()'::regprocedure`).Scan(&path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if err := InstallCapture(ctx, admin, CaptureC, nil); err != nil {
		t.Fatal(err)
	}
	first := library()
	if !strings.HasPrefix(first, "./tashkent_capture-") {
		t.Fatalf("capture_key loads %s, want a file of the data directory named relative to it", first)
	}
	onDisk := filepath.Join(srv.DataDir(), first)
	built, err := os.ReadFile(onDisk)
	if err != nil {
		t.Fatal(err)
	}
	// Entries with the library's name and hash that are not it, sorting
	// first: other contents of the same size, a directory, and a file the
	// server may not read. None is used, and none stops the install.
	stem := onDisk[:len(onDisk)-len("XXXXXXXXXXXX.so")]
	if err := os.WriteFile(stem+"000000000000.so", make([]byte, len(built)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(stem+"111111111111.so", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stem+"222222222222.so", built, 0o000); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := InstallCapture(ctx, admin, CaptureC, nil); err != nil {
			t.Fatal(err)
		}
		if got := library(); got != first {
			t.Fatalf("capture_key now loads %s, want %s again", got, first)
		}
	}
	files, err := filepath.Glob(filepath.Join(srv.DataDir(), "tashkent_capture-*.so"))
	if err != nil || len(files) != 4 {
		t.Fatalf("libraries in the data directory: %v (%v), want the one written and the three decoys", files, err)
	}
	s := session(t, srv)
	mustExec(t, s, `INSERT INTO t VALUES (1)`)
}

// TestCCollectTakesWhatThePLpgSQLCollectTakes: with the C capture,
// tashkent.take_writeset (the proxy's collect, with the record token) is C
// too, and takes what the PL/pgSQL function takes: the transaction's rows
// in seq order, not a rolled-back savepoint's, a value stored out of line
// (TOAST) whole, a delete's NULL row;
// rows an earlier transaction left are dropped with the same WARNING; an
// empty buffer gives no rows; the buffer is empty afterwards; a
// superuser's session may collect without the token, as
// tashkent.check_collector says. (Client roles without the token are
// refused: TestSealedBufferRefusesClientRoles.)
func TestCCollectTakesWhatThePLpgSQLCollectTakes(t *testing.T) {
	srv, admin := serverForBothCaptures(t)
	ctx := tctx(t)
	got := map[Capture][]string{}
	for _, capture := range []Capture{CaptureC, CapturePLpgSQL} {
		db, c := databaseCapturedIn(t, srv, admin, capture, `CREATE TABLE t (id int PRIMARY KEY, v text);
			CREATE TABLE u (k text PRIMARY KEY, n int); INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
		var lang string
		if err := c.QueryRow(ctx, `SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
			WHERE p.oid = 'tashkent.take_writeset(text)'::regprocedure`).Scan(&lang); err != nil {
			t.Fatal(err)
		}
		if want := map[Capture]string{CaptureC: "c", CapturePLpgSQL: "plpgsql"}[capture]; lang != want {
			t.Fatalf("%s capture: take_writeset is %s, want %s", capture, lang, want)
		}
		token, err := ReadRecordToken(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		var warnings []string
		cfg, err := pgx.ParseConfig(srv.DSN(db))
		if err != nil {
			t.Fatal(err)
		}
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { warnings = append(warnings, n.Severity+" "+n.Message) }
		s, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		if err := PrepareSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		// Rows of a transaction that committed without its collect.
		mustExec(t, s, `BEGIN; INSERT INTO u VALUES ('left', 1); UPDATE t SET v = 'left' WHERE id = 2; COMMIT`)
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sql := range []string{
			`INSERT INTO u VALUES ('x', 1), ('y', 2)`,
			// About 1.3 MB that does not compress well: stored out of line.
			`UPDATE t SET v = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 40000) g) WHERE id = 1`,
			`DELETE FROM t WHERE id = 2`,
			`UPDATE u SET k = 'z' WHERE k = 'x'`,
			`SAVEPOINT s`, `INSERT INTO u VALUES ('gone', 9)`, `ROLLBACK TO SAVEPOINT s`,
			// Rows out of seq order in the heap (a superuser may write the
			// buffer): taken in seq order, the last change of "q" is (q,2).
			`INSERT INTO pg_temp.tashkent_writeset (seq, tbl, op, key, row)
				VALUES (1000001, 'public.u', 'U', '["q"]', '(q,2)'), (1000000, 'public.u', 'U', '["q"]', '(q,1)')`,
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		ws, err := CollectWritesetWithToken(ctx, tx, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range changes(ws) {
			if len(ch) > 100 {
				ch = fmt.Sprintf("%.60s... (%d bytes)", ch, len(ch))
			}
			got[capture] = append(got[capture], ch)
		}
		if n := bufferLen(t, s); n != 0 {
			t.Errorf("%s capture: %d rows left in the buffer after the collect", capture, n)
		}
		again, err := CollectWritesetWithToken(ctx, tx, token)
		if err != nil || len(again) != 0 {
			t.Errorf("%s capture: a second collect: %v, %v", capture, changes(again), err)
		}
		// A superuser's session (this one) may collect without the token.
		if _, err := CollectWritesetWithToken(ctx, tx, ""); err != nil {
			t.Errorf("%s capture: a superuser's collect without the token: %v", capture, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		eqStrings(t, string(capture)+" capture: warnings", warnings, []string{
			"WARNING tashkent: discarded 2 writeset rows of an earlier transaction that committed without collecting them"})
	}
	// The updated row: "U public.t [1] (1," and ")" around the 1,280,000 characters.
	if len(got[CaptureC]) != 6 || !strings.HasSuffix(got[CaptureC][2], "(1280019 bytes)") ||
		got[CaptureC][5] != `U public.u ["q"] (q,2)` {
		t.Errorf("C collect: %q, want 6 changes, the third with the whole 1,280,000-character value, the last (q,2)", got[CaptureC])
	}
	eqStrings(t, "changes (C, then PL/pgSQL)", got[CaptureC], got[CapturePLpgSQL])
}

// serverForBothCaptures starts a PostgreSQL for a test that compares the
// C capture with the PL/pgSQL one (one database each, databaseCapturedIn),
// and returns it with an admin connection.
func serverForBothCaptures(t *testing.T) (*pgserver.Server, *pgx.Conn) {
	t.Helper()
	requireCCapture(t)
	srv := pgtest.Start(t)
	return srv, pgtest.Connect(t, srv, "postgres")
}

// databaseCapturedIn creates a database of srv for one capture language,
// runs schema in it, installs tashkent with that capture, and returns its
// name and a connection to it.
func databaseCapturedIn(t *testing.T, srv *pgserver.Server, admin *pgx.Conn, capture Capture, schema string) (string, *pgx.Conn) {
	t.Helper()
	db := "db_" + string(capture)
	mustExec(t, admin, "CREATE DATABASE "+db)
	c := pgtest.Connect(t, srv, db)
	mustExec(t, c, schema)
	if err := InstallCapture(tctx(t), c, capture, nil); err != nil {
		t.Fatal(err)
	}
	return db, c
}

// TestCCollectAnswersOddCallsAsPLpgSQL: calls of take_writeset the proxy
// never makes get the PL/pgSQL function's answers from the C one too (its
// result, or its SQLSTATE): several calls in one statement, where each
// sees the previous one's deletes (review h41: the C function failed with
// XX000), and a session that has no buffer, nor a temporary schema at all
// (42P01, which the proxy explains).
func TestCCollectAnswersOddCallsAsPLpgSQL(t *testing.T) {
	srv, admin := serverForBothCaptures(t)
	ctx := tctx(t)
	got := map[Capture][]string{}
	for _, capture := range []Capture{CaptureC, CapturePLpgSQL} {
		db, c := databaseCapturedIn(t, srv, admin, capture, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
		token, err := ReadRecordToken(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		bare := pgtest.Connect(t, srv, db) // no PrepareSession: no buffer
		got[capture] = append(got[capture], answer(ctx, bare, `SELECT * FROM tashkent.take_writeset($1)`, token))
		s := pgtest.Connect(t, srv, db)
		if err := PrepareSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		for _, sql := range []string{
			`SELECT (tashkent.take_writeset($1)).*`,
			`SELECT tashkent.take_writeset($1)::text FROM generate_series(1, 2)`,
		} {
			mustExec(t, s, `BEGIN; INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
			got[capture] = append(got[capture], answer(ctx, s, sql, token))
			mustExec(t, s, `ROLLBACK`)
		}
	}
	if !strings.HasPrefix(got[CaptureC][0], "ERROR 42P01") || !strings.Contains(got[CaptureC][1], "public.t") {
		t.Errorf("C collect: %q, want 42P01 without a buffer, then the rows", got[CaptureC])
	}
	eqStrings(t, "answers (C, then PL/pgSQL)", got[CaptureC], got[CapturePLpgSQL])
}

// answer runs sql with $1 = token and returns its rows as text, or
// "ERROR", the SQLSTATE and the message.
func answer(ctx context.Context, c *pgx.Conn, sql, token string) string {
	rows, err := c.Query(ctx, sql, token)
	var out []string
	for err == nil && rows.Next() {
		var values []any
		if values, err = rows.Values(); err == nil {
			out = append(out, fmt.Sprint(values))
		}
	}
	if err == nil {
		err = rows.Err()
	}
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) {
		return "ERROR " + pe.Code + " " + pe.Message
	} else if err != nil {
		return "ERROR " + err.Error()
	}
	return strings.Join(out, "; ")
}
