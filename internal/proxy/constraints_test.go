package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A deferred constraint is checked at COMMIT: a transaction that violates
// it fails there, as in PostgreSQL, and nothing of it reaches any replica
// (remote writesets are applied without constraint checks, so it must
// never be certified).
func TestDeferredConstraintViolationFailsAtCommitAndIsNotReplicated(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	a := c.connect(0)
	execSQL(t, a, `CREATE TABLE parent (id int PRIMARY KEY)`)
	execSQL(t, a, `CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)`)
	ctx := context.Background()
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO child VALUES (1, 42)`); err != nil {
		t.Fatalf("the insert itself is allowed (the check is deferred): %v", err)
	}
	if err := tx.Commit(ctx); sqlState(err) != "23503" {
		t.Fatalf("COMMIT of an orphan row: %v, want 23503 foreign_key_violation", err)
	}
	c.converge(10 * time.Second)
	for i := range 2 {
		var n int
		c.direct(i).QueryRow(ctx, `SELECT count(*) FROM child`).Scan(&n)
		if n != 0 {
			t.Fatalf("replica %d holds the orphan row", i+1)
		}
	}
}
