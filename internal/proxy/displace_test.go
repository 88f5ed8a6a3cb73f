package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A certified local transaction can hold a row lock that an earlier
// version needs, when certification did not see the conflict: here a
// SELECT ... FOR UPDATE of a row the transaction does not write (a
// foreign-key check takes the same kind of lock on the parent row). The
// local transaction waits for its turn, behind the earlier version; the
// earlier version waits for the lock. Neither can go on, and the replica
// would stop for good. The local transaction must give way: it is rolled
// back and its writeset applied in its place in the order, like a remote
// one (Tashkent §8.1 soft recovery); its client is told COMMIT, which is
// true.
//
// To get the local transaction certified before the earlier version is
// applied here, a session straight on the database (not through the
// proxy, so the lock watch cannot preempt it) holds up the applier.
func TestCertifiedTransactionHoldingALockAnEarlierVersionNeedsGivesWay(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx := context.Background()
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE audit (id int PRIMARY KEY, note text NOT NULL)`)
	execSQL(t, setup, `INSERT INTO accounts VALUES (1, 100), (2, 100)`)
	c.converge(10 * time.Second)

	// The applier of replica 1 stops at the next remote version (row 2).
	holder := c.direct(0)
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT FROM accounts WHERE id = 2 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	other := c.connect(1)
	execSQL(t, other, `UPDATE accounts SET balance = balance + 1 WHERE id = 2`)

	// The local transaction locks row 1 without writing it.
	local := c.connect(0)
	tx, err := local.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT FROM accounts WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO audit VALUES (1, 'checked account 1')`); err != nil {
		t.Fatal(err)
	}
	// A version before the local transaction's updates row 1.
	execSQL(t, other, `UPDATE accounts SET balance = balance + 10 WHERE id = 1`)

	committed := make(chan error, 1)
	go func() { committed <- tx.Commit(ctx) }()
	// Let the local transaction be certified and wait for its turn, then
	// let the applier go: it reaches row 1, locked by the local transaction.
	time.Sleep(500 * time.Millisecond)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-committed:
		if err != nil {
			t.Fatalf("COMMIT of the certified transaction: %v, want success", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("COMMIT did not return: the certified transaction and the earlier version wait for each other")
	}

	c.converge(10 * time.Second)
	check := c.connect(0)
	var balance1, balance2, audits int
	if err := check.QueryRow(ctx, `SELECT (SELECT balance FROM accounts WHERE id = 1), (SELECT balance FROM accounts WHERE id = 2),
		(SELECT count(*) FROM audit)`).Scan(&balance1, &balance2, &audits); err != nil {
		t.Fatal(err)
	}
	if balance1 != 110 || balance2 != 101 || audits != 1 {
		t.Fatalf("replica 1 holds balances %d, %d and %d audit rows; want 110, 101 and 1", balance1, balance2, audits)
	}
}
