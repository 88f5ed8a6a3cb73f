package replica

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	requireCCapture(t)
	srv := pgtest.Start(t)
	admin := pgtest.Connect(t, srv, "postgres")
	ctx := tctx(t)
	got := map[Capture][]string{}
	for _, capture := range []Capture{CaptureC, CapturePLpgSQL} {
		db := "db_" + string(capture)
		mustExec(t, admin, "CREATE DATABASE "+db)
		c := pgtest.Connect(t, srv, db)
		mustExec(t, c, `CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
		if err := InstallCapture(ctx, c, capture, nil); err != nil {
			t.Fatal(err)
		}
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
