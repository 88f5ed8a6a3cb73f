package proxy_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// The proxy's own connections to its database (the applier's and the
// control connection) can be lost while the database stays up: an
// operator's pg_terminate_backend, an idle timeout, a pooler in between.
// Nothing committed is lost then, so the proxy reconnects them and goes
// on: a client's open transaction on that replica is not ended (as it is
// when the database itself restarted), and remote writesets are applied
// again (reconnectApplier, reconnectControl).
func TestLostApplierAndControlConnectionsLeaveSessionsAlone(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	execSQL(t, c.connect(0), `CREATE TABLE public.kept (id int PRIMARY KEY)`)
	c.converge(20 * time.Second)

	open := c.connect(0)
	execSQL(t, open, `BEGIN`)
	execSQL(t, open, `INSERT INTO public.kept VALUES (1)`)

	var terminated int
	// The victims are chosen first: in one WHERE clause the planner may call
	// pg_terminate_backend before it filters by application_name.
	if err := c.direct(0).QueryRow(ctx, `WITH victims AS MATERIALIZED (
			SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name IN ('tashkent-proxy', 'tashkent-proxy-apply'))
		SELECT count(*) FROM victims WHERE pg_catalog.pg_terminate_backend(pid)`).Scan(&terminated); err != nil {
		t.Fatal(err)
	}
	if terminated != 2 {
		t.Fatalf("terminated %d of the proxy's own backends, want its applier and its control connection", terminated)
	}

	// A remote write must still reach replica 1 through a new applier
	// connection (the control connection is found lost by its next ping).
	execSQL(t, c.connect(1), `INSERT INTO public.kept VALUES (2)`)
	direct := c.direct(0)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM public.kept WHERE id = 2`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a remote write never reached the replica whose applier connection was terminated")
		}
		time.Sleep(50 * time.Millisecond)
	}

	execSQL(t, open, `INSERT INTO public.kept VALUES (3)`)
	if _, err := open.Exec(ctx, `COMMIT`); err != nil {
		t.Fatalf("a transaction open while the proxy lost its own connections: %v, want it to commit", err)
	}
	c.converge(20 * time.Second)
	if n := c.countOn(1, `SELECT count(*) FROM public.kept`); n != 3 {
		t.Fatalf("replica 2 holds %d rows, want 3", n)
	}
}

// A backend that crashes makes PostgreSQL end every other backend and
// replay its WAL under the same postmaster, whose start time stays the
// same: commits whose WAL was still in shared memory (synchronous_commit
// off) are gone. The proxy must not take its lost connections for lost
// connections only: the database no longer holds every version the
// sequencer counts, so it recovers the replica and replays them from the
// certifier (connectUnrestarted's version check).
func TestABackendCrashThatLostCommitsIsRecovered(t *testing.T) {
	// Replica 1's proxy checks its control connection every 8 s: it finds
	// it lost only once the database is back from its crash recovery, the
	// case where the start time alone would pass.
	c := startClusterStaleness(t, []time.Duration{8 * time.Second, 0})
	crashLosingCommits(t, c)
	c.converge(30 * time.Second)
	if n := c.countOn(0, `SELECT count(*) FROM public.crashed`); n != 5 {
		t.Fatalf("replica 1 holds %d of the 5 rows committed before its database crashed", n)
	}
}

// The same crash, and a client that connects before the proxy's health
// check noticed it: its session must not start on a database that lacks
// versions the proxy counted as committed (its transactions would be
// labelled with writes they cannot see, and certified as if they had seen
// them). Session setup refuses it with 57P03 and has the replica recovered;
// once it is, the client's write goes through.
func TestANewSessionOnADatabaseThatLostCommitsWaitsForItsRecovery(t *testing.T) {
	c := startClusterStaleness(t, []time.Duration{8 * time.Second, 0})
	crashLosingCommits(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused := false
	for {
		conn, err := pgx.Connect(ctx, c.dsn(0))
		if err == nil {
			_, err = conn.Exec(ctx, `INSERT INTO public.crashed VALUES (6)`)
			conn.Close(ctx)
		}
		var pgErr *pgconn.PgError
		if err == nil {
			break
		}
		if !errors.As(err, &pgErr) || pgErr.Code != "57P03" {
			t.Fatalf("a new session on a database that lost commits: %v, want 57P03 until the replica is recovered", err)
		}
		refused = true
		time.Sleep(100 * time.Millisecond)
	}
	if !refused {
		t.Fatal("a new session started on a database that lost commits, before the proxy recovered it")
	}
	c.converge(30 * time.Second)
	if n := c.countOn(0, `SELECT count(*) FROM public.crashed`); n != 6 {
		t.Fatalf("replica 1 holds %d of the 6 committed rows", n)
	}
}

// crashLosingCommits commits five rows through replica 1's proxy, then
// crashes one backend of its database so that they are lost (their WAL
// was in shared memory only), and returns once the database accepts
// connections again. It fails the test if the crash lost nothing.
func crashLosingCommits(t *testing.T, c *testCluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	execSQL(t, c.connect(0), `CREATE TABLE public.crashed (id int PRIMARY KEY)`)
	c.converge(20 * time.Second)
	// The WAL writer writes the last partial page of WAL only every
	// wal_writer_delay: until then the latest commits live in shared
	// memory alone.
	admin := c.direct(0)
	execSQL(t, admin, `ALTER SYSTEM SET wal_writer_delay = '10s'`)
	execSQL(t, admin, `SELECT pg_catalog.pg_reload_conf()`)
	time.Sleep(200 * time.Millisecond)

	client := c.connect(0)
	for id := 1; id <= 5; id++ {
		execSQL(t, client, `INSERT INTO public.crashed VALUES ($1)`, id)
	}
	victim := c.direct(0)
	var pid int
	if err := victim.QueryRow(ctx, `SELECT pg_catalog.pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The postmaster ends every other backend, then replays its WAL.
	for deadline := time.Now().Add(10 * time.Second); admin.Ping(ctx) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other backends outlived a backend's crash")
		}
	}
	waitUntilAccepting(t, c.dbs[0].DSN("postgres"), 30*time.Second)
	if n := c.countOn(0, `SELECT count(*) FROM public.crashed`); n == 5 {
		t.Fatal("the crash lost none of the 5 commits: the test shows nothing (was the WAL flushed?)")
	}
}

// waitUntilAccepting waits until the database at dsn accepts connections
// again (after its crash recovery).
func waitUntilAccepting(t *testing.T, dsn string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the database did not accept connections within %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
