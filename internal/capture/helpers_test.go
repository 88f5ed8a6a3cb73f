package capture_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// fixture is a server with the extension, the agent's stand-in and a
// superuser's connection to database postgres.
type fixture struct {
	t     *testing.T
	agent *agenttest.Agent
	conn  *pgx.Conn
}

// start starts a fixture and runs setup, each statement in its own
// transaction.
func start(t *testing.T, setup ...string) *fixture {
	t.Helper()
	a := agenttest.Start(t)
	f := &fixture{t: t, agent: a, conn: a.Connect("postgres")}
	for _, sql := range setup {
		f.exec(f.conn, sql)
	}
	return f
}

// applyTarget starts a second server with the extension whose tables are
// made by schema, in maintenance (its own, at version 0), and returns a
// connection registered as its applier: where replica.Applier applies the
// writesets the fixture's server certified, numbered from 1.
func applyTarget(t *testing.T, schema ...string) *pgx.Conn {
	t.Helper()
	b := agenttest.Start(t)
	setup := b.Connect("postgres")
	if _, err := setup.Exec(context.Background(), `SET tashkent.maintenance = on`); err != nil {
		t.Fatal(err)
	}
	for _, sql := range schema {
		if _, err := setup.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	setup.Close(context.Background())
	conn := b.Connect("postgres")
	b.RegisterApplier(conn)
	return conn
}

// exec runs sql on conn with the simple query protocol: statements
// separated by semicolons run as one transaction unless they say BEGIN.
func (f *fixture) exec(conn *pgx.Conn, sql string) {
	f.t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// writesets runs sql on conn and returns the writesets certified while it
// ran, rendered.
func (f *fixture) writesets(conn *pgx.Conn, sql string) [][]string {
	f.t.Helper()
	before := len(f.agent.Requests())
	f.exec(conn, sql)
	var out [][]string
	for _, r := range f.agent.Requests()[before:] {
		out = append(out, render(r.Writeset))
	}
	return out
}

// writeset runs sql on the fixture's connection and returns the one
// writeset it certified, rendered.
func (f *fixture) writeset(sql string) []string {
	f.t.Helper()
	return f.writesetOn(f.conn, sql)
}

func (f *fixture) writesetOn(conn *pgx.Conn, sql string) []string {
	f.t.Helper()
	ws := f.writesets(conn, sql)
	if len(ws) != 1 {
		f.t.Fatalf("%s: certified %d writesets, want 1: %q", sql, len(ws), ws)
	}
	return ws[0]
}

// expect checks a rendered writeset.
func (f *fixture) expect(sql string, want ...string) {
	f.t.Helper()
	if got := f.writeset(sql); !slices.Equal(got, want) {
		f.t.Errorf("%s:\n got  %s\n want %s", sql, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

// query returns the first column of every row of sql, as text.
func (f *fixture) query(conn *pgx.Conn, sql string) []string {
	f.t.Helper()
	rows, err := conn.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// render writes a writeset one change a line: the op without OP_, the
// table, the key and the row, and "keeps" for keeps_row.
func render(ws *pb.Writeset) []string {
	var out []string
	for _, c := range ws.GetChanges() {
		s := strings.TrimPrefix(c.GetOp().String(), "OP_")
		if c.GetTable() != "" {
			s += " " + c.GetTable()
		}
		if len(c.GetKey()) > 0 {
			s += " " + string(c.GetKey())
		}
		if len(c.GetRow()) > 0 {
			s += " " + string(c.GetRow())
		}
		if c.GetKeepsRow() {
			s += " keeps"
		}
		out = append(out, s)
	}
	return out
}

// fails runs sql and checks that it fails with SQLSTATE code, and that
// nothing was certified.
func (f *fixture) fails(sql, code string) *pgconn.PgError {
	f.t.Helper()
	before := len(f.agent.Requests())
	_, err := f.conn.Exec(context.Background(), sql)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		f.t.Fatalf("%s: %v, want SQLSTATE %s", sql, err, code)
	}
	if n := len(f.agent.Requests()) - before; n != 0 {
		f.t.Errorf("%s failed but certified %d writesets", sql, n)
	}
	if f.conn.PgConn().TxStatus() != 'I' {
		f.exec(f.conn, "ROLLBACK")
	}
	return pe
}

// logEntries runs sql on conn and appends the writesets it certified to
// entries, as log entries numbered on from the last.
func (f *fixture) logEntries(entries []*pb.LogEntry, conn *pgx.Conn, sql string) []*pb.LogEntry {
	f.t.Helper()
	before := len(f.agent.Requests())
	f.exec(conn, sql)
	for _, r := range f.agent.Requests()[before:] {
		entries = append(entries, &pb.LogEntry{Version: uint64(len(entries) + 1), Writeset: r.Writeset})
	}
	return entries
}

// applyAll applies entries, one version at a time, on conn (an applier's
// connection, applyTarget) with one Applier, which it returns.
func applyAll(t *testing.T, conn *pgx.Conn, entries []*pb.LogEntry) *replica.Applier {
	t.Helper()
	applier := replica.NewApplier()
	for _, e := range entries {
		if err := applier.Apply(context.Background(), conn, []*pb.LogEntry{e}); err != nil {
			t.Fatalf("version %d (%q): %v", e.Version, render(e.Writeset), err)
		}
	}
	return applier
}

// sameRows checks that the tables hold the same rows on the fixture's
// server and on b, compared as text under pinned print settings.
func (f *fixture) sameRows(b *pgx.Conn, tables ...string) {
	f.t.Helper()
	const pin = `SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres';
		SET bytea_output = 'hex'; SET extra_float_digits = 1`
	f.exec(f.conn, pin)
	f.exec(b, pin)
	for _, table := range tables {
		sql := `SELECT '` + table + `: ' || coalesce(string_agg(x::text, ' | ' ORDER BY x::text), '') FROM ` + table + ` AS x`
		if got, want := f.query(b, sql), f.query(f.conn, sql); !slices.Equal(got, want) {
			f.t.Errorf("after apply:\n B %q\n A %q", got, want)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
