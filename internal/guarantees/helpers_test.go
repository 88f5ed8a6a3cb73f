package guarantees_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// convergeLimit bounds a wait for every replica to hold every durable
// version, on a busy 2-core machine.
const convergeLimit = 30 * time.Second

// cluster is a clustertest cluster with what the tests here ask of it.
type cluster struct {
	*clustertest.Cluster
	t testing.TB
}

func start(t testing.TB, replicas int, opts clustertest.Options) *cluster {
	t.Helper()
	c := &cluster{Cluster: clustertest.Start(t, replicas, opts), t: t}
	// Cleanups run last first: this one runs after the test's connections
	// are closed, before the agents stop.
	t.Cleanup(c.awaitClientsGone)
	return c
}

// awaitClientsGone waits until the backends of the test's clients have
// exited, so that the agents stop after the backends have left them, as
// an operator stops a replica's clients before its agent.
func (c *cluster) awaitClientsGone() {
	ctx := context.Background()
	for i, db := range c.DBs {
		if !db.Running() {
			continue
		}
		conn, err := pgx.Connect(ctx, c.dsn(i, "postgres"))
		if err != nil {
			continue
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			var n int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND application_name NOT LIKE 'tashkent-agent%'`).Scan(&n)
			if err != nil || n == 0 {
				break
			}
		}
		conn.Close(ctx)
	}
	time.Sleep(100 * time.Millisecond) // the agents' side of the closed sockets
}

// dsn is a URL for database postgres on replica i as user.
func (c *cluster) dsn(i int, user string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=10", user, c.DBs[i].Port())
}

// connectAs opens a connection to replica i as user (pgtest's servers
// trust local connections), configured by configure if not nil; it is
// closed when the test ends.
func (c *cluster) connectAs(i int, user string, configure func(*pgx.ConnConfig)) *pgx.Conn {
	c.t.Helper()
	cfg, err := pgx.ParseConfig(c.dsn(i, user))
	if err != nil {
		c.t.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		c.t.Fatalf("connect to replica %d as %s: %v", i+1, user, err)
	}
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// connectOnce connects to replica i as user and closes the connection at
// once; it returns the error of the connection, or of a first query.
func (c *cluster) connectOnce(i int, user string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn(i, user))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT 1`)
	return err
}

// converge waits until every replica holds the certifier's durable
// version, then checks that their user tables are equal, table by table
// (replica.Checksum), and returns the version.
func (c *cluster) converge() uint64 {
	c.t.Helper()
	v := c.AwaitConverged(convergeLimit)
	c.sameTables()
	return v
}

// sameTables checks that every replica's user tables equal replica 1's.
func (c *cluster) sameTables() {
	c.t.Helper()
	ctx := context.Background()
	var first map[string]string
	for i := range c.DBs {
		conn, err := pgx.Connect(ctx, c.dsn(i, "postgres"))
		if err != nil {
			c.t.Fatal(err)
		}
		sum, err := replica.Checksum(ctx, conn)
		conn.Close(ctx)
		if err != nil {
			c.t.Fatalf("replica %d: %v", i+1, err)
		}
		if i == 0 {
			first = sum
			continue
		}
		if fmt.Sprint(sum) != fmt.Sprint(first) {
			c.t.Fatalf("replica %d's tables differ from replica 1's:\n%v\n%v", i+1, sum, first)
		}
	}
}

// countOn runs sql, which returns one integer, on replica i.
func (c *cluster) countOn(i int, sql string, args ...any) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn(i, "postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		c.t.Fatalf("replica %d: %s: %v", i+1, sql, err)
	}
	return n
}

// textOn runs sql, which returns one text value, on replica i.
func (c *cluster) textOn(i int, sql string, args ...any) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn(i, "postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s *string
	if err := conn.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
		c.t.Fatalf("replica %d: %s: %v", i+1, sql, err)
	}
	if s == nil {
		return "<null>"
	}
	return *s
}

// awaitDurable waits until replica i holds every version the certifier has
// made durable (without comparing tables).
func (c *cluster) awaitDurable(i int) {
	c.t.Helper()
	c.AwaitCommitted(i, c.Durable(), convergeLimit)
}

func pgError(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	return nil
}

func execSQL(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", oneLine(sql), err)
	}
}

// simple runs sql with the simple query protocol (multi-statement strings
// included).
func simple(conn *pgx.Conn, sql string) error {
	_, err := conn.PgConn().Exec(context.Background(), sql).ReadAll()
	return err
}

// extended runs sql with the extended protocol: Parse of the unnamed
// statement, Bind, Describe, Execute, Sync.
func extended(conn *pgx.Conn, sql string) error {
	return conn.PgConn().ExecParams(context.Background(), sql, nil, nil, nil, nil).Read().Err
}

func begin(t testing.TB, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// beginWith opens a transaction on conn and runs sql in it.
func beginWith(t testing.TB, conn *pgx.Conn, sql string, args ...any) pgx.Tx {
	t.Helper()
	tx := begin(t, conn)
	if _, err := tx.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", oneLine(sql), err)
	}
	return tx
}

// commitConcurrently commits the transactions at once and returns their
// errors. A commit that hangs fails the test instead of hanging it.
func commitConcurrently(t testing.TB, txs ...pgx.Tx) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(txs))
	var wg sync.WaitGroup
	for i, tx := range txs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = tx.Commit(ctx) }()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the concurrent commits did not all return within 30s: %v", errs)
	}
	return errs
}

// exactlyOneCommitted checks that one transaction committed and every
// other failed certification with 40001, and returns the survivor's index.
func exactlyOneCommitted(t testing.TB, round int, errs []error) int {
	t.Helper()
	winner, committed := -1, 0
	for i, err := range errs {
		switch {
		case err == nil:
			winner = i
			committed++
		case pgcode.Of(err) != pgcode.SerializationFailure:
			t.Fatalf("round %d: transaction %d: %v, want success or 40001", round, i, err)
		}
	}
	if committed != 1 {
		t.Fatalf("round %d: %d of %d conflicting transactions committed: %v", round, committed, len(errs), errs)
	}
	return winner
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func itoa[T ~int | ~int64 | ~uint64](v T) string { return fmt.Sprint(v) }

// pipelineError reads every result of a pipeline that was synced once,
// closes it, and returns the first error.
func pipelineError(p *pgconn.Pipeline) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for {
		res, err := p.GetResults()
		if err != nil {
			keep(err)
			break
		}
		if res == nil {
			break
		}
		if rr, ok := res.(*pgconn.ResultReader); ok {
			_, err := rr.Close()
			keep(err)
		}
		if _, ok := res.(*pgconn.PipelineSync); ok {
			break
		}
	}
	keep(p.Close())
	return first
}

// awaitBackendGone waits until backend pid of replica i has exited (and
// dropped its session's temporary objects).
func awaitBackendGone(t testing.TB, c *cluster, i int, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.countOn(i, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int(pid)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backend %d of replica %d did not exit within 30s", pid, i+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
