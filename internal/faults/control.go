package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/process"
)

// control owns the cluster under test: the real processes `tashkent up`
// starts (cluster.Up), restarted the same way after a kill, and stopped by
// cluster.Down. Every signal goes to a PID recorded in cluster.json.
type control struct {
	dir string
	bin string

	mu sync.Mutex
	st *cluster.State
	// cert is the certifier this harness started in place of the one
	// `tashkent up` started (takeOverCertifier); certDone is closed when it
	// exits.
	cert     *exec.Cmd
	certDone chan struct{}
	// certRecovered is the durable version the certifier reported when
	// it was last ready: what its log held when it started.
	certRecovered uint64
	// net is the certifier's network namespace (nil: the host's).
	net *certNet

	// certifiers is the size of the certifier group (0 or 1: a single
	// certifier); members are the group's processes this harness started
	// (group.go), by member id.
	certifiers int
	members    map[int]*member
	// mode is the cluster's durability mode; certArgs are flags given to
	// every certifier the harness starts (the write delay's fault flags).
	mode     cluster.Mode
	certArgs []string
}

// up starts whatever of the cluster is not running and waits until all of
// it accepts connections.
func (c *control) up(ctx context.Context) error {
	// No supervisor: a replica that halts is a failure the checkers must
	// see, not one to repair behind their back.
	noAutoRebuild := false
	st, err := cluster.Up(ctx, cluster.Options{Dir: c.dir, Binary: c.bin, Replicas: 3, Mode: c.mode, Certifiers: c.certifiers,
		AutoRebuild: &noAutoRebuild})
	if st != nil {
		c.mu.Lock()
		c.st = st
		c.mu.Unlock()
	}
	return err
}

func (c *control) state() *cluster.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

// down stops every process of the cluster.
func (c *control) down(ctx context.Context) error {
	c.stopCertifier()
	c.stopGroup()
	_ = c.healCuts()
	_, err := cluster.Down(ctx, c.dir)
	if c.net != nil {
		c.net.teardown()
	}
	return err
}

// harnessDSN is where the harness's own sessions (faults, checks) reach
// replica r: fast (synchronous_commit = off), so that in mode ed a read
// right after a rewind is not refused with 40001 as a safe one may be (it
// names a version number, not an epoch; docs/GUARANTEES.md). In mw the
// replicas run with off already.
func harnessDSN(r *cluster.Replica) string {
	return r.DSN() + "&options=-csynchronous_commit%3Doff"
}

func (c *control) endpoints() []endpoint {
	var out []endpoint
	for _, r := range c.state().Replicas {
		out = append(out, endpoint{Replica: r.Name, DSN: r.DSN()})
	}
	return out
}

// target is one process a fault hits.
type target struct {
	name string // "certifier", "replica2 agent", "replica1 postgres"
	pid  int
	pg   bool // a postmaster: its backends are hit too
	// replica is the index in State.Replicas of the replica whose agent
	// or PostgreSQL this is (-1: none).
	replica int
	// links are the replicas whose veth to the certifier a partition cuts.
	links []int
	// member is the certifier group member hit (0: none).
	member int
}

func (c *control) targets() []target {
	st := c.state()
	var out []target
	if !c.grouped() {
		out = append(out, target{name: "certifier", pid: st.Certifier.PID, replica: -1})
	}
	for i, r := range st.Replicas {
		out = append(out, target{name: r.Name + " agent", pid: r.Agent.PID, replica: i})
		out = append(out, target{name: r.Name + " postgres", pid: r.Postgres.PID, pg: true, replica: i})
	}
	return out
}

// pids returns the process of t and, for a postmaster, its children: a
// crashed or paused database is the whole server, not one process.
func (t target) pids() []int {
	out := []int{t.pid}
	if t.pg {
		out = append(out, process.Children(t.pid)...)
	}
	return out
}

// signal sends sig to every pid, ignoring those already gone.
func signal(pids []int, sig syscall.Signal) error {
	var errs []error
	for _, p := range pids {
		if p <= 0 {
			continue
		}
		if err := syscall.Kill(p, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("signal %v to %d: %w", sig, p, err))
		}
	}
	return errors.Join(errs...)
}

// waitGone waits until none of pids runs (zombies count as gone).
func waitGone(pids []int, max time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	for _, p := range pids {
		if !process.WaitGone(ctx, p, max) {
			return false
		}
	}
	return true
}

// takeOver takes over the certifier group's members, or the single
// certifier (in a network namespace of its own withNet).
func (c *control) takeOver(ctx context.Context, withNet bool) error {
	if c.grouped() {
		return c.takeOverGroup(ctx)
	}
	return c.takeOverCertifier(ctx, withNet)
}

// restartCertifiers stops the certifier or every group member and starts
// them again, without their conflict check when unsafe (the self-test).
func (c *control) restartCertifiers(ctx context.Context, unsafe bool) error {
	if c.grouped() {
		c.stopGroup()
		return c.startGroup(ctx, unsafe)
	}
	c.stopCertifier()
	return c.startCertifier(ctx, unsafe)
}

// takeOverCertifier replaces the certifier `tashkent up` started by one
// this harness starts, restarts (after kill -9) and swaps for the
// self-test's unsafe one; with withNet, inside a network namespace of its
// own so that it can be partitioned (netpart.go). It listens on the same
// data directory and ports, and agents reconnect to it as to any
// restarted certifier.
func (c *control) takeOverCertifier(ctx context.Context, withNet bool) error {
	st := c.state()
	pid := st.Certifier.PID
	if err := signal([]int{pid}, syscall.SIGTERM); err != nil {
		return err
	}
	if !waitGone([]int{pid}, 20*time.Second) {
		return fmt.Errorf("certifier pid %d did not stop within 20 s of SIGTERM", pid)
	}
	if withNet {
		n, err := newCertNet(ctx, len(st.Replicas))
		if err != nil {
			return err
		}
		c.net = n
		n.linkOf = c.replicaOfClientPort
		if err := n.startRelay(st.CertifierAddr(), st.Certifier.Port); err != nil {
			return err
		}
	}
	return c.startCertifier(ctx, false)
}

// certifierListen is the address the certifier process listens on: every
// address of its namespace, if it has one.
func (c *control) certifierListen(port int) string {
	if c.net != nil {
		return net.JoinHostPort("0.0.0.0", strconv.Itoa(port))
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// certifierDial is where the harness reaches the certifier process
// directly (across its own veth, if the certifier has a namespace).
func (c *control) certifierDial(port int) string {
	if c.net != nil {
		return net.JoinHostPort(c.net.harnessLink().nsIP, strconv.Itoa(port))
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// replicaOfClientPort says which replica's agent owns the connection from
// 127.0.0.1:port to the certifier relay (-1: none, e.g. the harness).
func (c *control) replicaOfClientPort(port int) int {
	st := c.state()
	inode, err := netutil.ConnectedInode(port, st.Certifier.Port)
	if err != nil {
		return -1
	}
	for i, r := range st.Replicas {
		if netutil.OwnsSocket(r.Agent.PID, inode) {
			return i
		}
	}
	return -1
}

// startCertifier starts the certifier, with the hidden fault point
// --unsafe-fault-skip-conflict-check when unsafe, records its PID in
// cluster.json (so that cluster.Down stops it too) and waits until it
// answers.
func (c *control) startCertifier(ctx context.Context, unsafe bool) error {
	st := c.state()
	cert := st.Certifier
	logf, err := os.OpenFile(cert.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	addr := c.certifierDial(cert.Port)
	args := []string{"certifier", "--data-dir", cert.DataDir, "--listen", c.certifierListen(cert.Port),
		"--metrics-listen", c.certifierListen(cert.MetricsPort)}
	if unsafe {
		args = append(args, "--unsafe-fault-skip-conflict-check")
	}
	args = append(args, c.certArgs...)
	cmd := exec.Command(c.bin, args...)
	if c.net != nil {
		cmd = c.net.command(c.bin, args...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the certifier: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cert, c.certDone = cmd, done
	c.st.Certifier.PID = cmd.Process.Pid
	err = c.st.Save()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := cluster.QueryCertifier(ctx, addr)
		if err == nil && s.Pid == int64(cmd.Process.Pid) {
			c.mu.Lock()
			c.certRecovered = s.DurableVersion
			c.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the certifier did not become ready within 30 s (last error: %v)", err)
		}
		select {
		case <-done:
			return fmt.Errorf("the certifier exited; see %s", cert.Log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// certifierDecided asks the single certifier the highest version it has
// decided.
func (c *control) certifierDecided(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := cluster.QueryCertifier(ctx, c.certifierDial(c.state().Certifier.Port))
	if err != nil {
		return 0, err
	}
	return s.Version, nil
}

// awaitSessions waits until every replica's agent has a session with the
// certifier, or the group's leader, that runs now: it admitted the
// replica's history, so that a replica that held failed versions has
// undone them (mode ed). A fault that lands on a replica still holding
// them would leave it to be rebuilt, which this harness does not do.
func (c *control) awaitSessions(ctx context.Context) error {
	st := c.state()
	deadline := time.Now().Add(admitWait)
	var missing []string
	for time.Now().Before(deadline) {
		s, err := cluster.QueryCertifier(ctx, c.certifierAddrs())
		if err == nil {
			connected := map[string]bool{}
			for _, r := range s.Replicas {
				connected[r.Name] = r.Connected
			}
			missing = missing[:0]
			for _, r := range st.Replicas {
				if !connected[r.Name] {
					missing = append(missing, r.Name)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		if ctxtime.Sleep(ctx, 100*time.Millisecond) != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%v had no session with the certifier (the group's leader) within %s of the fault", missing, admitWait)
}

// certifierAddrs is where the harness asks the certifier, or every member
// of the group, as cluster.QueryCertifier takes it (the leader answers).
func (c *control) certifierAddrs() string {
	var addrs []string
	for _, m := range c.state().CertifierMembers() {
		addrs = append(addrs, c.certifierDial(m.Port))
	}
	return strings.Join(addrs, ",")
}

// recovered is the durable version the certifier started with.
func (c *control) recovered() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.certRecovered
}

// restartCertifier starts the certifier again after it was killed.
func (c *control) restartCertifier(ctx context.Context) error {
	c.mu.Lock()
	done := c.certDone
	c.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return errors.New("the killed certifier has not exited")
		}
	}
	return c.startCertifier(ctx, false)
}

// stopCertifier stops the certifier this harness started, by the PID it
// started, and records it stopped.
func (c *control) stopCertifier() {
	c.mu.Lock()
	cmd, done := c.cert, c.certDone
	c.cert = nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	c.mu.Lock()
	c.st.Certifier.PID = 0
	_ = c.st.Save()
	c.mu.Unlock()
}

// relayConnections names the relay's per-link counts (nil without a
// namespace).
func (c *control) relayConnections() map[string]int {
	if c.net == nil {
		return nil
	}
	out := map[string]int{}
	st := c.state()
	for i, n := range c.net.dialedPerLink() {
		name := "harness"
		if i < len(st.Replicas) {
			name = st.Replicas[i].Name
		}
		out[name] = n
	}
	return out
}

// terminateBackends asks replica i's PostgreSQL to terminate every client
// backend but the one asking (pg_terminate_backend: SIGTERM, the way an
// operator or a pooler's health check ends sessions) and returns their
// PIDs. The server stays up; the clients' sessions, the agent's applier and control
// connection lose their backends wherever they were.
func (c *control) terminateBackends(ctx context.Context, i int) ([]int, error) {
	reps := c.state().Replicas
	if i < 0 || i >= len(reps) {
		return nil, fmt.Errorf("no replica %d", i+1)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, harnessDSN(reps[i]))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The victims are chosen first: in one WHERE clause the planner may
	// call pg_terminate_backend before it excludes the asking backend.
	rows, err := conn.Query(cctx, `WITH victims AS MATERIALIZED (
			SELECT pid FROM pg_catalog.pg_stat_activity
			WHERE backend_type = 'client backend' AND pid <> pg_catalog.pg_backend_pid())
		SELECT pid FROM victims WHERE pg_catalog.pg_terminate_backend(pid)`)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make([]int, len(pids))
	for j, p := range pids {
		out[j] = int(p)
	}
	if len(out) == 0 {
		return nil, errors.New("no client backend to terminate")
	}
	return out, nil
}

const (
	// turnHolderSearch bounds the search for a backend that holds or waits
	// for the commit turn: under load one shows up within milliseconds.
	turnHolderSearch = 3 * time.Second
	// turnHolderPoll is the pause between two looks at tashkent.backends().
	turnHolderPoll = 2 * time.Millisecond
	// admitWait bounds the wait for a replica to admit clients again after
	// its backends were killed: crash recovery plus the agent's catch-up.
	admitWait = 60 * time.Second
)

// turnHoldersSQL lists the backends that hold or wait for the replica's
// commit turn (a certified local transaction, one committing, the agent's
// applier), those of local transactions first.
const turnHoldersSQL = `SELECT pid, state FROM tashkent.backends()
	WHERE state IN ('holding', 'committing', 'applying') AND pid <> pg_catalog.pg_backend_pid()
	ORDER BY state = 'applying', pid`

// clientBackendsSQL lists the client backends but the asking one.
const clientBackendsSQL = `SELECT pid FROM pg_catalog.pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_catalog.pg_backend_pid()`

// killBackend kills one backend of replica i's PostgreSQL with SIGKILL:
// one that holds or waits for the commit turn if one shows up within
// turnHolderSearch, else any client backend. It returns the PID and what
// the backend was doing. PostgreSQL then ends every other backend and
// reinitializes its shared memory, as after any backend crash.
func (c *control) killBackend(ctx context.Context, i int) (int, string, error) {
	reps := c.state().Replicas
	if i < 0 || i >= len(reps) {
		return 0, "", fmt.Errorf("no replica %d", i+1)
	}
	cctx, cancel := context.WithTimeout(ctx, turnHolderSearch+10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, harnessDSN(reps[i]))
	if err != nil {
		return 0, "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	pid, state := 0, ""
	for deadline := time.Now().Add(turnHolderSearch); pid == 0 && time.Now().Before(deadline); {
		var p int32
		err := conn.QueryRow(cctx, turnHoldersSQL).Scan(&p, &state)
		switch {
		case err == nil:
			pid = int(p)
		case errors.Is(err, pgx.ErrNoRows):
			time.Sleep(turnHolderPoll)
		default:
			return 0, "", fmt.Errorf("look for a backend that holds the commit turn: %w", err)
		}
	}
	if pid == 0 {
		rows, err := conn.Query(cctx, clientBackendsSQL)
		if err != nil {
			return 0, "", err
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return 0, "", err
		}
		if len(pids) == 0 {
			return 0, "", errors.New("no client backend to kill")
		}
		pid, state = int(pids[0]), "client"
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return pid, state, fmt.Errorf("kill backend %d: %w", pid, err)
	}
	return pid, state, nil
}

// awaitAdmitting waits until replica i admits clients again: its agent
// caught up after the database restarted its backends. The postmaster must
// be the one recorded (a backend crash does not restart it).
func (c *control) awaitAdmitting(ctx context.Context, i int) error {
	r := c.state().Replicas[i]
	deadline := time.Now().Add(admitWait)
	var last error
	for time.Now().Before(deadline) {
		if !process.Alive(r.Postgres.PID) {
			return fmt.Errorf("the postmaster (pid %d) of %s died", r.Postgres.PID, r.Name)
		}
		g, err := cluster.ReadGate(ctx, harnessDSN(r))
		switch {
		case err != nil:
			last = err
		case g.Admitting:
			return nil
		default:
			last = errors.New(g.Reason)
		}
		if ctxtime.Sleep(ctx, 100*time.Millisecond) != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s did not admit clients within %s of the backend crash (last: %v)", r.Name, admitWait, last)
}
