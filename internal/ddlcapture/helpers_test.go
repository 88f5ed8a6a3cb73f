package ddlcapture_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
)

// fixture is a server with the extension, a superuser's connection, and
// the certifications already looked at.
type fixture struct {
	t    *testing.T
	a    *agenttest.Agent
	c    *pgx.Conn
	seen int
}

func start(t *testing.T) *fixture {
	t.Helper()
	a := agenttest.Start(t)
	return &fixture{t: t, a: a, c: a.Connect("postgres")}
}

// exec runs sql, one or several statements, in the simple protocol (as a
// client's script does), and fails the test on an error.
func (f *fixture) exec(c *pgx.Conn, sql string) {
	f.t.Helper()
	if err := run(c, sql); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func run(c *pgx.Conn, sql string) error {
	_, err := c.PgConn().Exec(context.Background(), sql).ReadAll()
	return err
}

// fail runs sql and checks that it fails with SQLSTATE code.
func (f *fixture) fail(c *pgx.Conn, sql, code string) *pgconn.PgError {
	f.t.Helper()
	err := run(c, sql)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		f.t.Errorf("%s: got %v, want SQLSTATE %s", sql, err, code)
		return &pgconn.PgError{}
	}
	return pe
}

// certified returns the certifications asked for since the last call.
func (f *fixture) certified() []agenttest.Request {
	all := f.a.Requests()
	got := all[f.seen:]
	f.seen = len(all)
	return got
}

// captured returns the DDL texts certified since the last call, in order.
func (f *fixture) captured() []string {
	var texts []string
	for _, r := range f.certified() {
		texts = append(texts, ddlTexts(r)...)
	}
	return texts
}

func ddlTexts(r agenttest.Request) []string {
	var texts []string
	for _, ch := range r.Writeset.GetChanges() {
		if ch.GetOp() == pb.Op_OP_DDL {
			texts = append(texts, string(ch.GetRow()))
		}
	}
	return texts
}

// expectCaptured checks the DDL texts certified since the last look.
func (f *fixture) expectCaptured(what string, want ...string) {
	f.t.Helper()
	if got := f.captured(); !slices.Equal(got, want) {
		f.t.Errorf("%s: captured %q, want %q", what, got, want)
	}
}

// scalar reads one value.
func scalar[T any](t *testing.T, c *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := c.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// connectAs opens a connection to database postgres as role, closed when
// the test ends (pgtest's servers trust local connections).
func connectAs(t *testing.T, f *fixture, role string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(f.a.Server.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
