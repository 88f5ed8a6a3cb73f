//go:build review

package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// Review (session 3, f186330): a certified transaction that gives way is
// rolled back on its replica and only its writeset is applied in its
// place, yet its client is told COMMIT. What the transaction did besides
// its writeset (rows of a temporary table, a SET of a session variable) is
// rolled back with it: the client was told COMMIT for something that did
// not commit. Same set-up as
// TestCertifiedTransactionHoldingALockAnEarlierVersionNeedsGivesWay.
func TestReviewGivingWayLosesWhatIsNotInTheWriteset(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx := context.Background()
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE audit (id int PRIMARY KEY, note text NOT NULL)`)
	execSQL(t, setup, `INSERT INTO accounts VALUES (1, 100), (2, 100)`)
	c.converge(10 * time.Second)

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

	local := c.connect(0)
	execSQL(t, local, `CREATE TEMPORARY TABLE scratch (id int PRIMARY KEY)`)
	tx, err := local.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT FROM accounts WHERE id = 1 FOR UPDATE`,
		`INSERT INTO audit VALUES (1, 'checked account 1')`,
		`INSERT INTO scratch VALUES (1)`,
		`SET review.marker = 'set in the committed transaction'`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	execSQL(t, other, `UPDATE accounts SET balance = balance + 10 WHERE id = 1`)

	committed := make(chan error, 1)
	go func() { committed <- tx.Commit(ctx) }()
	time.Sleep(500 * time.Millisecond)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-committed:
		if err != nil {
			t.Fatalf("COMMIT: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("COMMIT did not return")
	}
	c.converge(10 * time.Second)
	var audits, scratch int
	var marker string
	if err := local.QueryRow(ctx, `SELECT (SELECT count(*) FROM audit), (SELECT count(*) FROM scratch),
		coalesce(current_setting('review.marker', true), '')`).Scan(&audits, &scratch, &marker); err != nil {
		t.Fatal(err)
	}
	t.Logf("after COMMIT succeeded: audit rows %d, temporary-table rows %d, review.marker %q", audits, scratch, marker)
	if scratch != 1 || marker == "" {
		t.Errorf("the client was told COMMIT, but the temporary-table insert (%d rows, want 1) and/or the SET (%q) were rolled back", scratch, marker)
	}
}
