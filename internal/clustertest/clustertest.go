// Package clustertest runs a tashkent cluster inside a test: N real
// PostgreSQL 15 replicas with the extension loaded (internal/pgext,
// internal/pgtest), an in-process certifier, and an in-process agent per
// replica. Clients connect to the replicas' PostgreSQL servers, as users
// do. Everything is stopped, by PID for the servers, when the test ends.
package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// AgentStartLimit bounds an agent's start, its catch-up included, on a
// busy machine.
const AgentStartLimit = 2 * time.Minute

// Options configures Start.
type Options struct {
	// Mode is the durability placement ("": mw).
	Mode agent.Mode
	// Settings are extra postgresql.conf settings of every replica.
	Settings map[string]string
	// Agent adjusts replica i's agent configuration.
	Agent func(i int, cfg *agent.Config)
	// Certifier adjusts the in-process certifier's configuration.
	Certifier func(cfg *certifier.Config)
}

// Cluster is a running test cluster.
type Cluster struct {
	t         testing.TB
	opts      Options
	Certifier *certifier.Server
	certDir   string
	DBs       []*pgserver.Server
	Agents    []*agent.Agent
	stops     []func()
}

// Start starts the certifier and n replicas, each with its agent, and
// waits until every agent serves.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if opts.Mode == "" {
		opts.Mode = agent.ModeMW
	}
	c := &Cluster{t: t, opts: opts}
	c.certDir = t.TempDir()
	c.listenCertifier("127.0.0.1:0")
	t.Cleanup(func() { c.Certifier.Close() })
	pgOpts := []pgtest.Option{pgtest.WithTashkent(), pgtest.WithSettings(opts.Settings)}
	if opts.Mode == agent.ModeMW {
		pgOpts = append(pgOpts, pgtest.SynchronousCommitOff())
	}
	for range n {
		c.DBs = append(c.DBs, pgtest.Start(t, pgOpts...))
		c.Agents = append(c.Agents, nil)
		c.stops = append(c.stops, nil)
	}
	for i := range n {
		c.StartAgent(i)
	}
	return c
}

func (c *Cluster) listenCertifier(addr string) {
	c.t.Helper()
	cfg := certifier.Config{DataDir: c.certDir, Logger: Logger(c.t, "certifier")}
	if c.opts.Certifier != nil {
		c.opts.Certifier(&cfg)
	}
	srv, err := certifier.Listen(cfg, addr, "")
	if err != nil {
		c.t.Fatal(err)
	}
	c.Certifier = srv
}

// RestartCertifier stops the certifier and starts it again on its data
// directory and address.
func (c *Cluster) RestartCertifier() {
	c.t.Helper()
	addr := c.Certifier.Addr().String()
	c.Certifier.Close()
	c.listenCertifier(addr)
}

// Config is replica i's agent configuration.
func (c *Cluster) Config(i int) agent.Config {
	cfg := agent.Config{
		Name: fmt.Sprintf("replica%d", i+1), Certifier: c.Certifier.Addr().String(), Mode: c.opts.Mode,
		Postgres: c.DBs[i].DSN("postgres"), Logger: Logger(c.t, fmt.Sprintf("agent%d", i+1)),
		ReplicaIndex: i + 1,
	}
	if c.opts.Agent != nil {
		c.opts.Agent(i, &cfg)
	}
	return cfg
}

// StartAgent runs an agent for replica i (in place of a stopped one) and
// waits until it serves.
func (c *Cluster) StartAgent(i int) {
	c.t.Helper()
	a := c.RunAgent(i, c.Config(i))
	select {
	case <-a.Ready():
	case <-time.After(AgentStartLimit):
		st, why := a.State()
		c.t.Fatalf("agent %d did not serve within %v: %s: %s", i+1, AgentStartLimit, st, why)
	}
}

// RunAgent runs an agent for replica i with cfg, without waiting for it.
func (c *Cluster) RunAgent(i int, cfg agent.Config) *agent.Agent {
	c.t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				c.t.Errorf("agent %d: %v", i+1, err)
			}
		case <-time.After(30 * time.Second):
			c.t.Errorf("agent %d did not stop", i+1)
		}
	}
	c.Agents[i], c.stops[i] = a, stop
	c.t.Cleanup(stop)
	return a
}

// StopAgent stops replica i's agent and waits until it has.
func (c *Cluster) StopAgent(i int) { c.stops[i]() }

// Connect opens a superuser connection to replica i, closed when the test
// ends.
func (c *Cluster) Connect(i int) *pgx.Conn {
	c.t.Helper()
	return pgtest.Connect(c.t, c.DBs[i], "postgres")
}

// ConnectAs opens a connection to replica i as role and returns its
// error; a connection made is closed when the test ends. Tests of the
// admission gate use it: superusers (the agent's role) are let in while
// the gate is closed.
func (c *Cluster) ConnectAs(i int, role string) (*pgx.Conn, error) {
	c.t.Helper()
	cfg, err := pgx.ParseConfig(c.DBs[i].DSN("postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.User = role
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, nil
}

// Exec runs sql (one or several statements, in the simple protocol: one
// transaction unless it says BEGIN) in a new superuser session of replica
// i, as a client would, and fails the test on an error. DDL run so is
// replicated: run a schema once, on one replica, then AwaitConverged.
func (c *Cluster) Exec(i int, sql string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DBs[i].DSN("postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		c.t.Fatalf("replica %d: %s: %v", i+1, sql, err)
	}
}

// Rows returns a table's rows on replica i as text, ordered as text,
// separated by spaces: "(1,a) (2,b)".
func (c *Cluster) Rows(i int, table string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DBs[i].DSN("postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT x::text FROM `+table+` AS x ORDER BY 1`)
	if err != nil {
		c.t.Fatalf("replica %d: %v", i+1, err)
	}
	s, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		c.t.Fatalf("replica %d: %v", i+1, err)
	}
	return strings.Join(s, " ")
}

// AwaitState waits until replica i's agent is in state st.
func (c *Cluster) AwaitState(i int, st agent.State, limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got, why := c.Agents[i].State()
		if got == st {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("agent %d is %s (%s), want %s within %v", i+1, got, why, st, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Committed reads replica i's version (tashkent.committed_version()).
func (c *Cluster) Committed(i int) uint64 {
	c.t.Helper()
	v, err := c.committed(i)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

func (c *Cluster) committed(i int) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DBs[i].DSN("postgres"))
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var v int64
	err = conn.QueryRow(ctx, `SELECT tashkent.committed_version()`).Scan(&v)
	return uint64(v), err
}

// AwaitCommitted waits until replica i has committed version v. A replica
// that rewinds failed versions (mode ed) refuses the question for a
// moment, as it refuses any client: 57P03 while it rewinds, 40001 for a
// transaction that read a version that failed; it is asked again.
func (c *Cluster) AwaitCommitted(i int, v uint64, limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got, err := c.committed(i)
		if code := pgcode.Of(err); err != nil && code != pgcode.CannotConnectNow && code != pgcode.SerializationFailure {
			c.t.Fatal(err)
		}
		if err == nil && got >= v {
			return
		}
		if time.Now().After(deadline) {
			st, why := c.Agents[i].State()
			c.t.Fatalf("replica %d has committed version %d, want %d within %v (agent %s: %s)", i+1, got, v, limit, st, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Durable asks the certifier for its durable version.
func (c *Cluster) Durable() uint64 {
	c.t.Helper()
	conn, err := grpc.NewClient(c.Certifier.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	return st.DurableVersion
}

// AwaitConverged waits until every replica has committed every version
// the certifier has made durable, and returns that version.
func (c *Cluster) AwaitConverged(limit time.Duration) uint64 {
	c.t.Helper()
	v := c.Durable()
	for i := range c.DBs {
		c.AwaitCommitted(i, v, limit)
	}
	return v
}

// Logger logs through t.Log, which go test shows for failed tests (and
// with -v), at debug level with -v.
func Logger(t testing.TB, name string) *slog.Logger {
	level := slog.LevelInfo
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(&testWriter{t: t}, &slog.HandlerOptions{Level: level})).With("who", name)
}

// testWriter writes log lines with t.Log until the test has ended (t.Log
// panics afterwards; the lines of a stopping agent are dropped then).
type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if w.done.Load() {
		return len(p), nil
	}
	defer func() {
		if recover() != nil {
			w.done.Store(true)
		}
	}()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
