package replica

import (
	"testing"
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
	library := requireCaptureLibrary(t)
	srv, admin := instance(t, `CREATE TABLE t (id int PRIMARY KEY, v text);
		CREATE TABLE f (x float8 PRIMARY KEY, v int);
		CREATE TABLE audit (id int PRIMARY KEY, n int);
		INSERT INTO audit VALUES (1, 0);
		CREATE TABLE watched (id int PRIMARY KEY);
		CREATE FUNCTION count_watched() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN UPDATE audit SET n = n + 1 WHERE id = 1; RETURN NULL; END $$;
		CREATE TRIGGER count_watched AFTER INSERT ON watched FOR EACH ROW EXECUTE FUNCTION count_watched();`)
	ctx := tctx(t)
	if err := InstallWithCapture(ctx, admin, library); err != nil {
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
