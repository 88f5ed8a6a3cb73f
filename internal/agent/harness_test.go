package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// cluster is N real PostgreSQL 15 replicas with the extension, an
// in-process certifier and an in-process agent per replica.
type cluster struct {
	t         testing.TB
	certifier *certifier.Server
	dbs       []*pgserver.Server
	agents    []*agent.Agent
	stops     []func()
}

// startCluster starts the certifier and n replicas (synchronous_commit
// off: mw), each with its agent, serving.
func startCluster(t testing.TB, n int, opts ...func(*agent.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var err error
	c.certifier, err = certifier.Listen(certifier.Config{DataDir: t.TempDir()}, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.certifier.Close() })
	for i := range n {
		c.dbs = append(c.dbs, pgtest.Start(t, pgtest.WithTashkent(), pgtest.SynchronousCommitOff(),
			pgtest.WithSettings(map[string]string{"deadlock_timeout": "5s"})))
		c.agents = append(c.agents, nil)
		c.stops = append(c.stops, nil)
		c.startAgent(i, opts...)
	}
	return c
}

// agentStartLimit bounds an agent's start, its catch-up included, on a
// busy machine.
const agentStartLimit = 2 * time.Minute

// startAgent runs an agent for replica i (in place of a stopped one) and
// waits until it serves.
func (c *cluster) startAgent(i int, opts ...func(*agent.Config)) {
	c.t.Helper()
	a := c.runAgent(i, opts...)
	select {
	case <-a.Ready():
	case <-time.After(agentStartLimit):
		st, why := a.State()
		c.t.Fatalf("agent %d did not serve within %v: %s: %s", i, agentStartLimit, st, why)
	}
}

// runAgent runs an agent for replica i without waiting for it.
func (c *cluster) runAgent(i int, opts ...func(*agent.Config)) *agent.Agent {
	c.t.Helper()
	cfg := agent.Config{
		Name: fmt.Sprintf("replica%d", i+1), Certifier: c.certifier.Addr().String(), Mode: agent.ModeMW,
		Postgres: c.dbs[i].DSN("postgres"), Logger: testLogger(c.t, fmt.Sprintf("agent%d", i+1)),
		ReplicaIndex: i + 1,
	}
	for _, o := range opts {
		o(&cfg)
	}
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
				c.t.Errorf("agent %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			c.t.Errorf("agent %d did not stop", i)
		}
	}
	c.agents[i], c.stops[i] = a, stop
	c.t.Cleanup(stop)
	return a
}

func (c *cluster) stopAgent(i int) { c.stops[i]() }

// testLogger logs through t.Log, which go test shows for failed tests
// (and with -v).
func testLogger(t testing.TB, name string) *slog.Logger {
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

// connect opens a superuser connection to replica i.
func (c *cluster) connect(i int) *pgx.Conn {
	c.t.Helper()
	return pgtest.Connect(c.t, c.dbs[i], "postgres")
}

func (c *cluster) committed(i int) uint64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dbs[i].DSN("postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int64
	if err := conn.QueryRow(ctx, `SELECT tashkent.committed_version()`).Scan(&v); err != nil {
		c.t.Fatal(err)
	}
	return uint64(v)
}

// awaitCommitted waits until replica i has committed version v.
func (c *cluster) awaitCommitted(i int, v uint64, limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := c.committed(i)
		if got >= v {
			return
		}
		if time.Now().After(deadline) {
			st, why := c.agents[i].State()
			c.t.Fatalf("replica %d has committed version %d, want %d within %v (agent %s: %s)", i, got, v, limit, st, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// durable asks the certifier for its durable version.
func (c *cluster) durable() uint64 {
	c.t.Helper()
	conn, err := grpc.NewClient(c.certifier.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
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

// rows returns a table's rows as text, ordered.
func rows(t testing.TB, conn *pgx.Conn, table string) string {
	t.Helper()
	rs, err := conn.Query(context.Background(), `SELECT x::text FROM `+table+` AS x ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(s, " ")
}

// exec runs sql on every replica, as the agents' superuser would outside
// replication (the tests' schema).
func (c *cluster) exec(sql string) {
	c.t.Helper()
	for i := range c.dbs {
		conn := c.connect(i)
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			c.t.Fatalf("replica %d: %s: %v", i, sql, err)
		}
		conn.Close(context.Background())
	}
}

// backend is a simulated backend: it speaks the extension's side of the
// socket protocol (extension/src/channel.c) as a real backend would, but
// commits nothing itself, so the versions it is told to commit stay with
// it until it abandons them or its connection closes.
type backend struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

var simulatedPID atomic.Int32

func init() { simulatedPID.Store(4_000_000) } // above any real PID

// dialBackend connects to agent i's socket and says hello as a session of
// database db.
func (c *cluster) dialBackend(i int, db string) (*backend, wire.Welcome) {
	c.t.Helper()
	nc, err := net.Dial("unix", c.agents[i].Socket())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { nc.Close() })
	b := &backend{t: c.t, nc: nc, r: bufio.NewReader(nc)}
	b.send(wire.Hello{Protocol: wire.ProtocolVersion, PID: simulatedPID.Add(1), Role: wire.RoleSession, Database: db})
	return b, b.read().(wire.Welcome)
}

// session is dialBackend for the replicated database, welcomed.
func (c *cluster) session(i int) *backend {
	c.t.Helper()
	b, w := c.dialBackend(i, "postgres")
	if !w.Accepted {
		c.t.Fatalf("agent %d refused a session: %s", i, w.Text)
	}
	return b
}

func (b *backend) send(m wire.Message) {
	b.t.Helper()
	if _, err := b.nc.Write(wire.Encode(m)); err != nil {
		b.t.Fatal(err)
	}
}

func (b *backend) read() wire.Message {
	b.t.Helper()
	b.nc.SetReadDeadline(time.Now().Add(time.Minute))
	typ, p, err := wire.ReadFrame(b.r, 1<<20)
	if err != nil {
		b.t.Fatal(err)
	}
	m, err := wire.Decode(typ, p)
	if err != nil {
		b.t.Fatal(err)
	}
	return m
}

// certify asks for the certification of ws from start version start.
func (b *backend) certify(start uint64, ws *pb.Writeset) wire.Decision {
	b.t.Helper()
	enc, err := proto.Marshal(ws)
	if err != nil {
		b.t.Fatal(err)
	}
	b.send(wire.Certify{StartVersion: start, Writeset: enc})
	return b.read().(wire.Decision)
}

// commit certifies ws and expects a commit; it returns the version.
func (b *backend) commit(start uint64, ws *pb.Writeset) uint64 {
	b.t.Helper()
	d := b.certify(start, ws)
	if d.Kind != wire.Commit {
		b.t.Fatalf("certification: %+v, want a commit", d)
	}
	return d.Version
}

func (b *backend) abandon(v uint64) { b.send(wire.Abandon{Version: v}) }

func (b *backend) close() { b.nc.Close() }

// closedByAgent reports whether the agent closed the connection.
func (b *backend) closedByAgent(limit time.Duration) bool {
	b.nc.SetReadDeadline(time.Now().Add(limit))
	_, err := b.r.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// upsert is a writeset that writes row (k, v) of table public.t.
func upsert(k int, v string) *pb.Writeset {
	return &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT,
		Key: []byte(fmt.Sprintf("[%d]", k)), Row: []byte(fmt.Sprintf("(%d,%s)", k, v))}}}
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// connectAs connects to srv as role and closes the connection at once; it
// returns the connection's error.
func connectAs(t testing.TB, srv *pgserver.Server, role string) error {
	t.Helper()
	dsn := strings.Replace(srv.DSN("postgres"), "postgres://postgres@", "postgres://"+role+"@", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	conn.Close(ctx)
	return nil
}
