package ddlcapture_test

import (
	"strconv"
	"testing"
)

// A doomed transaction fails with 40001 at its next statement: a query, a
// utility statement, or COMMIT, which then ends the transaction as a
// failed commit does. ROLLBACK always works.
func TestDoomedTransactionFailsAtItsNextStatement(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY)`)
	victim := f.a.Connect("postgres")
	pid := strconv.Itoa(int(victim.PgConn().PID()))
	doom := func() {
		t.Helper()
		if got := scalar[string](t, f.c, `SELECT tashkent.doom(`+pid+`, 1000)`); got != "blocker" {
			t.Fatalf("tashkent.doom: %q", got)
		}
	}
	for _, tc := range []struct{ next, status string }{
		{`SELECT 1`, "E"},
		{`SET work_mem = '8MB'`, "E"},
		{`SAVEPOINT s`, "E"},
		{`COMMIT`, "I"},
	} {
		f.exec(victim, `BEGIN; INSERT INTO t VALUES (1)`)
		doom()
		f.fail(victim, tc.next, "40001")
		if got := string(victim.PgConn().TxStatus()); got != tc.status {
			t.Errorf("after %s failed: transaction status %q, want %q", tc.next, got, tc.status)
		}
		f.exec(victim, `ROLLBACK`)
	}
	f.exec(victim, `BEGIN; INSERT INTO t VALUES (1)`)
	doom()
	f.exec(victim, `ROLLBACK`)
	if scalar[int64](t, f.c, `SELECT count(*) FROM t`) != 0 {
		t.Errorf("a doomed transaction's row was committed")
	}
}
