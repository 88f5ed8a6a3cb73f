package proxy_test

import (
	"context"
	"testing"
	"time"
)

// A preempted transaction whose client prepares its next statement before
// running it (pgbench -M prepared prepares each command the first time, with
// Parse and Sync): the prepare succeeds as in a block that has not failed,
// and the 40001 comes with the statement, which the client can retry. It
// came with the Parse, which pgbench took for a failed PREPARE; the statement
// then met 25P02, and pgbench aborted the client (seen in CI on
// TestPgbenchTPCBOnThreeReplicasInEveryProtocolMode).
func TestPreemptedTransactionCanPrepareAndGets40001FromItsNextStatement(t *testing.T) {
	c, _, tx := holdRowLock(t)
	ctx := context.Background()
	execSQL(t, c.connect(1), `UPDATE accounts SET balance = balance + 1 WHERE id = 1`)
	waitVersion(t, c, 0, c.certifier.Service.DurableVersion(), 3*time.Second)

	if _, err := tx.Prepare(ctx, "next", `SELECT balance FROM accounts WHERE id = $1`); err != nil {
		t.Fatalf("prepare in the preempted transaction: %v, want success", err)
	}
	var balance int
	err := tx.QueryRow(ctx, "next", 1).Scan(&balance)
	if sqlState(err) != "40001" {
		t.Fatalf("the preempted transaction's next statement: %v, want 40001", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	c.converge(10 * time.Second)
}
