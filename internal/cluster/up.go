package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/pgext"
	"github.com/tashkent-db/tashkent/internal/pgserver"
)

const (
	// DefaultReplicas is the size of a new cluster when --replicas is not
	// given.
	DefaultReplicas = 3
	// replicasMax bounds --replicas: every replica is a PostgreSQL server
	// (32 MiB of shared buffers and a handful of processes) plus an agent
	// on this one machine; more is a deployment, not a local cluster.
	replicasMax = 16
	// DefaultReadyTimeout bounds how long up waits for one process to
	// become ready (an agent: until it has caught up and admits clients).
	DefaultReadyTimeout = 60 * time.Second
	// portAttemptsMax bounds the restarts of a process whose port, picked as
	// free, was taken by someone else before the process bound it.
	portAttemptsMax = 3
	// crashLeftoverWait bounds how long up waits for the remains of a
	// killed postmaster (zombie, orphaned backends) to go away.
	crashLeftoverWait = 15 * time.Second
	// sharedBuffers is modest: all replicas share one machine.
	sharedBuffers = "32MB"
	// database is the replicated database, the one clients connect to.
	database = "postgres"
)

// InstallHint says how to get PostgreSQL 15 on the machines tashkent runs on.
const InstallHint = "install PostgreSQL 15 with `apt-get install -y postgresql postgresql-contrib` " +
	"(or point TASHKENT_PG_BIN at the directory holding initdb and postgres)"

// Options configures Up.
type Options struct {
	// Dir is the cluster directory; created if missing.
	Dir string
	// Replicas is the number of replicas of a new cluster (0: 3). An
	// existing cluster with another number grows (replica add) or shrinks
	// (replica remove, highest index first; data kept) to it; 0 keeps it.
	Replicas int
	// Mode is the durability placement of a new cluster ("": mw). For an
	// existing cluster it must be "" or the recorded mode.
	Mode Mode
	// CertifierPort and BasePort fix the certifier's gRPC port and the
	// first replica's PostgreSQL port (replica K listens on BasePort+K-1);
	// 0 picks free ports. Only for a new cluster: an existing one keeps
	// its ports.
	CertifierPort int
	BasePort      int
	// Certifiers is the size of a new cluster's certifier group (0 or 1:
	// one certifier; 3 or 5: a Raft group, Tashkent §7.3). For an existing
	// cluster it must be 0 or the recorded size.
	Certifiers int
	// Binary is the tashkent executable run as certifiers and agents;
	// empty: this process's executable.
	Binary string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// ReadyTimeout bounds the wait for each process (0: 60 s).
	ReadyTimeout time.Duration
	// CertifierTLS makes a new cluster use mutual TLS on every certifier
	// channel, with a CA and certificates generated in the cluster
	// directory (certifier_tls.go).
	CertifierTLS bool
	// TrustDDLRoles, when not nil, sets whether the cluster's agents let
	// roles that are not superusers run DDL (the agent's --trust-ddl-roles);
	// nil keeps what the cluster recorded (a new cluster: no). It can
	// change only while no agent of the cluster runs (ddltrust.go).
	TrustDDLRoles *bool
	// AutoRebuild, when not nil, sets whether up runs the supervisor that
	// rebuilds a replica whose agent halted; nil keeps what the cluster
	// recorded (a new cluster: yes).
	AutoRebuild *bool
	// CertifierArgs, when not nil, are flags given to every certifier up
	// starts, after its config file, which they override (for example
	// --log-retention-bytes=1073741824); nil keeps what the cluster
	// recorded. They take effect when up next starts a certifier.
	CertifierArgs *[]string
	// AgentArgs, when not nil, are flags given to every agent up starts,
	// after its config file (recorded in the state).
	AgentArgs *[]string
}

// Up creates the cluster in o.Dir, or restarts whatever of the recorded
// cluster is not running, and returns its state once every PostgreSQL and
// certifier accepts connections and every agent serves its replica (the
// replica caught up and admits clients). Everything it starts is recorded
// in cluster.json as soon as it is started, so that Down can stop it even
// when Up fails halfway.
func Up(ctx context.Context, o Options) (*State, error) {
	if o.Dir == "" {
		return nil, errors.New("the cluster directory (--data-dir) is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if _, err := pgserver.FindBinDir(); err != nil {
		return nil, fmt.Errorf("PostgreSQL 15 is not installed: %s\n(%w)", InstallHint, err)
	}
	bin := o.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the tashkent executable: %w", err)
		}
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if err := makeClusterDir(dir); err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	st, err := Load(dir)
	switch {
	case errors.Is(err, ErrNoCluster):
		if st, err = newState(dir, o); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if err := checkCompatible(st, o); err != nil {
			return nil, err
		}
		if o.TrustDDLRoles != nil {
			st.TrustDDLRoles = *o.TrustDDLRoles
		}
		if o.AutoRebuild != nil {
			st.AutoRebuild = *o.AutoRebuild
		}
		if o.CertifierArgs != nil {
			st.CertifierArgs = *o.CertifierArgs
		}
		if o.AgentArgs != nil {
			st.AgentArgs = *o.AgentArgs
		}
	}
	st.Dir = dir
	st.Binary = bin
	st.setConfigPaths()
	if err := st.Save(); err != nil {
		return nil, err
	}
	if err := ensureCertifierTLS(st); err != nil {
		return st, err
	}
	u := &upper{st: st, o: o, portsUsed: map[int]bool{}}
	if err := u.startAllPostgres(ctx); err != nil {
		return st, err
	}
	if err := u.startCertifier(ctx); err != nil {
		return st, err
	}
	if err := u.startAllAgents(ctx); err != nil {
		return st, err
	}
	if err := u.resize(ctx, o.Replicas); err != nil {
		return st, err
	}
	if err := u.superviseIfAsked(ctx); err != nil {
		return st, err
	}
	u.reportHalted()
	return st, u.save()
}

// pgBinDir returns the bin directory of a PostgreSQL installation with the
// tashkent extension built from this binary's source (internal/pgext;
// built once per source and server, then reused). It is asked for only
// when a server must start, so that up on a running cluster needs no
// compiler or server headers.
func (u *upper) pgBinDir(ctx context.Context) (string, error) {
	u.prepare.Do(func() {
		u.binDir, u.prepareErr = pgext.Prepare(ctx)
		if u.prepareErr != nil {
			u.prepareErr = fmt.Errorf("build the tashkent extension: %w", u.prepareErr)
			return
		}
		u.progress("PostgreSQL 15 with the tashkent extension: %s", u.binDir)
	})
	return u.binDir, u.prepareErr
}

// makeClusterDir creates dir world-traversable: the postgres user must
// reach the data directories below it when up runs as root.
func makeClusterDir(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return os.Chmod(dir, 0o755)
	} else if err != nil {
		return err
	}
	if _, err := os.Stat(StatePath(dir)); err == nil {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() != lockFile {
			return fmt.Errorf("%s is not empty and holds no %s: give `tashkent up` a new or empty directory", dir, StateFile)
		}
	}
	return nil
}

func newState(dir string, o Options) (*State, error) {
	n := o.Replicas
	if n == 0 {
		n = DefaultReplicas
	}
	if n < 1 || n > replicasMax {
		return nil, fmt.Errorf("--replicas must be between 1 and %d, not %d", replicasMax, n)
	}
	mode := o.Mode
	if mode == "" {
		mode = ModeMW
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return nil, err
	}
	for _, p := range []int{o.CertifierPort, o.BasePort, o.BasePort + n - 1} {
		if p < 0 || p > 65535 {
			return nil, fmt.Errorf("port %d out of range", p)
		}
	}
	now := time.Now().UTC().Truncate(time.Second)
	st := &State{Created: now, Dir: dir, Mode: mode, CertifierTLS: newCertifierTLS(dir, o.CertifierTLS)}
	st.TrustDDLRoles = o.TrustDDLRoles != nil && *o.TrustDDLRoles
	st.AutoRebuild = o.AutoRebuild == nil || *o.AutoRebuild
	if o.CertifierArgs != nil {
		st.CertifierArgs = *o.CertifierArgs
	}
	if o.AgentArgs != nil {
		st.AgentArgs = *o.AgentArgs
	}
	st.BasePort = o.BasePort
	cd := filepath.Join(dir, "certifier")
	st.Certifier = Certifier{DataDir: cd, Port: o.CertifierPort, Log: filepath.Join(cd, "certifier.log")}
	if err := addCertifierMembers(st, dir, o); err != nil {
		return nil, err
	}
	for k := 1; k <= n; k++ {
		r, err := newReplica(dir, k, o.BasePort)
		if err != nil {
			return nil, err
		}
		st.Replicas = append(st.Replicas, r)
	}
	return st, nil
}

// checkCompatible refuses options that contradict an existing cluster.
func checkCompatible(st *State, o Options) error {
	if o.Replicas < 0 || o.Replicas > replicasMax {
		return fmt.Errorf("--replicas must be between 1 and %d, not %d", replicasMax, o.Replicas)
	}
	if o.Mode != "" && o.Mode != st.Mode {
		return fmt.Errorf("the cluster in %s runs mode %s, not %s (the mode of a cluster cannot change)", st.Dir, st.Mode, o.Mode)
	}
	if n := len(st.CertifierMembers()); o.Certifiers > 1 && o.Certifiers != n || o.Certifiers == 1 && n != 1 {
		return fmt.Errorf("the cluster in %s has %d certifier(s), not %d (the group's size is fixed when the cluster is created)", st.Dir, n, o.Certifiers)
	}
	if err := checkCertifierTLS(st, o); err != nil {
		return err
	}
	if err := checkDDLTrust(st, o); err != nil {
		return err
	}
	if o.CertifierPort != 0 && o.CertifierPort != st.Certifier.Port {
		return fmt.Errorf("the cluster in %s has its certifier on port %d; an existing cluster keeps its ports", st.Dir, st.Certifier.Port)
	}
	if first := st.Replicas[0]; o.BasePort != 0 && o.BasePort != first.Postgres.Port-first.Index+1 {
		return fmt.Errorf("the cluster in %s has %s's PostgreSQL on port %d; an existing cluster keeps its ports",
			st.Dir, first.Name, first.Postgres.Port)
	}
	return nil
}

// upper carries one run of Up. mu guards st (goroutines start replicas in
// parallel) and the progress writer.
type upper struct {
	st *State
	o  Options

	prepare    sync.Once
	binDir     string // PostgreSQL's programs, from the installation with the extension
	prepareErr error

	mu        sync.Mutex
	portsUsed map[int]bool
	halted    []*errAgentHalted // agents that halted, left running (up)
}

func (u *upper) save() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st.Save()
}

func (u *upper) progress(format string, args ...any) {
	if u.o.Progress == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(u.o.Progress, format+"\n", args...)
}

// freePort picks a free port not handed out earlier in this run (a port
// picked but not yet bound looks free to the kernel).
func (u *upper) freePort() (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for range 20 {
		p, err := netutil.FreePort()
		if err != nil {
			return 0, fmt.Errorf("pick a free port: %w", err)
		}
		if !u.portsUsed[p] {
			u.portsUsed[p] = true
			return p, nil
		}
	}
	return 0, errors.New("pick a free port: the kernel keeps handing out the same ports")
}

// parallel runs f for every replica at once and joins the errors.
func (u *upper) parallel(f func(r *Replica) error) error {
	errs := make([]error, len(u.st.Replicas))
	var wg sync.WaitGroup
	for i, r := range u.st.Replicas {
		wg.Go(func() { errs[i] = f(r) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (u *upper) startAllPostgres(ctx context.Context) error {
	return u.parallel(func(r *Replica) error { return u.startPostgres(ctx, r) })
}

// startPostgres adopts the postmaster serving the replica's data directory
// or starts one (running initdb first when the directory is new).
func (u *upper) startPostgres(ctx context.Context, r *Replica) error {
	pg := &r.Postgres
	if pid, ok := pgserver.Running(pg.DataDir); ok {
		info, err := pgserver.ReadPostmasterPID(pg.DataDir)
		u.mu.Lock()
		pg.PID = pid
		if err == nil && info.Port > 0 {
			pg.Port = info.Port
		}
		u.mu.Unlock()
		u.progress("%s: PostgreSQL already running (pid %d, port %d)", r.Name, pid, pg.Port)
		return u.save()
	}
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(r.Dir, 0o755); err != nil {
		return err
	}
	if err := u.finishDataDirSwap(r); err != nil {
		return err
	}
	binDir, err := u.pgBinDir(ctx)
	if err != nil {
		return err
	}
	fresh := true
	if _, err := os.Stat(filepath.Join(pg.DataDir, "PG_VERSION")); err == nil {
		fresh = false
	}
	if fresh {
		u.progress("%s: initdb %s", r.Name, pg.DataDir)
	}
	srv, err := pgserver.Init(ctx, pgserver.Config{
		DataDir:           pg.DataDir,
		Port:              pg.Port,
		SynchronousCommit: u.st.Mode.synchronousCommit(),
		Settings:          postgresSettings(u.st.Mode),
		BinDir:            binDir,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", r.Name, err)
	}
	pid, err := srv.StartDetached(ctx)
	for deadline, told := time.Now().Add(crashLeftoverWait), false; err != nil && crashLeftover(err) && time.Now().Before(deadline); told = true {
		// The previous postmaster was killed a moment ago: it is still a
		// zombie (PostgreSQL's own check sees its PID) or its orphaned
		// backends still hold the shared memory. They go away by themselves.
		if !told {
			u.progress("%s: the previous PostgreSQL is still going away; retrying", r.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		pid, err = srv.StartDetached(ctx)
	}
	if err != nil {
		return fmt.Errorf("%s: start PostgreSQL: %w", r.Name, err)
	}
	u.mu.Lock()
	pg.PID, pg.Port, pg.Log = pid, srv.Port(), srv.LogPath()
	u.portsUsed[pg.Port] = true
	u.mu.Unlock()
	u.progress("%s: PostgreSQL started (pid %d, port %d, synchronous_commit=%s, tashkent extension loaded)",
		r.Name, pid, pg.Port, map[bool]string{true: "on", false: "off"}[u.st.Mode.synchronousCommit()])
	return u.save()
}

// postgresSettings are a replica's settings beyond internal/pgserver's
// (which sets synchronous_commit per mode). The extension must be loaded
// at server start; REPEATABLE READ by default gives applications that
// change nothing snapshot isolation, which is what the cluster certifies
// (a transaction at READ COMMITTED reads a new snapshot per statement).
// In mode ed no replicated commit flushes the WAL (synchronous_commit is
// on only as the user's choice of a safe commit), so the WAL writer
// flushes as in mw (pgserver's walWriterFlushAfter).
func postgresSettings(mode Mode) map[string]string {
	settings := map[string]string{
		"shared_buffers":                sharedBuffers,
		"shared_preload_libraries":      pgext.Library,
		"default_transaction_isolation": "repeatable read",
	}
	if mode == ModeED {
		settings["wal_writer_flush_after"] = "0"
	}
	return settings
}

// crashLeftover reports whether PostgreSQL refused to start because of the
// remains of a postmaster killed a moment ago.
func crashLeftover(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, `lock file "postmaster.pid" already exists`) ||
		strings.Contains(msg, "pre-existing shared memory block")
}

// startDetached starts a tashkent subcommand (args writes its config file
// and returns its command line), recording its PID through
// record (and saving) before waiting for ready, so that a failed Up leaves
// nothing untracked. Ports that are 0 are picked free, and picked again if
// the process loses the race for them.
func (u *upper) startDetached(ctx context.Context, what, logPath string, ports []*int,
	args func() ([]string, error), record func(pid int), ready func(ctx context.Context, pid int) error) error {
	auto := make([]bool, len(ports))
	for i, p := range ports {
		auto[i] = *p == 0
	}
	for attempt := 1; ; attempt++ {
		for i, p := range ports {
			if auto[i] {
				port, err := u.freePort()
				if err != nil {
					return err
				}
				u.mu.Lock()
				*p = port
				u.mu.Unlock()
			}
		}
		argv, err := args()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		c, err := spawnDetached(u.st.Binary, argv, logPath)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		u.mu.Lock()
		record(c.PID)
		u.mu.Unlock()
		if err := u.save(); err != nil {
			c.kill()
			return err
		}
		err = waitReady(ctx, c, what, u.o.ReadyTimeout, func(ctx context.Context) error { return ready(ctx, c.PID) })
		if err == nil {
			return nil
		}
		u.mu.Lock()
		record(0)
		u.mu.Unlock()
		if serr := u.save(); serr != nil {
			return errors.Join(err, serr)
		}
		var se *errStartup
		anyAuto, fixed := false, []string(nil)
		for i, a := range auto {
			anyAuto = anyAuto || a
			if !a {
				fixed = append(fixed, hostPort(*ports[i]))
			}
		}
		if errors.As(err, &se) && se.portInUse(fixed...) && anyAuto && attempt < portAttemptsMax {
			u.progress("%s: a port was taken meanwhile; retrying on other ports", what)
			continue
		}
		return err
	}
}

func (u *upper) startCertifier(ctx context.Context) error {
	if len(u.st.MoreCertifiers) > 0 {
		return u.startCertifierGroup(ctx)
	}
	c := &u.st.Certifier
	if c.PID != 0 && certifierIdentity(c).check(c.PID) == nil {
		u.progress("certifier: already running (pid %d, %s)", c.PID, u.st.CertifierAddr())
		return nil
	}
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return err
	}
	err := u.startDetached(ctx, "certifier", c.Log, []*int{&c.Port, &c.MetricsPort},
		func() ([]string, error) {
			return u.certifierCommand(c, "The certifier")
		},
		func(pid int) { c.PID = pid },
		u.certifierServes(&c.Port))
	if err != nil {
		return err
	}
	u.progress("certifier: started (pid %d, %s, log %s)", c.PID, u.st.CertifierAddr(), c.Log)
	return nil
}

func dialOnce(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// certifierServes is the readiness check of a certifier (or group member)
// started on *port (read when checked: startDetached picks a free port
// first): it answers Status, from the process just started.
func (u *upper) certifierServes(port *int) func(ctx context.Context, pid int) error {
	return func(ctx context.Context, pid int) error {
		addr := hostPort(*port)
		if err := dialOnce(ctx, addr); err != nil {
			return err
		}
		st, err := u.st.QueryCertifier(ctx, addr)
		if err != nil {
			return err
		}
		if st.Pid != int64(pid) {
			return fmt.Errorf("%s is served by pid %d, not by the certifier just started", addr, st.Pid)
		}
		return nil
	}
}
