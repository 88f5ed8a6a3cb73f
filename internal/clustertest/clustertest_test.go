package clustertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// The whole path with real backends: DDL and writes on one replica reach
// the other in the same order, and two replicas' concurrent updates of
// one row commit exactly one.
func TestWritesOnEveryReplicaReachTheOthers(t *testing.T) {
	ctx := context.Background()
	c := clustertest.Start(t, 2, clustertest.Options{})
	r1, r2 := c.Connect(0), c.Connect(1)
	if _, err := r1.Exec(ctx, `CREATE TABLE t (k int PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	c.AwaitConverged(30 * time.Second)
	if _, err := r1.Exec(ctx, `INSERT INTO t VALUES (1, 'one')`); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Exec(ctx, `INSERT INTO t VALUES (2, 'two')`); err != nil {
		t.Fatal(err)
	}
	c.AwaitConverged(30 * time.Second)
	for i, conn := range []*pgx.Conn{r1, r2} {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 2 {
			t.Errorf("replica %d holds %d rows (%v), want 2", i+1, n, err)
		}
	}

	tx1, err := r1.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx2, err := r2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tx := range []pgx.Tx{tx1, tx2} {
		if _, err := tx.Exec(ctx, `UPDATE t SET v = v || '!' WHERE k = 1`); err != nil {
			t.Fatal(err)
		}
	}
	err1, err2 := tx1.Commit(ctx), tx2.Commit(ctx)
	var pe *pgconn.PgError
	switch {
	case err1 == nil && err2 == nil:
		t.Fatal("both concurrent updates of one row committed")
	case err1 != nil && err2 != nil:
		t.Fatalf("neither update committed: %v; %v", err1, err2)
	case !errors.As(errors.Join(err1, err2), &pe) || pe.Code != pgcode.SerializationFailure:
		t.Fatalf("the refused update got %v, want SQLSTATE 40001", errors.Join(err1, err2))
	}
	c.AwaitConverged(30 * time.Second)
	for i, conn := range []*pgx.Conn{r1, r2} {
		var v string
		if err := conn.QueryRow(ctx, `SELECT v FROM t WHERE k = 1`).Scan(&v); err != nil || v != "one!" {
			t.Errorf("replica %d: row 1 is %q (%v), want one!", i+1, v, err)
		}
	}
}
