package guarantees_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// certifierProcess is a `tashkent certifier` process the test kills with
// SIGKILL and starts again on the same log and address.
type certifierProcess struct {
	t    *testing.T
	addr string
	args []string
	log  string
	cmd  *exec.Cmd
}

func startCertifierProcess(t *testing.T, extra ...string) *certifierProcess {
	t.Helper()
	port, err := netutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &certifierProcess{t: t, addr: "127.0.0.1:" + strconv.Itoa(port), log: filepath.Join(dir, "certifier.log")}
	p.args = append([]string{"certifier", "--data-dir", filepath.Join(dir, "log"), "--listen", p.addr, "--metrics-listen", ""}, extra...)
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *certifierProcess) start() {
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

// kill sends SIGKILL to the process this test started, by its PID.
func (p *certifierProcess) kill() {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// durable asks the certifier for its durable version, waiting while it
// restarts.
func (p *certifierProcess) durable() uint64 {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := certifierDurable(p.addr)
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.log)
			p.t.Fatalf("certifier status: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func certifierDurable(addr string) (uint64, error) {
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

// load is the workload of the fault test: clients on every replica insert
// uniquely keyed rows, as an ordinary role (the gate keeps it out while a
// replica catches up), reconnecting after failures; each commit a client
// was told of is recorded.
type load struct {
	c        *cluster
	mu       sync.Mutex
	acked    []string
	refused  atomic.Int64   // connections refused with 57P03 (the gate)
	failures map[string]int // failed writes by SQLSTATE ("" for a lost connection)
}

func (l *load) run(ctx context.Context, i, client int) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			conn, err = pgx.Connect(cctx, l.c.dsn(i, "writer"))
			cancel()
			if err != nil {
				if pgcode.Of(err) == pgcode.CannotConnectNow {
					l.refused.Add(1)
				}
				conn = nil
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		id := fmt.Sprintf("r%d-c%d-%d", i+1, client, n)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := conn.Exec(wctx, `INSERT INTO acked VALUES ($1, $2)`, id, n)
		cancel()
		if err == nil {
			l.mu.Lock()
			l.acked = append(l.acked, id)
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		l.failures[pgcode.Of(err)]++
		l.mu.Unlock()
		if conn.IsClosed() || pgcode.Of(err) == "" {
			conn = nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// findTurnHolder returns a backend of replica i that holds a version (it
// is certified and waits for its turn, or commits in it), as the load
// makes them, from tashkent.backends().
func findTurnHolder(t *testing.T, c *cluster, i int) (pid int, state string) {
	t.Helper()
	ctx := context.Background()
	conn := c.connectAs(i, "postgres", nil)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		err := conn.QueryRow(ctx, `SELECT pid, state FROM tashkent.backends()
			WHERE state IN ('holding', 'committing') AND pid <> pg_backend_pid() LIMIT 1`).Scan(&pid, &state)
		if err == nil {
			return pid, state
		}
		if err != pgx.ErrNoRows {
			t.Fatalf("tashkent.backends() on replica %d: %v", i+1, err)
		}
	}
	t.Fatalf("no backend of replica %d held a version within 20s under load", i+1)
	return 0, ""
}

// The durability claim of Tashkent-MW (§7.1 case 2), and the recovery of
// every part of a replica, under a write load on all three replicas: no
// commit a client was told of is lost. Replicas run with
// synchronous_commit=off, so a crashed PostgreSQL loses its last commits;
// the agent replays them from the certifier's log. A backend killed while
// it holds the commit turn crashes its PostgreSQL (which ends every
// backend and replays its WAL); one terminated there (pg_terminate_backend)
// leaves its version to the agent (Tashkent §8.1 soft recovery). A stopped
// agent, started again, recovers its replica; a killed certifier, started
// again, goes on from its log. In mode ed the clients' commits are safe
// (the replicas' default synchronous_commit = on): acknowledged once
// durable, so none is lost either (Kashi §2.2.1, property 5).
func TestKill9OfPostgresBackendAgentAndCertifierLosesNoAcknowledgedCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault test kills and restarts every part under load; not in -short")
	}
	for _, mode := range []agent.Mode{agent.ModeMW, agent.ModeED} {
		t.Run(string(mode), func(t *testing.T) { kill9LosesNoAcknowledgedCommit(t, mode) })
	}
}

func kill9LosesNoAcknowledgedCommit(t *testing.T, mode agent.Mode) {
	cert := startCertifierProcess(t)
	c := start(t, 3, clustertest.Options{Mode: mode, Agent: func(i int, cfg *agent.Config) { cfg.Certifier = cert.addr }})
	admin := c.Connect(0)
	for _, sql := range []string{
		`CREATE TABLE acked (id text PRIMARY KEY, n int NOT NULL)`,
		`CREATE ROLE writer LOGIN`,
		`GRANT INSERT, SELECT ON acked TO writer`,
	} {
		execSQL(t, admin, sql)
	}
	awaitAll(t, c, cert.durable())

	ctx, cancel := context.WithCancel(context.Background())
	l := &load{c: c, failures: map[string]int{}}
	var wg sync.WaitGroup
	for i := range c.DBs {
		for client := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); l.run(ctx, i, client) }()
		}
	}
	defer func() { cancel(); wg.Wait() }()
	pause := func() { time.Sleep(700 * time.Millisecond) }
	var faults []string
	pause()

	// PostgreSQL of replica 2 dies with its unsynced commits.
	if err := c.DBs[1].Kill9(); err != nil {
		t.Fatal(err)
	}
	faults = append(faults, "kill -9 of replica 2's postmaster")
	time.Sleep(300 * time.Millisecond)
	if err := c.DBs[1].Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pause()

	// One backend of replica 3, holding the commit turn, dies: PostgreSQL
	// ends every other backend and replays its WAL.
	pid, state := findTurnHolder(t, c, 2)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 of backend %d: %v", pid, err)
	}
	faults = append(faults, fmt.Sprintf("kill -9 of a backend of replica 3 (%s a version)", state))
	pause()

	// One backend of replica 1, holding the turn, is terminated.
	pid, state = findTurnHolder(t, c, 0)
	if c.textOn(0, `SELECT pg_terminate_backend($1)::text`, pid) == "true" {
		faults = append(faults, fmt.Sprintf("pg_terminate_backend of a backend of replica 1 (%s a version)", state))
	}
	pause()

	// The agent of replica 1 stops, and a new one starts.
	c.StopAgent(0)
	faults = append(faults, "stop of replica 1's agent")
	time.Sleep(300 * time.Millisecond)
	c.StartAgent(0)
	pause()

	// The certifier dies.
	cert.kill()
	faults = append(faults, "kill -9 of the certifier")
	time.Sleep(300 * time.Millisecond)
	cert.start()
	pause()

	cancel()
	wg.Wait()
	if len(l.acked) < 50 {
		t.Fatalf("only %d commits acknowledged: the workload did not run", len(l.acked))
	}
	// A commit whose certification was in flight when its client gave up
	// still completes: wait until the certifier's version stops moving,
	// and every replica holds it.
	version := cert.durable()
	for {
		awaitAll(t, c, version)
		time.Sleep(300 * time.Millisecond)
		if latest := cert.durable(); latest != version {
			version = latest
			continue
		}
		break
	}
	for i := range c.DBs {
		present := map[string]bool{}
		rows, err := c.Connect(i).Query(context.Background(), `SELECT id FROM acked`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			present[id] = true
		}
		rows.Close()
		for _, id := range l.acked {
			if !present[id] {
				t.Fatalf("replica %d lost acknowledged commit %s", i+1, id)
			}
		}
	}
	c.sameTables()
	// Each replica admits its ordinary roles again once it caught up, the
	// one whose backend crash restarted PostgreSQL under the same
	// postmaster included.
	for i := range c.DBs {
		deadline := time.Now().Add(convergeLimit)
		for err := c.connectOnce(i, "writer"); err != nil; err = c.connectOnce(i, "writer") {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d still refuses role writer after the faults: %v", i+1, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("faults: %v; %d acknowledged commits, all on every replica (failed writes by SQLSTATE: %v; %d connections refused while catching up); replicas equal at version %d",
		faults, len(l.acked), l.failures, l.refused.Load(), version)
}

// awaitAll waits until every replica has committed version v.
func awaitAll(t *testing.T, c *cluster, v uint64) {
	t.Helper()
	for i := range c.DBs {
		c.AwaitCommitted(i, v, time.Minute)
	}
}
