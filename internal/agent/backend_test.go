package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// Most tests drive writes through real sessions on the replicas. The
// simulated backend is for the tests that must control the socket
// protocol itself: a version abandoned, a socket closed between the
// decision and the commit, a hello the agent must refuse.

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
func dialBackend(t testing.TB, c *clustertest.Cluster, i int, db string) (*backend, wire.Welcome) {
	t.Helper()
	nc, err := net.Dial("unix", c.Agents[i].Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	b := &backend{t: t, nc: nc, r: bufio.NewReader(nc)}
	b.send(wire.Hello{Protocol: wire.ProtocolVersion, PID: simulatedPID.Add(1), Role: wire.RoleSession, Database: db})
	return b, b.read().(wire.Welcome)
}

// simulated is dialBackend for the replicated database, welcomed.
func simulated(t testing.TB, c *clustertest.Cluster, i int) *backend {
	t.Helper()
	b, w := dialBackend(t, c, i, "postgres")
	if !w.Accepted {
		t.Fatalf("agent %d refused a session: %s", i+1, w.Text)
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

// upsert is a writeset that writes row (k, v) of table public.t, as the
// extension captures it.
func upsert(k int, v string) *pb.Writeset {
	return &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT,
		Key: []byte(fmt.Sprintf("[%d]", k)), Row: []byte(fmt.Sprintf("(%d,%s)", k, v))}}}
}

// The tests' table, created once on replica 1 (DDL is replicated).
const schema = `CREATE TABLE t (k int PRIMARY KEY, v text)`

// startWithSchema starts a cluster of n replicas, creates sql on replica 1
// and waits until every replica holds it; it returns the cluster and the
// version that holds the schema.
func startWithSchema(t testing.TB, n int, opts clustertest.Options, sql string) (*clustertest.Cluster, uint64) {
	t.Helper()
	c := clustertest.Start(t, n, opts)
	c.Exec(0, sql)
	return c, c.AwaitConverged(time.Minute)
}

// write inserts rows from..from+n-1 of t, (k, 'v<k>'), through a real
// session of replica i, one transaction each, and returns the version of
// the last.
func write(t testing.TB, c *clustertest.Cluster, i, from, n int) uint64 {
	t.Helper()
	conn := c.Connect(i)
	ctx := context.Background()
	var v int64
	for k := from; k < from+n; k++ {
		if _, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1, $2)`, k, fmt.Sprintf("v%d", k)); err != nil {
			t.Fatalf("replica %d: insert row %d: %v", i+1, k, err)
		}
	}
	// Nothing else writes meanwhile: the replica's version is the last
	// commit's.
	if err := conn.QueryRow(ctx, `SELECT tashkent.committed_version()`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	return uint64(v)
}
