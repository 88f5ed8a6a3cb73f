package proxy_test

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

	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/proxy"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// testCluster is N real PostgreSQL 15 replicas, an in-process certifier and
// an in-process proxy per replica.
type testCluster struct {
	t         *testing.T
	certifier *certifier.Server
	dbs       []*pgserver.Server
	proxies   []*proxy.Proxy
	cancels   []context.CancelFunc
	done      []chan error
	mode      proxy.Mode
}

func startCluster(t *testing.T, replicas int, mode proxy.Mode) *testCluster {
	t.Helper()
	c := &testCluster{t: t, mode: mode}
	var err error
	c.certifier, err = certifier.Listen(certifier.Config{DataDir: t.TempDir()}, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.certifier.Close() })
	for i := range replicas {
		opts := []pgtest.Option{}
		if mode == proxy.ModeMW {
			opts = append(opts, pgtest.SynchronousCommitOff())
		}
		c.dbs = append(c.dbs, pgtest.Start(t, opts...))
		c.startProxy(i)
	}
	return c
}

func (c *testCluster) startProxy(i int) {
	c.t.Helper()
	c.runProxy(i, proxy.Config{
		Name: fmt.Sprintf("replica%d", i+1), Listen: "127.0.0.1:0",
		BackendAddr: backendAddr(c.dbs[i]), Certifier: c.certifier.Addr().String(),
		Mode: c.mode, AllowPasswordlessLogins: true, // pgtest's PostgreSQL trusts local connections
	})
}

// runProxy runs a proxy with cfg as replica i (in place of a stopped one, or
// as the next) and waits until it serves.
func (c *testCluster) runProxy(i int, cfg proxy.Config) {
	c.t.Helper()
	p, err := proxy.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, "") }()
	if i < len(c.proxies) {
		c.proxies[i], c.cancels[i], c.done[i] = p, cancel, done
	} else {
		c.proxies = append(c.proxies, p)
		c.cancels = append(c.cancels, cancel)
		c.done = append(c.done, done)
		c.t.Cleanup(func() { c.stopProxy(i) })
	}
	if err := awaitProxy(p, done, proxyStartLimit); err != nil {
		c.t.Fatal(err)
	}
}

// proxyStartLimit bounds a test proxy's start (its catch-up included) on a
// busy machine.
const proxyStartLimit = 2 * time.Minute

// awaitProxy waits until p serves, and fails at once, instead of hanging in
// Addr, if Run returns first. Run's error is put back into done for
// stopProxy.
func awaitProxy(p *proxy.Proxy, done chan error, limit time.Duration) error {
	select {
	case <-p.Ready():
		return nil
	case err := <-done:
		done <- err
		return fmt.Errorf("the proxy stopped before it served: %v", err)
	case <-time.After(limit):
		return fmt.Errorf("the proxy did not serve within %v", limit)
	}
}

// backendAddr is the replica's Unix socket, as a proxy beside its replica
// uses it; the process-based tests (faults_test.go) use TCP.
func backendAddr(db *pgserver.Server) string {
	if socket := db.SocketPath(); socket != "" {
		return socket
	}
	return fmt.Sprintf("127.0.0.1:%d", db.Port())
}

func (c *testCluster) stopProxy(i int) {
	c.cancels[i]()
	select {
	case <-c.done[i]:
	case <-time.After(10 * time.Second):
		c.t.Errorf("proxy %d did not stop", i)
	}
}

func (c *testCluster) dsn(i int) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", c.proxies[i].Addr())
}

// connect opens a client connection through proxy i.
func (c *testCluster) connect(i int) *pgx.Conn {
	c.t.Helper()
	return c.connectWith(i, nil)
}

// connectNoticed is connect, with the notices the connection gets kept:
// notices() returns them so far, each as "SEVERITY: message", one per line.
func (c *testCluster) connectNoticed(i int) (conn *pgx.Conn, notices func() string) {
	c.t.Helper()
	var mu sync.Mutex
	var got []string
	conn = c.connectWith(i, func(cfg *pgx.ConnConfig) {
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, n.Severity+": "+n.Message)
		}
	})
	return conn, func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(got, "\n")
	}
}

// connectWith is connect with the connection's configuration changed by
// configure (if not nil) first.
func (c *testCluster) connectWith(i int, configure func(*pgx.ConnConfig)) *pgx.Conn {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(c.dsn(i))
	if err != nil {
		c.t.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		c.t.Fatalf("connect through proxy %d: %v", i, err)
	}
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// direct opens a connection to replica i's PostgreSQL itself.
func (c *testCluster) direct(i int) *pgx.Conn {
	c.t.Helper()
	return pgtest.Connect(c.t, c.dbs[i], "postgres")
}

// converge waits until every replica holds the certifier's durable
// version, then checks that their contents are equal, table by table.
func (c *testCluster) converge(timeout time.Duration) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	target := c.certifier.Service.DurableVersion()
	conns := make([]*pgx.Conn, len(c.dbs))
	for i := range c.dbs {
		conns[i] = c.direct(i)
	}
	ctx := context.Background()
	for i, conn := range conns {
		for {
			v, err := replica.ReadVersion(ctx, conn)
			if err == nil && v >= target {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("replica %d at version %d (err %v), certifier durable at %d after %s", i+1, v, err, target, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first, err := replica.Checksum(ctx, conns[0])
	if err != nil {
		c.t.Fatal(err)
	}
	for i, conn := range conns[1:] {
		sum, err := replica.Checksum(ctx, conn)
		if err != nil {
			c.t.Fatal(err)
		}
		for table, want := range first {
			if sum[table] != want {
				c.t.Fatalf("table %s differs: replica 1 %s, replica %d %s", table, want, i+2, sum[table])
			}
		}
		if len(sum) != len(first) {
			c.t.Fatalf("replica 1 has tables %v, replica %d has %v", first, i+2, sum)
		}
	}
	return target
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func execSQL(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestWritesOnOneReplicaReachTheOthers(t *testing.T) {
	for _, mode := range []proxy.Mode{proxy.ModeMW, proxy.ModeBase} {
		t.Run(string(mode), func(t *testing.T) { writesReachTheOthers(t, mode) })
	}
}

func writesReachTheOthers(t *testing.T, mode proxy.Mode) {
	c := startCluster(t, 3, mode)
	a, b := c.connect(0), c.connect(1)
	execSQL(t, a, `CREATE TABLE kv (k int PRIMARY KEY, v text)`)
	execSQL(t, a, `INSERT INTO kv VALUES (1, 'one'), (2, 'two')`)
	// GSI: replica 2 sees replica 1's writes once it reaches their version.
	c.converge(10 * time.Second)
	ctx := context.Background()
	tx, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, b, `UPDATE kv SET v = 'uno' WHERE k = 1`)
	execSQL(t, b, `INSERT INTO kv VALUES (3, 'three')`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	version := c.converge(10 * time.Second)
	if version < 3 {
		t.Fatalf("certifier version %d after three update transactions", version)
	}
	var got string
	if err := c.connect(2).QueryRow(ctx, `SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "1=uno,2=two,3=three" {
		t.Fatalf("replica 3 reads %q", got)
	}
}

// Tashkent's lost update across replicas: two replicas update one row from
// the same snapshot; exactly one commits, the other gets 40001.
func TestConcurrentUpdatesOfOneRowOnTwoReplicasCommitExactlyOne(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, setup, `INSERT INTO counter VALUES (1, 0)`)
	c.converge(10 * time.Second)
	ctx := context.Background()
	for round := range 20 {
		a, b := c.connect(0), c.connect(1)
		ta, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := b.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Both read the same value, then both write it plus one.
		var na, nb int
		ta.QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&na)
		tb.QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&nb)
		if na != nb {
			t.Fatalf("round %d: the replicas' snapshots disagree: %d and %d", round, na, nb)
		}
		if _, err := ta.Exec(ctx, `UPDATE counter SET n = $1 WHERE id = 1`, na+1); err != nil {
			t.Fatal(err)
		}
		if _, err := tb.Exec(ctx, `UPDATE counter SET n = $1 WHERE id = 1`, nb+1); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, tx := range []pgx.Tx{ta, tb} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = tx.Commit(ctx) }()
		}
		wg.Wait()
		committed := 0
		for _, err := range errs {
			switch {
			case err == nil:
				committed++
			case sqlState(err) != "40001":
				t.Fatalf("round %d: commit failed with %v, want 40001", round, err)
			case !strings.Contains(err.Error(), "another replica"):
				t.Fatalf("round %d: the abort does not say why: %v", round, err)
			}
		}
		if committed != 1 {
			t.Fatalf("round %d: %d of two conflicting transactions committed", round, committed)
		}
		c.converge(10 * time.Second)
		var n int
		c.direct(round%2).QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n)
		if n != round+1 {
			t.Fatalf("round %d: counter is %d, want %d (an update was lost)", round, n, round+1)
		}
	}
}

// simpleQueries returns, for tests that drive one connection with simple
// queries: simple runs sql and returns its error; mustSimple fails the
// test on one; wantStatus fails it unless the connection's transaction
// status is want.
func simpleQueries(t *testing.T, ctx context.Context, pg *pgconn.PgConn) (simple func(sql string) error, mustSimple func(sql string), wantStatus func(want byte)) {
	simple = func(sql string) error {
		_, err := pg.Exec(ctx, sql).ReadAll()
		return err
	}
	mustSimple = func(sql string) {
		t.Helper()
		if err := simple(sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	wantStatus = func(want byte) {
		t.Helper()
		if got := pg.TxStatus(); got != want {
			t.Fatalf("transaction status %q, want %q", got, want)
		}
	}
	return simple, mustSimple, wantStatus
}
