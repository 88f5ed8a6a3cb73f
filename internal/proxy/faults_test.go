package proxy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"

	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/replica"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// process is a tashkent process a test started and kills by PID.
type process struct {
	t    *testing.T
	args []string
	log  string
	cmd  *exec.Cmd
}

func startProcess(t *testing.T, log string, args ...string) *process {
	t.Helper()
	p := &process{t: t, args: args, log: log}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *process) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(testbin.Path(p.t), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

// kill sends SIGKILL to the process, by the PID this test started.
func (p *process) kill() {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
}

func listenAddr(t *testing.T) string {
	port, err := netutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// processCluster is a cluster whose certifier and proxies are real
// processes, so that they can be killed with SIGKILL.
type processCluster struct {
	t         *testing.T
	dir       string
	certAddr  string
	certifier *process
	dbs       []*pgserver.Server
	proxyAddr []string
	proxies   []*process
}

func startProcessCluster(t *testing.T, replicas int) *processCluster {
	t.Helper()
	c := &processCluster{t: t, dir: t.TempDir(), certAddr: listenAddr(t)}
	c.certifier = startProcess(t, filepath.Join(c.dir, "certifier.log"),
		"certifier", "--data-dir", filepath.Join(c.dir, "certifier"), "--listen", c.certAddr, "--metrics-listen", "")
	for i := range replicas {
		c.dbs = append(c.dbs, pgtest.Start(t, pgtest.SynchronousCommitOff()))
		c.proxyAddr = append(c.proxyAddr, listenAddr(t))
		c.proxies = append(c.proxies, startProcess(t, filepath.Join(c.dir, fmt.Sprintf("proxy%d.log", i+1)),
			"proxy", "--name", fmt.Sprintf("replica%d", i+1), "--listen", c.proxyAddr[i],
			"--backend", fmt.Sprintf("127.0.0.1:%d", c.dbs[i].Port()), "--certifier", c.certAddr, "--mode", "mw",
			"--allow-passwordless-logins")) // pgtest's PostgreSQL trusts local connections
	}
	for i := range replicas {
		c.waitProxy(i)
	}
	return c
}

func (c *processCluster) dsn(i int) string {
	return "postgres://postgres@" + c.proxyAddr[i] + "/postgres?sslmode=disable&connect_timeout=5"
}

func (c *processCluster) waitProxy(i int) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(context.Background(), c.dsn(i))
		if err == nil {
			conn.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("proxy%d.log", i+1)))
			c.t.Fatalf("proxy %d not serving: %v\n%s", i+1, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ackLog records every commit a client was told about.
type ackLog struct {
	mu  sync.Mutex
	ids []string
}

func (a *ackLog) add(id string) {
	a.mu.Lock()
	a.ids = append(a.ids, id)
	a.mu.Unlock()
}

// writeUntil inserts uniquely keyed rows through proxy i until ctx ends,
// reconnecting after failures, and records each acknowledged commit.
func (c *processCluster) writeUntil(ctx context.Context, i, client int, acks *ackLog) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		if conn == nil || conn.IsClosed() {
			var err error
			if conn, err = pgx.Connect(ctx, c.dsn(i)); err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
		}
		id := fmt.Sprintf("r%d-c%d-%d", i+1, client, n)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := conn.Exec(wctx, `INSERT INTO acked VALUES ($1, $2)`, id, n)
		cancel()
		if err == nil {
			acks.add(id)
		} else if conn.IsClosed() || sqlState(err) == "" {
			conn = nil
		}
	}
}

// The durability claim of Tashkent-MW (§7.1 case 2): replicas run with
// synchronous_commit=off, so a crashed PostgreSQL loses its last commits;
// the proxy reads the version the recovered database holds and replays the
// rest from the certifier's log. Proxy and certifier crashes are recovered
// from too. Every acknowledged commit ends on every replica.
func TestMWKill9OfReplicaProxyAndCertifierLosesNoAcknowledgedCommit(t *testing.T) {
	c := startProcessCluster(t, 3)
	setup, err := pgx.Connect(context.Background(), c.dsn(0))
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, setup, `CREATE TABLE acked (id text PRIMARY KEY, n int NOT NULL)`)
	setup.Close(context.Background())
	waitAll(t, c, c.latestVersion(t), 20*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	acks := &ackLog{}
	var wg sync.WaitGroup
	for i := range c.proxies {
		for client := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); c.writeUntil(ctx, i, client, acks) }()
		}
	}
	pause := func() { time.Sleep(700 * time.Millisecond) }
	pause()
	faults := []string{}

	// A replica's PostgreSQL dies with its unsynced commits.
	if err := c.dbs[1].Kill9(); err != nil {
		t.Fatal(err)
	}
	faults = append(faults, "kill -9 postgres of replica 2")
	time.Sleep(300 * time.Millisecond)
	if err := c.dbs[1].Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pause()

	// A proxy dies.
	c.proxies[2].kill()
	faults = append(faults, "kill -9 proxy of replica 3")
	time.Sleep(300 * time.Millisecond)
	c.proxies[2].start()
	pause()

	// The certifier dies.
	c.certifier.kill()
	faults = append(faults, "kill -9 certifier")
	time.Sleep(300 * time.Millisecond)
	c.certifier.start()
	pause()

	cancel()
	wg.Wait()
	if len(acks.ids) < 50 {
		t.Fatalf("only %d commits acknowledged: the workload did not run", len(acks.ids))
	}
	// A commit whose certification was in flight when its client gave up
	// still completes (its outcome was unknown to the client): wait until
	// the certifier's version stops moving, and every replica holds it.
	version := c.latestVersion(t)
	for {
		waitAll(t, c, version, 60*time.Second)
		time.Sleep(300 * time.Millisecond)
		if latest := c.latestVersion(t); latest != version {
			version = latest
			continue
		}
		break
	}
	sums := make([]map[string]string, len(c.dbs))
	for i, db := range c.dbs {
		conn := pgtest.Connect(t, db, "postgres")
		present := map[string]bool{}
		rows, err := conn.Query(context.Background(), `SELECT id FROM acked`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			rows.Scan(&id)
			present[id] = true
		}
		rows.Close()
		for _, id := range acks.ids {
			if !present[id] {
				t.Fatalf("replica %d lost acknowledged commit %s", i+1, id)
			}
		}
		if sums[i], err = replica.Checksum(context.Background(), conn); err != nil {
			t.Fatal(err)
		}
		if i > 0 && fmt.Sprint(sums[i]) != fmt.Sprint(sums[0]) {
			t.Fatalf("replica %d differs from replica 1: %v vs %v", i+1, sums[i], sums[0])
		}
	}
	t.Logf("faults: %v; %d acknowledged commits, all on every replica; replicas equal at version %d", faults, len(acks.ids), version)
}

// latestVersion asks the certifier (over a proxy-independent path: the
// replicas' own records would lag) for its durable version.
func (c *processCluster) latestVersion(t *testing.T) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := certifierStatus(c.certAddr)
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("certifier status: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitAll(t *testing.T, c *processCluster, version uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i, db := range c.dbs {
		conn := pgtest.Connect(t, db, "postgres")
		for {
			v, err := replica.ReadVersion(context.Background(), conn)
			if err == nil && v >= version {
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("proxy%d.log", i+1)))
				t.Fatalf("replica %d at version %d (%v), want %d\n%s", i+1, v, err, version, tail(log, 3000))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func certifierStatus(addr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	st, err := pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return 0, err
	}
	return st.DurableVersion, nil
}
