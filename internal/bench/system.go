package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/pgext"
	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// System names one of the configurations the bench compares.
type System string

const (
	// SyncOn is one standalone PostgreSQL 15 with synchronous_commit=on:
	// the baseline every ratio is taken against.
	SyncOn System = "sync-on"
	// SyncOff is one standalone PostgreSQL with synchronous_commit=off.
	SyncOff System = "sync-off"
	// SyncOnRR is SyncOn with every transaction at REPEATABLE READ
	// (default_transaction_isolation), the snapshot isolation tashkent
	// gives: it separates what snapshot isolation costs a workload (first
	// updater wins, the others retry after 40001) from what tashkent adds.
	SyncOnRR System = "sync-on-rr"
	// MW is a tashkent cluster in mode mw: replicas with
	// synchronous_commit=off, durability in the certifier's log.
	MW System = "mw"
	// Base is a tashkent cluster in mode base: replicas with
	// synchronous_commit=on.
	Base System = "base"
	// MWFast and MWSafe are a tashkent cluster in mode ed (eventual
	// durability: row locks held until the commit point, the certifier's
	// early delivery), started as `tashkent up --mode ed` starts one. Every
	// client session of MWFast runs with synchronous_commit=off (fast
	// transactions: acknowledged at the commit point), of MWSafe with the
	// replicas' default, on (safe: acknowledged once durable).
	MWFast System = "mw-fast"
	MWSafe System = "mw-safe"
	// MWNewOrderFast is mw-safe with TPC-C's NewOrder transactions fast
	// (tpcc.go: a trigger on new_order sets synchronous_commit off for the
	// transaction); tpcc only.
	MWNewOrderFast System = "mw-neworder-fast"
	// Streaming is PostgreSQL streaming replication: a primary and
	// synchronous standbys (synchronous_standby_names), clients on the
	// primary.
	Streaming System = "streaming"
	// PgpoolNative is pgpool-II in native replication mode over
	// standalone PostgreSQL backends.
	PgpoolNative System = "pgpool-native"
	// PgpoolSI is pgpool-II in snapshot-isolation mode.
	PgpoolSI System = "pgpool-si"
)

// AllSystems is the default set of `tashkent bench pgbench`, in the order
// runs alternate.
var AllSystems = []System{SyncOn, SyncOff, MW, Base}

// KnownSystems are all the systems the bench can start.
var KnownSystems = []System{SyncOn, SyncOff, SyncOnRR, MW, Base, MWFast, MWSafe, MWNewOrderFast, Streaming, PgpoolNative, PgpoolSI}

// ParseSystem checks a system name.
func ParseSystem(s string) (System, error) {
	for _, k := range KnownSystems {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown system %q (want sync-on, sync-off, sync-on-rr, mw, base, mw-fast, mw-safe, mw-neworder-fast, streaming, pgpool-native or pgpool-si)", s)
}

func (k System) tashkent() bool { return k == MW || k == Base || k.eventualDurability() }

// eventualDurability reports whether the system is a tashkent cluster in
// mode ed.
func (k System) eventualDurability() bool { return k == MWFast || k == MWSafe || k == MWNewOrderFast }

// mode is the durability mode of a tashkent system's agents (--mode).
func (k System) mode() string {
	if k.eventualDurability() {
		return "ed"
	}
	return string(k)
}

// sessionOptions are the PostgreSQL options of every client session of a
// run (libpq's PGOPTIONS): mode ed reads the session's effective
// synchronous_commit to make each transaction fast or safe.
func (k System) sessionOptions() string {
	if k == MWFast {
		return "-c synchronous_commit=off"
	}
	return ""
}

// replicated reports whether the system runs several servers (its replica
// count means something).
func (k System) replicated() bool { return k != SyncOn && k != SyncOff && k != SyncOnRR }

const (
	// sharedBuffers is the same for every PostgreSQL the bench starts.
	sharedBuffers = "128MB"
	readyTimeout  = 60 * time.Second
	// agentReadyTimeout bounds an agent's start, its catch-up included:
	// on a busy two-core machine its CREATE EXTENSION alone installs
	// triggers on every table of a freshly seeded database.
	agentReadyTimeout = 3 * time.Minute
	agentGrace        = 10 * time.Second
	pgpoolGrace       = 10 * time.Second
	certGrace         = 20 * time.Second
	pgStopTimeout     = 60 * time.Second
	startAttempts     = 3
)

// system is one running configuration: one PostgreSQL (standalone), N
// PostgreSQL servers of a peer, or N PostgreSQL replicas with the tashkent
// extension, a certifier and one agent per replica (tashkent).
type system struct {
	kind     System
	label    string
	dir      string
	replicas int

	pgs []*pgserver.Server
	// certifiers are the single certifier, or every member of the
	// certifier group (Config.Certifiers) in member id order; certAddr is
	// its address, or every member's, comma-separated (what agents and
	// cluster.QueryCertifier take: the leader answers).
	certifiers []*proc
	certAddr   string
	agents     []*proc
	// metricsPort are the agents' Prometheus ports (breakdown.go).
	metricsPort []int

	// delay is the one-way delay of the links between the system's hosts
	// (delay.go); 0: none.
	delay  time.Duration
	relays []*relay
	// seed, when set, loads a tashkent system's data straight into every
	// replica before the certifier and the agents start (seed.go).
	seed func(ctx context.Context, dsn string) error
	// pgpool and its client port (pgpool systems).
	pgpool     *proc
	pgpoolPort int
}

func label(k System, replicas int) string {
	switch k {
	case SyncOn:
		return "pg sync=on"
	case SyncOnRR:
		return "pg sync=on RR"
	case SyncOff:
		return "pg sync=off"
	}
	s := "tashkent " + string(k)
	if !k.tashkent() {
		s = string(k)
	}
	if replicas > 1 {
		s += " x" + strconv.Itoa(replicas)
	}
	return s
}

// endpoints are the connection strings pgbench connects to: every
// replica's PostgreSQL of a tashkent system (clients connect to the
// database itself), pgpool, or the one server clients use otherwise.
func (s *system) endpoints() []string {
	if s.pgpool != nil {
		return []string{dsn(s.pgpoolPort)}
	}
	if !s.kind.tashkent() {
		return []string{s.pgs[0].DSN("postgres")}
	}
	out := make([]string, len(s.pgs))
	for i, pg := range s.pgs {
		out[i] = pg.DSN("postgres")
	}
	return out
}

func dsn(port int) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path: "/postgres", RawQuery: "sslmode=disable"}
	return u.String()
}

// pids lists the processes of the system, for the record and the reader.
func (s *system) pids() string {
	out := ""
	for i, pg := range s.pgs {
		out += fmt.Sprintf(" postgres%d=%d", i+1, pg.PID())
	}
	for i, p := range s.certifiers {
		if len(s.certifiers) == 1 {
			out += fmt.Sprintf(" certifier=%d", p.pid())
		} else {
			out += fmt.Sprintf(" certifier%d=%d", i+1, p.pid())
		}
	}
	if s.pgpool != nil {
		out += fmt.Sprintf(" pgpool=%d", s.pgpool.pid())
	}
	for i, p := range s.agents {
		if p != nil {
			out += fmt.Sprintf(" agent%d=%d", i+1, p.pid())
		}
	}
	return out
}

// start brings the system up: PostgreSQL servers (initdb, start), then for
// tashkent the seed, the certifier and the agents. Whatever started is
// recorded in s as soon as it runs, so that stop can stop it even after a
// failure.
func (s *system) start(ctx context.Context, r *runner) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return err
	}
	switch s.kind {
	case Streaming:
		return s.startStreaming(ctx, r)
	case PgpoolNative, PgpoolSI:
		return s.startPgpool(ctx, r)
	}
	n := 1
	if s.kind.tashkent() {
		n = s.replicas
	}
	s.pgs = make([]*pgserver.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			srv, err := pgserver.Init(ctx, s.pgConfig(r, i))
			if err != nil {
				errs[i] = err
				return
			}
			r.mu.Lock()
			s.pgs[i] = srv
			r.mu.Unlock()
			if _, err := srv.StartDetached(ctx); err != nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !s.kind.tashkent() {
		return nil
	}
	if err := s.seedReplicas(ctx); err != nil {
		return err
	}
	if err := s.startCertifier(ctx, r); err != nil {
		return err
	}
	if s.delay > 0 { // the agents reach the certifier through a delaying relay
		rl, err := startRelay(s.certAddr, s.delay)
		if err != nil {
			return err
		}
		s.relays = append(s.relays, rl)
	}
	s.agents = make([]*proc, n)
	s.metricsPort = make([]int, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.startAgent(ctx, r, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pgConfig is the configuration of server i of a standalone or tashkent
// system. Every server gets the same settings but for synchronous_commit
// (on for sync-on, base and mode ed, off for sync-off and mw, with the WAL
// writer setting pgserver pairs with it; mode ed's is mw's, as
// internal/cluster sets it: no replicated commit flushes the replica's
// WAL there, synchronous_commit is only the sessions' choice of fast or
// safe) and, for tashkent,
// the extension: the same shared_buffers, the same default isolation
// (READ COMMITTED: the extension keeps a session's level, and maps only
// SERIALIZABLE to REPEATABLE READ), the same binaries (the extension's
// installation links the system's programs).
func (s *system) pgConfig(r *runner, i int) pgserver.Config {
	settings := map[string]string{"shared_buffers": sharedBuffers}
	if s.kind == SyncOnRR {
		settings["default_transaction_isolation"] = "repeatable read"
	}
	binDir := r.binDir
	if s.kind.tashkent() {
		settings["shared_preload_libraries"] = pgext.Library
		binDir = r.extBinDir
	}
	if s.kind.eventualDurability() {
		settings["wal_writer_flush_after"] = "0"
	}
	return pgserver.Config{
		DataDir:           filepath.Join(s.dir, "pg"+strconv.Itoa(i+1)),
		SynchronousCommit: s.kind == SyncOn || s.kind == SyncOnRR || s.kind == Base || s.kind.eventualDurability(),
		Settings:          r.pgSettings(settings),
		BinDir:            binDir,
		NoSync:            true, // a throwaway instance: initdb's final sync only costs setup time
		Env:               r.pgEnv(),
	}
}

// startWithPorts starts a process on freshly picked free ports, and again
// on other ports when one was taken before the process bound it.
func startWithPorts(ctx context.Context, r *runner, what string, nports int, timeout time.Duration, start func(ports []int) (*proc, error),
	record func(*proc, []int), ready func(context.Context, []int) error) error {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(nports)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		p, err := start(ports)
		if err != nil {
			return err
		}
		r.mu.Lock()
		record(p, ports)
		r.mu.Unlock()
		err = p.waitReady(ctx, timeout, func(ctx context.Context) error { return ready(ctx, ports) })
		if err == nil {
			return nil
		}
		if p.addrInUse() && attempt < startAttempts {
			continue
		}
		return err
	}
}

// freePorts picks n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range 20 * n {
		if len(ports) == n {
			break
		}
		p, err := netutil.FreePort()
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	if len(ports) < n {
		return nil, errors.New("pick free ports: the kernel keeps handing out the same ports")
	}
	return ports, nil
}

// profileArgs puts the hidden root flag --cpu-profile before the
// subcommand when profiles are asked for.
func (r *runner) profileArgs(name string) []string {
	if r.cfg.ProfileDir == "" {
		return nil
	}
	return []string{"--cpu-profile=" + filepath.Join(r.cfg.ProfileDir, name+".prof")}
}

// startCertifier starts the system's certifier, or its certifier group
// (certifiergroup.go) with Config.Certifiers above 1.
func (s *system) startCertifier(ctx context.Context, r *runner) error {
	if r.cfg.Certifiers > 1 {
		return s.startCertifierGroup(ctx, r, r.cfg.Certifiers)
	}
	dataDir := filepath.Join(s.dir, "certifier")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	what := s.label + " certifier"
	return startWithPorts(ctx, r, what, 1, readyTimeout,
		func(ports []int) (*proc, error) {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
			args := append(r.profileArgs(s.fileName()+"-certifier"), "--log-level=warn", "certifier",
				"--data-dir", dataDir, "--listen", addr, "--metrics-listen", "")
			args = append(args, r.certifierSyncArgs()...)
			if s.kind.eventualDurability() {
				args = append(args, "--max-procs", strconv.Itoa(cluster.EDCertifierThreads))
			}
			args = append(args, r.cfg.CertifierArgs...)
			return startProc(what, r.cfg.Binary, args, filepath.Join(s.dir, "certifier.log"))
		},
		func(p *proc, ports []int) {
			s.certifiers = []*proc{p}
			s.certAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		},
		func(ctx context.Context, ports []int) error {
			return servedBy(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), s.certifiers[0].pid())(ctx)
		})
}

// fileName is the system's label as a file name ("tashkent-mw-x3").
func (s *system) fileName() string { return strings.ReplaceAll(s.label, " ", "-") }

// startAgent starts `tashkent agent` for replica i, beside its database
// as a deployment runs it (connected through the server's Unix socket),
// and waits until it serves: its /healthz answers 200 and the database
// admits clients (tashkent.status().admitting: the gate the agent opens
// once the replica has caught up).
func (s *system) startAgent(ctx context.Context, r *runner, i int) error {
	name := "replica" + strconv.Itoa(i+1)
	what := s.label + " agent " + strconv.Itoa(i+1)
	return startWithPorts(ctx, r, what, 1, agentReadyTimeout,
		func(ports []int) (*proc, error) {
			args := append(r.profileArgs(fmt.Sprintf("%s-agent%d", s.fileName(), i+1)), "--log-level=warn", "agent",
				"--name", name,
				"--replica-index", strconv.Itoa(i+1), // sequences offset per replica, as a deployment would run
				"--certifier", s.certifierAddrForAgents(),
				"--mode", s.kind.mode(),
				"--database", "postgres",
				"--postgres", agentConnString(s.pgs[i]),
				"--metrics", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
			if r.cfg.Staleness > 0 {
				args = append(args, "--staleness", r.cfg.Staleness.String())
			}
			args = append(args, r.cfg.AgentArgs...)
			return startProc(what, r.cfg.Binary, args, filepath.Join(s.dir, name+"-agent.log"))
		},
		func(p *proc, ports []int) { s.agents[i], s.metricsPort[i] = p, ports[0] },
		func(ctx context.Context, ports []int) error {
			if err := agentHealthy(ctx, ports[0]); err != nil {
				return err
			}
			return admitting(ctx, s.pgs[i])
		})
}

// agentHealthy asks an agent's /healthz, which answers 200 while it
// serves.
func agentHealthy(ctx context.Context, port int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent /healthz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// admitting reports whether the replica admits clients. The bench's own
// connections are the postgres superuser's, which the extension lets in
// while the gate is closed (tashkent.recovery_roles), so it must ask.
func admitting(ctx context.Context, pg *pgserver.Server) error {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT admitting FROM tashkent.status()`).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("the replica does not admit clients yet")
	}
	return nil
}

// agentConnString is how an agent reaches its replica: the server's Unix
// socket when it has one, else TCP.
func agentConnString(pg *pgserver.Server) string {
	host := "127.0.0.1"
	if socket := pg.SocketPath(); socket != "" {
		host = filepath.Dir(socket)
	}
	return fmt.Sprintf("host=%s port=%d user=postgres sslmode=disable", host, pg.Port())
}

// certifierAddrForAgents is the certifier's address (every member's, for
// a group: the agents follow the leader), or the relay's that delays the
// link to a single certifier.
func (s *system) certifierAddrForAgents() string {
	if len(s.relays) > 0 {
		return s.relays[0].addr()
	}
	return s.certAddr
}

// stop stops everything of the system that runs, in the order of
// dependence: agents (each closes its replica's gate and its backends'
// connections, so nothing commits while the rest goes away), pgpool, the
// certifier (every member of a group), then PostgreSQL (fast shutdown).
// Each process is signalled by the PID the bench started it with.
func (s *system) stop() error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range s.agents {
		if p != nil {
			wg.Go(func() {
				if err := p.stop(agentGrace); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if s.pgpool != nil {
		if err := s.pgpool.stop(pgpoolGrace); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.stopCertifiers(); err != nil {
		errs = append(errs, err)
	}
	for _, rl := range s.relays {
		rl.close()
	}
	for _, pg := range s.pgs {
		if pg != nil {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), pgStopTimeout)
				defer cancel()
				if err := pg.Stop(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// direct runs statements on every PostgreSQL of the system that accepts
// them (maintenance that is no replicated data: VACUUM, CHECKPOINT, which
// the extension keeps local).
func (s *system) direct(ctx context.Context, stmts ...string) error {
	for i, pg := range s.pgs {
		if s.kind == Streaming && i > 0 {
			break // standbys are read-only; they replay the primary's VACUUM
		}
		conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
		if err != nil {
			return fmt.Errorf("%s: %w", s.label, err)
		}
		for _, q := range stmts {
			if _, err := conn.Exec(ctx, q); err != nil {
				conn.Close(context.Background())
				return fmt.Errorf("%s: %s: %w", s.label, q, err)
			}
		}
		conn.Close(context.Background())
	}
	return nil
}

// certStatus reads the certifier's counters (nil for systems without one).
func (s *system) certStatus(ctx context.Context) (*certCounters, error) {
	if len(s.certifiers) == 0 {
		return nil, nil
	}
	st, err := cluster.QueryCertifier(ctx, s.certAddr)
	if err != nil {
		return nil, err
	}
	return &certCounters{version: st.Version, certifications: st.Certifications, aborts: st.Aborts, fsyncs: st.Fsyncs}, nil
}

type certCounters struct{ version, certifications, aborts, fsyncs uint64 }

// converge waits until every replica of a tashkent system has committed
// every version the certifier assigned (tashkent.committed_version()), so
// that no run starts while the previous one is still being applied
// somewhere, and returns that version.
func (s *system) converge(ctx context.Context, timeout time.Duration) (uint64, error) {
	if !s.kind.tashkent() {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := s.certStatus(ctx)
	if err != nil {
		return 0, err
	}
	for i, pg := range s.pgs {
		if err := awaitCommitted(ctx, pg, st.version); err != nil {
			return 0, fmt.Errorf("%s: replica %d: %w (certifier at %d, waited %s)", s.label, i+1, err, st.version, timeout)
		}
	}
	return st.version, nil
}

// awaitCommitted waits until the replica has committed version v.
func awaitCommitted(ctx context.Context, pg *pgserver.Server, v uint64) error {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		got, err := committedVersion(ctx, conn)
		if err == nil && got >= v {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("at version %d (err %v)", got, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// committedVersion is the replica's version: the highest version its
// database has committed.
func committedVersion(ctx context.Context, conn *pgx.Conn) (uint64, error) {
	var v int64
	if err := conn.QueryRow(ctx, `SELECT tashkent.committed_version()`).Scan(&v); err != nil {
		return 0, err
	}
	return uint64(v), nil
}

// selectOne runs SELECT 1 through a fresh connection.
func selectOne(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// prepareExtension finds, or builds the first time, the PostgreSQL
// installation with the tashkent extension (internal/pgext) when the run
// has a tashkent system.
func (r *runner) prepareExtension(ctx context.Context) error {
	for _, s := range r.systems {
		if !s.kind.tashkent() {
			continue
		}
		dir, err := pgext.Prepare(ctx)
		if err != nil {
			return fmt.Errorf("%s runs PostgreSQL with the tashkent extension: %w", s.label, err)
		}
		r.extBinDir = dir
		return nil
	}
	return nil
}
