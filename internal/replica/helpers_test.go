package replica

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// cluster is servers with the extension and no certifier: each server's
// stand-in agent (agenttest) commits every writeset a session certifies
// there with the next version of one log the servers share, and a test
// applies the log's entries to the other servers through an Applier on
// their apply connections, as the agent does. A session may commit on a
// server only while that server holds every version of the log.
type cluster struct {
	t     testing.TB
	nodes []*node
	log   []*certifierpb.LogEntry
}

// node is one server of a cluster.
type node struct {
	agent   *agenttest.Agent
	srv     *pgserver.Server
	session *pgx.Conn // a client's session: what it writes is certified
	apply   *pgx.Conn // a superuser's connection registered as the applier
	applier *Applier  // catchUp's
}

// newCluster starts n servers.
func newCluster(t testing.TB, n int, opts ...pgtest.Option) *cluster {
	t.Helper()
	c := &cluster{t: t}
	for range n {
		a := agenttest.Start(t, opts...)
		nd := &node{agent: a, srv: a.Server, session: a.Connect("postgres"), apply: a.Connect("postgres"), applier: NewApplier()}
		a.RegisterApplier(nd.apply)
		c.nodes = append(c.nodes, nd)
	}
	return c
}

// newPair is a cluster of two servers: schema (if any) committed on the
// first, as a client's DDL, and applied on the second. It returns the
// cluster and the two nodes.
func newPair(t testing.TB, schema string) (*cluster, *node, *node) {
	t.Helper()
	c := newCluster(t, 2)
	if schema != "" {
		c.commit(0, schema)
		c.catchUp(1)
	}
	return c, c.nodes[0], c.nodes[1]
}

// commit runs sql in node i's session: see commitOn.
func (c *cluster) commit(i int, sql string) []*certifierpb.LogEntry {
	c.t.Helper()
	return c.commitOn(i, c.nodes[i].session, sql)
}

// commitOn runs sql (one or several statements in the simple protocol:
// one transaction unless it says BEGIN) on conn, a client's session of
// node i, and returns the log entries of the writesets it committed, each
// with its version; they are appended to the log.
func (c *cluster) commitOn(i int, conn *pgx.Conn, sql string) []*certifierpb.LogEntry {
	c.t.Helper()
	nd := c.nodes[i]
	if v := c.version(i); v != uint64(len(c.log)) {
		c.t.Fatalf("server %d holds version %d of a log of %d: it cannot commit the next", i+1, v, len(c.log))
	}
	nd.agent.SetNext(uint64(len(c.log)) + 1)
	before := len(nd.agent.Requests())
	mustExec(c.t, conn, sql)
	var out []*certifierpb.LogEntry
	for _, r := range nd.agent.Requests()[before:] {
		if r.Decision.Kind != wire.Commit {
			continue
		}
		e := &certifierpb.LogEntry{Version: r.Decision.Version, Writeset: r.Writeset}
		if e.Version != uint64(len(c.log))+1 {
			c.t.Fatalf("server %d committed version %d, the log's next is %d", i+1, e.Version, len(c.log)+1)
		}
		c.log = append(c.log, e)
		out = append(out, e)
	}
	return out
}

// catchUp applies, in one Apply of node i's applier on its apply
// connection, the versions of the log that node i does not hold.
func (c *cluster) catchUp(i int) {
	c.t.Helper()
	nd := c.nodes[i]
	v := c.version(i)
	if v >= uint64(len(c.log)) {
		return
	}
	if err := nd.applier.Apply(tctx(c.t), nd.apply, c.log[v:]); err != nil {
		c.t.Fatalf("server %d: apply versions %d..%d: %v", i+1, v+1, len(c.log), err)
	}
}

// version is node i's version (ReadVersion).
func (c *cluster) version(i int) uint64 {
	c.t.Helper()
	v, err := ReadVersion(tctx(c.t), c.nodes[i].apply)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// local runs sql on node i with tashkent.maintenance on: this server's
// own change, neither certified nor captured (a test's local set-up).
func (c *cluster) local(i int, sql string) {
	c.t.Helper()
	conn := pgtest.Connect(c.t, c.nodes[i].srv, "postgres")
	mustExec(c.t, conn, `SET tashkent.maintenance = on`)
	mustExec(c.t, conn, sql)
	conn.Close(context.Background())
}

// connect opens a superuser's connection to the node, closed when the
// test ends.
func (nd *node) connect(t testing.TB) *pgx.Conn {
	t.Helper()
	return pgtest.Connect(t, nd.srv, "postgres")
}

// applierConn opens a connection to the node and registers it as the
// applier (the stand-in accepts the registration of the last one named).
func (nd *node) applierConn(t testing.TB) *pgx.Conn {
	t.Helper()
	conn := nd.connect(t)
	nd.agent.RegisterApplier(conn)
	return conn
}

// applyUntilCancelled applies batch on conn, a registered applier
// connection, whose first version does not follow the node's: it waits
// for its turn, which never comes, until admin cancels it. It returns
// Apply's error.
func applyUntilCancelled(t testing.TB, admin, conn *pgx.Conn, ap *Applier, batch []*certifierpb.LogEntry) error {
	t.Helper()
	pid := int32(conn.PgConn().PID())
	done := make(chan error, 1)
	go func() { done <- ap.Apply(context.Background(), conn, batch) }()
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int64
		err := admin.QueryRow(tctx(t), `SELECT waiting_for FROM tashkent.backends() WHERE pid = $1 AND state = 'applying'`, pid).Scan(&waiting)
		if err == nil && waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the applier does not wait for its turn: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := admin.Exec(tctx(t), `SELECT pg_cancel_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the cancelled apply did not return")
		return nil
	}
}

func mustExec(t testing.TB, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.PgConn().Exec(tctx(t), sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
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

// ops returns the operations of a writeset's changes, "<op> <table>".
func ops(e *certifierpb.LogEntry) []string {
	var out []string
	for _, c := range e.GetWriteset().GetChanges() {
		out = append(out, strings.TrimPrefix(c.GetOp().String(), "OP_")+" "+c.GetTable())
	}
	return out
}
