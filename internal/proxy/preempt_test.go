package proxy_test

import (
	"context"

	"github.com/jackc/pgx/v5"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// A local transaction idle in its transaction block holds a row lock; a
// transaction on another replica updates the same row and commits first.
// Applying it must not wait for the local transaction: the local one is
// aborted (it would fail certification anyway) and learns it with 40001.
func TestRemoteWritesetBlockedByIdleLocalTransactionPreemptsIt(t *testing.T) {
	c, local, tx := holdRowLock(t)
	ctx := context.Background()
	// The local transaction now sits idle holding the row lock.
	execSQL(t, c.connect(1), `UPDATE accounts SET balance = balance + 1 WHERE id = 1`)
	target := c.certifier.Service.DurableVersion()
	waitVersion(t, c, 0, target, 3*time.Second)

	_, err := tx.Exec(ctx, `SELECT 1`)
	if sqlState(err) != "40001" {
		t.Fatalf("the preempted transaction's next statement: %v, want 40001", err)
	}
	tx.Rollback(ctx)
	var balance int
	local.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance)
	if balance != 101 {
		t.Fatalf("balance %d, want 101 (the remote update applied, the local one not)", balance)
	}
	c.converge(10 * time.Second)
}

// The same while the local transaction is running a statement: the
// statement is cancelled and the client gets 40001, not 57014.
func TestRemoteWritesetBlockedByBusyLocalTransactionCancelsItWith40001(t *testing.T) {
	c, _, tx := holdRowLock(t)
	ctx := context.Background()
	slow := make(chan error, 1)
	go func() {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(20)`)
		slow <- err
	}()
	time.Sleep(100 * time.Millisecond)
	started := time.Now()
	execSQL(t, c.connect(1), `UPDATE accounts SET balance = balance + 1 WHERE id = 1`)
	waitVersion(t, c, 0, c.certifier.Service.DurableVersion(), 3*time.Second)
	select {
	case err := <-slow:
		if sqlState(err) != "40001" {
			t.Fatalf("the busy local transaction got %v, want 40001", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the busy local transaction was not cancelled")
	}
	t.Logf("remote writeset applied %s after commit despite the local lock", time.Since(started).Round(time.Millisecond))
}

// holdRowLock starts a 2-replica cluster with one account row, and a
// transaction on replica 1 that updated the row and holds its lock.
func holdRowLock(t *testing.T) (*testCluster, *pgx.Conn, pgx.Tx) {
	t.Helper()
	c := startCluster(t, 2, proxy.ModeMW)
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)`)
	execSQL(t, setup, `INSERT INTO accounts VALUES (1, 100)`)
	c.converge(10 * time.Second)
	ctx := context.Background()
	local := c.connect(0)
	tx, err := local.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 10 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	return c, local, tx
}

func waitVersion(t *testing.T, c *testCluster, i int, version uint64, timeout time.Duration) {
	t.Helper()
	conn := c.direct(i)
	deadline := time.Now().Add(timeout)
	for {
		v, err := replica.ReadVersion(context.Background(), conn)
		if err == nil && v >= version {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d at version %d, want %d within %s: the remote writeset is stuck", i+1, v, version, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
