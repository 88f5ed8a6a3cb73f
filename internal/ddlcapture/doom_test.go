package ddlcapture_test

import (
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/pgcode"
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
		f.fail(victim, tc.next, pgcode.SerializationFailure)
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

// A doom interrupts the statement its transaction is running (here one
// that sleeps, as one waiting for a row lock does) with 40001, the error a
// client retries.
func TestDoomCancelsTheRunningStatement(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY)`)
	victim := f.a.Connect("postgres")
	pid := strconv.Itoa(int(victim.PgConn().PID()))
	f.exec(victim, `BEGIN; INSERT INTO t VALUES (1)`)
	done := make(chan error, 1)
	go func() { done <- run(victim, `SELECT pg_sleep(30)`) }()
	awaitActive(t, f, pid)
	if got := scalar[string](t, f.c, `SELECT tashkent.doom(`+pid+`, 1000)`); got != "blocker" {
		t.Fatalf("tashkent.doom: %q", got)
	}
	select {
	case err := <-done:
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != pgcode.SerializationFailure {
			t.Fatalf("the doomed statement ended with %v, want SQLSTATE 40001", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the doomed statement was not interrupted")
	}
	f.exec(victim, `ROLLBACK`)
}

// The doom signal can arrive after its transaction already failed at its
// next statement (the agent's backend sends it after marking the doom). It
// must then cancel nothing: not the client's retry, not a later statement.
func TestALateDoomSignalCancelsNothing(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY)`)
	victim := f.a.Connect("postgres")
	pid := int(victim.PgConn().PID())
	f.exec(victim, `BEGIN; INSERT INTO t VALUES (1)`)
	if got := scalar[string](t, f.c, `SELECT tashkent.doom(`+strconv.Itoa(pid)+`, 1000)`); got != "blocker" {
		t.Fatalf("tashkent.doom: %q", got)
	}
	f.fail(victim, `SELECT 1`, pgcode.SerializationFailure)
	f.exec(victim, `ROLLBACK`)
	for _, retry := range []string{`SELECT pg_sleep(1)`, `BEGIN; INSERT INTO t VALUES (2); SELECT pg_sleep(1); COMMIT`} {
		done := make(chan error, 1)
		go func() { done <- run(victim, retry) }()
		awaitActive(t, f, strconv.Itoa(pid))
		if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
			t.Fatalf("signal the backend: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("%s after a late doom signal: %v", retry, err)
		}
	}
	if n := scalar[int64](t, f.c, `SELECT count(*) FROM t`); n != 1 {
		t.Errorf("%d rows, want the retry's one", n)
	}
}

// awaitActive waits until backend pid runs pg_sleep.
func awaitActive(t *testing.T, f *fixture, pid string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for scalar[int64](t, f.c, `SELECT count(*) FROM pg_stat_activity WHERE pid = `+pid+
		` AND state = 'active' AND query LIKE '%pg_sleep%'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backend %s never ran its pg_sleep", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
