package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// simple runs a query string with the simple query protocol, as psql and
// many drivers do, multi-statement strings included.
func simple(t *testing.T, conn *pgx.Conn, sql string) error {
	t.Helper()
	_, err := conn.PgConn().Exec(context.Background(), sql).ReadAll()
	return err
}

// The ways a client can write, and the statements that could derail the
// proxy's own session setup: each write must reach the other replica, each
// refused statement must say why.
func TestSessionStatementsReplicateOrFailClearly(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	a := c.connect(0)
	execSQL(t, a, `CREATE TABLE t (k text PRIMARY KEY, v int)`)
	execSQL(t, a, `CREATE TABLE nopk (v int)`)
	ctx := context.Background()

	steps := []struct {
		name    string
		run     func() error
		code    string // expected SQLSTATE, "" for success
		message string
	}{
		{"multi-statement block", func() error { return simple(t, a, `BEGIN; INSERT INTO t VALUES ('block', 1); COMMIT`) }, "", ""},
		{"implicit multi-statement transaction", func() error {
			return simple(t, a, `INSERT INTO t VALUES ('implicit1', 1); INSERT INTO t VALUES ('implicit2', 2)`)
		}, "", ""},
		{"failed implicit transaction writes nothing", func() error {
			return simple(t, a, `INSERT INTO t VALUES ('never', 1); INSERT INTO t VALUES ('block', 1)`)
		}, "23505", ""},
		{"savepoint rolled back", func() error {
			return simple(t, a, `BEGIN; INSERT INTO t VALUES ('kept', 1); SAVEPOINT s; INSERT INTO t VALUES ('undone', 1); ROLLBACK TO s; COMMIT`)
		}, "", ""},
		{"COPY FROM STDIN", func() error {
			_, err := a.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"k", "v"}, pgx.CopyFromRows([][]any{{"copy1", 1}, {"copy2", 2}}))
			return err
		}, "", ""},
		{"RESET ALL keeps capture", func() error { return simple(t, a, `RESET ALL; INSERT INTO t VALUES ('after-reset', 1)`) }, "", ""},
		{"DISCARD ALL keeps capture", func() error {
			if err := simple(t, a, `DISCARD ALL`); err != nil {
				return err
			}
			return simple(t, a, `INSERT INTO t VALUES ('after-discard', 1)`)
		}, "", ""},
		{"DEALLOCATE ALL keeps wrapping", func() error {
			if err := simple(t, a, `DEALLOCATE ALL`); err != nil {
				return err
			}
			_, err := a.Exec(ctx, `INSERT INTO t VALUES ($1, 1)`, "after-deallocate")
			return err
		}, "", ""},
		{"turning capture off is refused", func() error { return simple(t, a, `SET tashkent.capture = off`) }, "42501", "tashkent"},
		{"table without primary key", func() error { return simple(t, a, `INSERT INTO nopk VALUES (1)`) }, "55000", "primary key"},
		{"two-phase commit", func() error { return simple(t, a, `BEGIN; INSERT INTO t VALUES ('2pc', 1); PREPARE TRANSACTION 'x'`) }, "0A000", "two-phase"},
	}
	for _, st := range steps {
		err := st.run()
		switch {
		case st.code == "" && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.code != "" && sqlState(err) != st.code:
			t.Fatalf("%s: got %v, want SQLSTATE %s", st.name, err, st.code)
		case st.code != "" && !strings.Contains(err.Error(), st.message):
			t.Fatalf("%s: %v does not mention %q", st.name, err, st.message)
		}
		simple(t, a, `ROLLBACK`) // leave no block open, whatever happened
	}
	c.converge(10 * time.Second)
	var keys string
	if err := c.connect(1).QueryRow(ctx, `SELECT string_agg(k, ',' ORDER BY k) FROM t`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	want := "after-deallocate,after-discard,after-reset,block,copy1,copy2,implicit1,implicit2,kept"
	if keys != want {
		t.Fatalf("replica 2 holds %s, want %s", keys, want)
	}
}
