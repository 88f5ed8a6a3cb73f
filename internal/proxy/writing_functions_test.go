package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A function that writes, called by a SELECT outside a transaction block,
// ran in PostgreSQL's implicit transaction: its writes committed on the
// origin only, never certified, and the replicas diverged. The proxy now
// runs a read that calls a user's function as a write (usercode.go), in
// every protocol, so the writes are certified and reach every replica.
func TestWritingFunctionCalledBySelectIsReplicated(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := c.connect(0)
	for _, sql := range []string{
		`CREATE TABLE public.accounts (id int PRIMARY KEY, owner text)`,
		`CREATE FUNCTION public.open_account(p_id int, p_owner text) RETURNS int LANGUAGE sql AS $$
			INSERT INTO public.accounts VALUES (p_id, p_owner) RETURNING p_id $$`,
	} {
		execSQL(t, conn, sql)
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec,
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec}
	for i, mode := range modes {
		var id int
		if err := conn.QueryRow(ctx, `SELECT public.open_account($1, $2)`, mode, i+1, "owner").Scan(&id); err != nil || id != i+1 {
			t.Fatalf("SELECT open_account (%v): %d, %v", mode, id, err)
		}
	}
	// A read of built-ins beside it in one simple query.
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM public.accounts; SELECT public.open_account(9, 'multi')`,
		pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	c.converge(20 * time.Second)
	if n := c.countOn(1, `SELECT count(*) FROM public.accounts`); n != len(modes)+1 {
		t.Fatalf("replica 2 has %d accounts, want %d", n, len(modes)+1)
	}
}
