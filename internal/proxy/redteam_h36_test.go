package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// Review h36: two ways a write still committed on the origin only, never
// certified (Tashkent §6.2: every update transaction is certified).
//
//   - A holdable cursor (DECLARE ... WITH HOLD) over a query that calls a
//     writing function: PostgreSQL runs the query to its end inside
//     COMMIT, after the proxy's collect, so the function's rows committed
//     here only, in a block or wrapped alike (observed: 3 rows on replica
//     1, none on replica 2). Refused now (0A000, usercode.go); a holdable
//     cursor over built-ins (Django's iterator() in autocommit) still runs.
//   - A statement that is not valid UTF-8 (client_encoding LATIN1, text
//     with 'é'): it did not parse, and the simple protocol forwarded it for
//     PostgreSQL to report a syntax error; PostgreSQL ran it in its own
//     implicit transaction instead (observed: INSERT ... 'café' on replica
//     1 only). Refused now in both protocols (0A000, textencoding.go).
func TestRedteamH36WritesThatEscapedCertification(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := c.connect(0)
	for _, sql := range []string{
		`CREATE TABLE public.bumps (id int PRIMARY KEY)`,
		`CREATE FUNCTION public.bump() RETURNS int LANGUAGE sql AS $$
			INSERT INTO public.bumps SELECT coalesce(max(id), 0) + 1 FROM public.bumps RETURNING id $$`,
		`CREATE TABLE public.words (id int PRIMARY KEY, w text)`,
	} {
		execSQL(t, conn, sql)
	}
	refused := func(what string, err error, message string) {
		t.Helper()
		if sqlState(err) != "0A000" || !strings.Contains(err.Error(), message) {
			t.Fatalf("%s: %v, want 0A000 %q", what, err, message)
		}
		if conn.PgConn().TxStatus() != 'I' {
			execSQL(t, conn, "ROLLBACK")
		}
	}

	holdable := `DECLARE c CURSOR WITH HOLD FOR SELECT public.bump() FROM generate_series(1, 3)`
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		_, err := conn.Exec(ctx, holdable, mode)
		refused("holdable cursor outside a block", err, "WITH HOLD")
		execSQL(t, conn, "BEGIN")
		_, err = conn.Exec(ctx, holdable, mode)
		refused("holdable cursor in a block", err, "WITH HOLD")
	}
	execSQL(t, conn, "INSERT INTO public.words VALUES (0, 'zero')")
	execSQL(t, conn, "DECLARE builtins CURSOR WITH HOLD FOR SELECT id, w FROM public.words WHERE lower(w) = 'zero'")
	var n int
	if err := conn.QueryRow(ctx, "FETCH ALL FROM builtins", pgx.QueryExecModeSimpleProtocol).Scan(&n, new(string)); err != nil || n != 0 {
		t.Fatalf("a holdable cursor over built-ins: %d, %v", n, err)
	}
	execSQL(t, conn, "CLOSE builtins")

	execSQL(t, conn, "SET client_encoding = 'LATIN1'")
	_, err := conn.PgConn().Exec(ctx, "INSERT INTO public.words VALUES (1, 'caf\xe9')").ReadAll()
	refused("simple query in LATIN1", err, "not valid UTF-8")
	_, err = conn.Exec(ctx, "INSERT INTO public.words VALUES (2, 'na\xefve')", pgx.QueryExecModeExec)
	refused("Parse in LATIN1", err, "not valid UTF-8")
	_, err = conn.PgConn().Exec(ctx, "BEGIN; INSERT INTO public.words VALUES (3, 'd\xe9j\xe0'); COMMIT").ReadAll()
	refused("a block in LATIN1", err, "not valid UTF-8")
	// Outside literals and names the parser does not look at the bytes:
	// a comment in LATIN1 parses, and the statement is replicated.
	execSQL(t, conn, "INSERT INTO public.words VALUES (6, 'comment') -- d\xe9j\xe0")
	if _, err := conn.Exec(ctx, "INSERT INTO public.words VALUES ($1, 'comment') -- d\xe9j\xe0", pgx.QueryExecModeExec, 7); err != nil {
		t.Fatalf("a comment in LATIN1, extended protocol: %v", err)
	}
	execSQL(t, conn, "INSERT INTO public.words VALUES (4, 'ascii')")
	execSQL(t, conn, "SET client_encoding = 'UTF8'")
	execSQL(t, conn, "INSERT INTO public.words VALUES (5, 'café')")

	c.converge(20 * time.Second)
	for i := range 2 {
		if got := c.countOn(i, `SELECT count(*) FROM public.bumps`); got != 0 {
			t.Errorf("replica %d has %d rows the refused cursors' function wrote", i+1, got)
		}
		if got := c.countOn(i, `SELECT count(*) FROM public.words`); got != 5 {
			t.Errorf("replica %d has %d words, want 5 (0, 4, 5, 6, 7)", i+1, got)
		}
	}
}
