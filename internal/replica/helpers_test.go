package replica

import (
	"context"
	"errors"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// instance starts a PostgreSQL, runs schema (if any) and then Install, and
// returns the server and an admin connection.
func instance(t testing.TB, schema string, opts ...pgtest.Option) (*pgserver.Server, *pgx.Conn) {
	t.Helper()
	srv := pgtest.Start(t, opts...)
	conn := pgtest.Connect(t, srv, "postgres")
	if schema != "" {
		mustExec(t, conn, schema)
	}
	if err := Install(tctx(t), conn); err != nil {
		t.Fatal(err)
	}
	return srv, conn
}

// applyInstance starts a PostgreSQL with the tashkent extension and a stand-in
// for its agent (agenttest), runs schema (if any), and returns the server
// and an admin connection registered as the agent's applier: what Apply
// needs. The extension reserves the tashkent.* settings, so such an instance
// cannot also run Install's capture.
func applyInstance(t testing.TB, schema string, opts ...pgtest.Option) (*pgserver.Server, *pgx.Conn) {
	t.Helper()
	a := agenttest.Start(t, opts...)
	conn := a.Connect("postgres")
	if schema != "" {
		mustExec(t, conn, schema)
	}
	a.RegisterApplier(conn)
	agents.Store(a.Server, a)
	return a.Server, conn
}

// agents holds the stand-in agent of each applyInstance.
var agents sync.Map // *pgserver.Server -> *agenttest.Agent

// registerApplier makes c, a connection to srv (an applyInstance), one of the
// backends that may apply versions.
func registerApplier(t testing.TB, srv *pgserver.Server, c *pgx.Conn) {
	t.Helper()
	a, ok := agents.Load(srv)
	if !ok {
		t.Fatal("registerApplier: not a server of applyInstance()")
	}
	a.(*agenttest.Agent).RegisterApplier(c)
}

// session opens a connection that went through PrepareSession, as the
// proxy's backend connections do.
func session(t testing.TB, srv *pgserver.Server) *pgx.Conn {
	t.Helper()
	c := pgtest.Connect(t, srv, "postgres")
	if err := PrepareSession(tctx(t), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func mustExec(t testing.TB, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.PgConn().Exec(tctx(t), sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// committer returns a function that runs sql with commitLocal on s as the
// next version, 1, 2, ...
func committer(t testing.TB, s *pgx.Conn) func(sql string) *certifierpb.LogEntry {
	v := uint64(0)
	return func(sql string) *certifierpb.LogEntry {
		t.Helper()
		v++
		return commitLocal(t, s, v, sql)
	}
}

// commitLocal runs sql in one transaction on a prepared session, collects
// its writeset and commits. It returns the writeset as the log entry of
// version v, for Apply on another instance.
func commitLocal(t testing.TB, c *pgx.Conn, v uint64, sql string) *certifierpb.LogEntry {
	t.Helper()
	return commitRecorded(t, c, v, sql, "", func(context.Context, pgx.Tx) error { return nil })
}

// commitRecorded is commitLocal with version v recorded by record, and
// the writeset collected with the record token when token is not empty
// (a session of any role, as the proxy collects; the buffer is sealed).
func commitRecorded(t testing.TB, c *pgx.Conn, v uint64, sql, token string, record func(context.Context, pgx.Tx) error) *certifierpb.LogEntry {
	t.Helper()
	ctx := tctx(t)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := c.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	collect := CollectWriteset
	if token != "" {
		collect = func(ctx context.Context, q Querier) ([]*certifierpb.Change, error) {
			return CollectWritesetWithToken(ctx, q, token)
		}
	}
	ws, err := collect(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if err := record(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return &certifierpb.LogEntry{Version: v, Writeset: &certifierpb.Writeset{Changes: ws}}
}

// commitAsClient is commitRecorded as the proxy commits in a client's
// session of any role: the collect and the version's record with the
// database's record token.
func commitAsClient(t testing.TB, c *pgx.Conn, v uint64, sql, token string) *certifierpb.LogEntry {
	t.Helper()
	return commitRecorded(t, c, v, sql, token, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, RecordVersionSQL, int64(v), token)
		return err
	})
}

func pgErr(t testing.TB, err error) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("want a PostgreSQL error, got %v", err)
	}
	return pe
}

func checksum(t testing.TB, c *pgx.Conn) map[string]string {
	t.Helper()
	m, err := Checksum(tctx(t), c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameChecksums(t testing.TB, a, b map[string]string) {
	t.Helper()
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if a[k] != b[k] {
			t.Errorf("table %s: checksum %q on A, %q on B", k, a[k], b[k])
		}
	}
}

// queryStrings runs a query of one text column and returns its values.
func queryStrings(t testing.TB, c *pgx.Conn, sql string, args ...any) []string {
	t.Helper()
	rows, err := c.Query(tctx(t), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dump returns a table's rows as text, ordered, for readable failures.
func dump(t testing.TB, c *pgx.Conn, table string) string {
	t.Helper()
	return strings.Join(queryStrings(t, c, "SELECT x::text FROM "+table+" AS x ORDER BY 1"), "\n")
}

func bufferLen(t testing.TB, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(tctx(t), "SELECT count(*) FROM pg_temp.tashkent_writeset").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// triggers returns "name:args" of the tashkent triggers on table.
func triggers(t testing.TB, c *pgx.Conn, table string) []string {
	t.Helper()
	return queryStrings(t, c, `SELECT tgname || ':' || replace(encode(tgargs, 'escape'), '\000', ',')
		FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE 'tashkent%' ORDER BY tgname`, table)
}

func change(c *certifierpb.Change) string {
	switch c.GetOp() {
	case certifierpb.Op_OP_UPSERT:
		return "U " + c.GetTable() + " " + string(c.GetKey()) + " " + string(c.GetRow())
	case certifierpb.Op_OP_DELETE:
		return "D " + c.GetTable() + " " + string(c.GetKey())
	case certifierpb.Op_OP_TRUNCATE:
		return "T " + c.GetTable()
	case certifierpb.Op_OP_DDL:
		return "DDL " + string(c.GetRow())
	case certifierpb.Op_OP_UNIQUE_KEY:
		return "K " + c.GetTable() + " " + string(c.GetKey())
	case certifierpb.Op_OP_REFERENCE:
		return "R " + c.GetTable() + " " + string(c.GetKey())
	}
	return "? " + c.String()
}

func changes(cs []*certifierpb.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = change(c)
	}
	return out
}

func eqStrings(t testing.TB, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// requireCCapture checks that the C capture can be built here. Where it
// cannot, the test fails if TASHKENT_REQUIRE_C_CAPTURE is set (make test
// sets it: CI must test the C capture) and is skipped otherwise, saying
// why.
func requireCCapture(t testing.TB) {
	t.Helper()
	if _, err := captureLibrary(); err != nil {
		if os.Getenv("TASHKENT_REQUIRE_C_CAPTURE") != "" {
			t.Fatalf("the C capture cannot be built: %v", err)
		}
		t.Skipf("the C capture cannot be built: %v", err)
	}
}
