package capture_test

import (
	"context"
	"testing"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// A write tashkent cannot replicate is refused: beyond the writeset
// limits (54000).
func TestRefusals(t *testing.T) {
	f := start(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)

	f.exec(f.conn, `SET tashkent.writeset_max_rows = 3`)
	pe := f.fails(`INSERT INTO t SELECT g, 'x' FROM generate_series(1, 4) AS g`, pgcode.ProgramLimitExceeded)
	if pe.Message != "the transaction's writeset exceeds tashkent.writeset_max_rows (3 row changes)" {
		t.Errorf("limit: %q", pe.Message)
	}
	// Rows a rolled-back savepoint wrote do not count.
	f.expect(`BEGIN; SAVEPOINT a; INSERT INTO t VALUES (1, 'a'), (2, 'b'); ROLLBACK TO a;
		INSERT INTO t VALUES (3, 'c'), (4, 'd'), (5, 'e'); COMMIT`,
		`UPSERT public.t [3] (3,c)`, `UPSERT public.t [4] (4,d)`, `UPSERT public.t [5] (5,e)`)
	f.exec(f.conn, `RESET tashkent.writeset_max_rows; SET tashkent.writeset_max_bytes = 2`)
	pe = f.fails(`INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(10, 12) AS g`, pgcode.ProgramLimitExceeded)
	if pe.Message != "the transaction's writeset exceeds tashkent.writeset_max_bytes (2 kB)" {
		t.Errorf("limit: %q", pe.Message)
	}
	f.exec(f.conn, `INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(10, 11) AS g`)
}

// Transactions that change no replicated row certify nothing; the
// agent's applier and tashkent.maintenance are not captured; a session in
// session_replication_role = replica still is (the triggers are ALWAYS).
func TestWhatIsCaptured(t *testing.T) {
	ctx := context.Background()
	f := start(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`, `INSERT INTO t VALUES (1, 'a')`)
	for _, sql := range []string{
		`SELECT * FROM t`,
		`BEGIN; SELECT * FROM t FOR UPDATE; COMMIT`,
		`BEGIN READ ONLY; SELECT count(*) FROM t; COMMIT`,
		`UPDATE t SET v = 'x' WHERE id = 42`,
		`CREATE TEMP TABLE tt (id int PRIMARY KEY); INSERT INTO tt VALUES (1); UPDATE tt SET id = 2; DELETE FROM tt; TRUNCATE tt`,
		`SET tashkent.maintenance = on; INSERT INTO t VALUES (2, 'm'); RESET tashkent.maintenance`,
	} {
		if ws := f.writesets(f.conn, sql); len(ws) != 0 {
			t.Errorf("%s certified %q", sql, ws)
		}
	}
	if got := f.query(f.conn, `SELECT count(*)::text FROM pg_trigger WHERE tgrelid = 'tt'::regclass`); got[0] != "0" {
		t.Errorf("a temporary table has %s triggers", got[0])
	}

	f.expect(`SET session_replication_role = replica; UPDATE t SET v = 'r' WHERE id = 1; RESET session_replication_role`,
		`UPSERT public.t [1] (1,r) keeps`)

	apply := f.agent.Connect("postgres")
	f.agent.RegisterApplier(apply)
	var next int64
	if err := apply.QueryRow(ctx, `SELECT tashkent.committed_version() + 1`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	before := len(f.agent.Requests())
	f.exec(apply, `BEGIN; SELECT tashkent.apply_versions(`+itoa(next)+`, `+itoa(next)+`); INSERT INTO t VALUES (3, 'remote'); UPDATE t SET v = 'remote' WHERE id = 1; COMMIT`)
	if n := len(f.agent.Requests()) - before; n != 0 {
		t.Errorf("the applier's writes were certified (%d writesets)", n)
	}
	if got := f.query(f.conn, `SELECT string_agg(t::text, ' ' ORDER BY id) FROM t`); got[0] != "(1,remote) (2,m) (3,remote)" {
		t.Errorf("table holds %s", got[0])
	}
}
