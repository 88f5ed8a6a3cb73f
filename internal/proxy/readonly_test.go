package proxy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A transaction in which the proxy saw only reads commits after a check,
// without the collect (readonly.go). The check must catch what the
// statements did not show: a writing function called by a view fails the
// COMMIT with 40001, and the retry is collected, certified and replicated.
// A write pipelined with its COMMIT, row locks without writes, and a
// DISCARD TEMP in the block behave as on the collecting path.
func TestReadOnlyCommitChecksForHiddenWrites(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := c.connect(0)
	for _, sql := range []string{
		`CREATE TABLE public.visits (id int PRIMARY KEY, n int NOT NULL)`,
		`INSERT INTO public.visits VALUES (1, 0)`,
		`CREATE FUNCTION public.count_visit() RETURNS int LANGUAGE sql AS $$
			UPDATE public.visits SET n = n + 1 WHERE id = 1 RETURNING n $$`,
		`CREATE VIEW public.visit_counter AS SELECT public.count_visit() AS n`,
	} {
		execSQL(t, conn, sql)
	}

	// Only reads: commits.
	for _, sql := range []string{`BEGIN`, `SELECT n FROM public.visits`, `SELECT n FROM public.visits WHERE id = 1 FOR UPDATE`, `COMMIT`} {
		execSQL(t, conn, sql)
	}

	// A write the statements do not show.
	execSQL(t, conn, `BEGIN`)
	execSQL(t, conn, `SELECT n FROM public.visit_counter`)
	_, err := conn.Exec(ctx, `COMMIT`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" || !strings.Contains(pgErr.Message, "saw only as reads") {
		t.Fatalf("COMMIT of a hidden write: %v, want 40001", err)
	}
	if conn.PgConn().TxStatus() != 'I' {
		t.Fatalf("after the refused COMMIT the session is in status %c", conn.PgConn().TxStatus())
	}
	if n := c.countOn(0, `SELECT n FROM public.visits WHERE id = 1`); n != 0 {
		t.Fatalf("the refused transaction's write stayed on replica 1: n = %d", n)
	}
	// The retry is collected and certified.
	for _, sql := range []string{`BEGIN`, `SELECT n FROM public.visit_counter`, `COMMIT`} {
		execSQL(t, conn, sql)
	}

	// A write pipelined with its COMMIT, in one extended-protocol batch.
	other := c.connect(0)
	batch := &pgx.Batch{}
	batch.Queue(`BEGIN`)
	batch.Queue(`UPDATE public.visits SET n = n + 10 WHERE id = 1`)
	batch.Queue(`COMMIT`)
	if err := other.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatalf("a write and its COMMIT in one batch: %v", err)
	}

	// DISCARD TEMP in a block that only read.
	execSQL(t, other, `BEGIN`)
	execSQL(t, other, `DISCARD TEMP`)
	if _, err := other.Exec(ctx, `COMMIT`); sqlState(err) != "0A000" || !strings.Contains(err.Error(), "DISCARD TEMP inside a transaction block") {
		t.Fatalf("COMMIT after DISCARD TEMP: %v, want 0A000", err)
	}
	execSQL(t, other, `UPDATE public.visits SET n = n + 100 WHERE id = 1`)

	c.converge(20 * time.Second)
	if n := c.countOn(1, `SELECT n FROM public.visits WHERE id = 1`); n != 111 {
		t.Fatalf("replica 2 has n = %d, want 111 (the retry's 1, the batch's 10, the last 100)", n)
	}
}
