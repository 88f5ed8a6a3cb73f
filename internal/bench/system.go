package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/replica"
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
	// MWPLpgSQL is MW with writes captured by the PL/pgSQL capture
	// functions rather than the C one (proxy --capture plpgsql): what
	// the C capture saves (replica/doc.go, "Capture in C").
	MWPLpgSQL System = "mw-plpgsql"
	// Base is a tashkent cluster in mode base: replicas with
	// synchronous_commit=on.
	Base System = "base"
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
var KnownSystems = []System{SyncOn, SyncOff, SyncOnRR, MW, MWPLpgSQL, Base, Streaming, PgpoolNative, PgpoolSI}

// ParseSystem checks a system name.
func ParseSystem(s string) (System, error) {
	for _, k := range KnownSystems {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown system %q (want sync-on, sync-off, sync-on-rr, mw, mw-plpgsql, base, streaming, pgpool-native or pgpool-si)", s)
}

func (k System) tashkent() bool { return k == MW || k == MWPLpgSQL || k == Base }

// mode is a tashkent system's proxy --mode.
func (k System) mode() string {
	if k == MWPLpgSQL {
		return string(MW)
	}
	return string(k)
}

// replicated reports whether the system runs several servers (its replica
// count means something).
func (k System) replicated() bool { return k != SyncOn && k != SyncOff && k != SyncOnRR }

const (
	// sharedBuffers is the same for every PostgreSQL the bench starts.
	sharedBuffers = "128MB"
	readyTimeout  = 60 * time.Second
	proxyGrace    = 10 * time.Second
	certGrace     = 20 * time.Second
	pgStopTimeout = 60 * time.Second
	startAttempts = 3
)

// system is one running configuration: one PostgreSQL (standalone) or N
// PostgreSQL replicas, a certifier and one proxy per replica (tashkent).
type system struct {
	kind     System
	label    string
	dir      string
	replicas int

	pgs       []*pgserver.Server
	certifier *proc
	certAddr  string
	proxies   []*proc
	proxyPort []int
	// metricsPort are the proxies' Prometheus ports (breakdown.go).
	metricsPort []int

	// delay is the one-way delay of the links between the system's hosts
	// (delay.go); 0: none.
	delay  time.Duration
	relays []*relay
	// seed, when set, loads a tashkent system's data straight into every
	// replica before the certifier and the proxies start (seed.go).
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

// endpoints are the connection strings pgbench connects to: the proxies of
// a tashkent system, the server itself otherwise.
func (s *system) endpoints() []string {
	if s.pgpool != nil {
		return []string{dsn(s.pgpoolPort)}
	}
	if !s.kind.tashkent() {
		return []string{s.pgs[0].DSN("postgres")}
	}
	out := make([]string, len(s.proxyPort))
	for i, p := range s.proxyPort {
		out[i] = dsn(p)
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
	if s.certifier != nil {
		out += fmt.Sprintf(" certifier=%d", s.certifier.pid())
	}
	if s.pgpool != nil {
		out += fmt.Sprintf(" pgpool=%d", s.pgpool.pid())
	}
	for i, p := range s.proxies {
		if p != nil {
			out += fmt.Sprintf(" proxy%d=%d", i+1, p.pid())
		}
	}
	return out
}

// captureLanguage says, for a tashkent system, in what its replicas
// capture writes (" capture=c" or " capture=plpgsql", from the first
// replica): the C capture is built only where the server headers are
// found (replica/native.go), and a run without it costs more CPU per
// write.
func (s *system) captureLanguage(ctx context.Context) string {
	if !s.kind.tashkent() || len(s.pgs) == 0 {
		return ""
	}
	conn, err := pgx.Connect(ctx, s.pgs[0].DSN("postgres"))
	if err != nil {
		return " capture=unknown (" + err.Error() + ")"
	}
	defer conn.Close(ctx)
	lang, err := replica.CaptureLanguage(ctx, conn)
	if err != nil {
		return " capture=unknown (" + err.Error() + ")"
	}
	return " capture=" + lang
}

// start brings the system up: PostgreSQL servers (initdb, start), then for
// tashkent the certifier and the proxies. Whatever started is recorded in s
// as soon as it runs, so that stop can stop it even after a failure.
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
			pgDir := filepath.Join(s.dir, "pg"+strconv.Itoa(i+1))
			settings := map[string]string{"shared_buffers": sharedBuffers}
			if s.kind == SyncOnRR {
				settings["default_transaction_isolation"] = "repeatable read"
			}
			srv, err := pgserver.Init(ctx, pgserver.Config{
				DataDir:           pgDir,
				SynchronousCommit: s.kind == SyncOn || s.kind == SyncOnRR || s.kind == Base,
				Settings:          r.pgSettings(settings),
				BinDir:            r.binDir,
				NoSync:            true, // a throwaway instance: initdb's final sync only costs setup time
				Env:               r.pgEnv(),
			})
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
	if s.delay > 0 { // the proxies reach the certifier through a delaying relay
		rl, err := startRelay(s.certAddr, s.delay)
		if err != nil {
			return err
		}
		s.relays = append(s.relays, rl)
	}
	s.proxies = make([]*proc, n)
	s.proxyPort = make([]int, n)
	s.metricsPort = make([]int, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.startProxy(ctx, r, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startWithPorts starts a process on freshly picked free ports, and again
// on other ports when one was taken before the process bound it.
func startWithPorts(ctx context.Context, r *runner, what string, nports int, start func(ports []int) (*proc, error),
	record func(*proc, []int), ready func(context.Context, []int) error) error {
	for attempt := 1; ; attempt++ {
		ports := make([]int, nports)
		for i := range ports {
			p, err := netutil.FreePort()
			if err != nil {
				return fmt.Errorf("%s: pick a free port: %w", what, err)
			}
			ports[i] = p
		}
		p, err := start(ports)
		if err != nil {
			return err
		}
		r.mu.Lock()
		record(p, ports)
		r.mu.Unlock()
		err = p.waitReady(ctx, readyTimeout, func(ctx context.Context) error { return ready(ctx, ports) })
		if err == nil {
			return nil
		}
		if p.addrInUse() && attempt < startAttempts {
			continue
		}
		return err
	}
}

// profileArgs puts the hidden root flag --cpu-profile before the
// subcommand when profiles are asked for.
func (r *runner) profileArgs(name string) []string {
	if r.cfg.ProfileDir == "" {
		return nil
	}
	return []string{"--cpu-profile=" + filepath.Join(r.cfg.ProfileDir, name+".prof")}
}

func (s *system) startCertifier(ctx context.Context, r *runner) error {
	dataDir := filepath.Join(s.dir, "certifier")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	what := s.label + " certifier"
	return startWithPorts(ctx, r, what, 1,
		func(ports []int) (*proc, error) {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
			args := append(r.profileArgs(string(s.kind)+"-certifier"), "--log-level=warn", "certifier",
				"--data-dir", dataDir, "--listen", addr, "--metrics-listen", "")
			args = append(args, r.certifierSyncArgs()...)
			return startProc(what, r.cfg.Binary, args, filepath.Join(s.dir, "certifier.log"))
		},
		func(p *proc, ports []int) {
			s.certifier = p
			s.certAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		},
		func(ctx context.Context, ports []int) error {
			st, err := cluster.QueryCertifier(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
			if err != nil {
				return err
			}
			if int(st.Pid) != s.certifier.pid() {
				return fmt.Errorf("port %d is served by pid %d, not by the certifier just started", ports[0], st.Pid)
			}
			return nil
		})
}

func (s *system) startProxy(ctx context.Context, r *runner, i int) error {
	name := "replica" + strconv.Itoa(i+1)
	what := s.label + " proxy " + strconv.Itoa(i+1)
	return startWithPorts(ctx, r, what, 2,
		func(ports []int) (*proc, error) {
			args := append(r.profileArgs(fmt.Sprintf("%s-proxy%d", s.kind, i+1)), "--log-level=warn", "proxy",
				"--metrics-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
				"--name", name,
				"--replica-index", strconv.Itoa(i+1), // sequences offset per replica, as a deployment would run
				"--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
				"--backend", backendAddr(s.pgs[i]),
				"--database", "postgres",
				"--certifier", s.certifierAddrForProxies(),
				"--mode", s.kind.mode(),
				"--allow-passwordless-logins") // the bench's PostgreSQL trusts local connections; loopback only
			if s.kind == MWPLpgSQL {
				args = append(args, "--capture", "plpgsql")
			}
			if r.cfg.ProxyStaleness > 0 {
				args = append(args, "--staleness", r.cfg.ProxyStaleness.String())
			}
			return startProc(what, r.cfg.Binary, args, filepath.Join(s.dir, name+"-proxy.log"))
		},
		func(p *proc, ports []int) { s.proxies[i], s.proxyPort[i], s.metricsPort[i] = p, ports[0], ports[1] },
		func(ctx context.Context, ports []int) error { return selectOne(ctx, dsn(ports[0])) })
}

// certifierAddrForProxies is the certifier's address, or the relay's
// that delays the link to it.
func (s *system) certifierAddrForProxies() string {
	if len(s.relays) > 0 {
		return s.relays[0].addr()
	}
	return s.certAddr
}

// stop stops everything of the system that runs, in the order of
// dependence: proxies (so nothing commits while the rest goes away), the
// certifier, then PostgreSQL (fast shutdown). Each process is signalled by
// the PID the bench started it with.
func (s *system) stop() error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range s.proxies {
		if p != nil {
			wg.Go(func() {
				if err := p.stop(proxyGrace); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if s.pgpool != nil {
		if err := s.pgpool.stop(proxyGrace); err != nil {
			errs = append(errs, err)
		}
	}
	if s.certifier != nil {
		if err := s.certifier.stop(certGrace); err != nil {
			errs = append(errs, err)
		}
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

// direct runs statements on every PostgreSQL of the system, bypassing the
// proxies (maintenance that is not replicated data: VACUUM, CHECKPOINT).
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

// certStatus reads the certifier's counters (nil for standalone systems).
func (s *system) certStatus(ctx context.Context) (*certCounters, error) {
	if s.certifier == nil {
		return nil, nil
	}
	st, err := cluster.QueryCertifier(ctx, s.certAddr)
	if err != nil {
		return nil, err
	}
	return &certCounters{version: st.Version, certifications: st.Certifications, aborts: st.Aborts, fsyncs: st.Fsyncs}, nil
}

type certCounters struct{ version, certifications, aborts, fsyncs uint64 }

// converge waits until every replica has committed every version the
// certifier assigned, so that no run starts while the previous one is still
// being applied somewhere.
func (s *system) converge(ctx context.Context, timeout time.Duration) error {
	if !s.kind.tashkent() || len(s.pgs) < 2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := s.certStatus(ctx)
	if err != nil {
		return err
	}
	for i, pg := range s.pgs {
		conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
		if err != nil {
			return err
		}
		for {
			v, err := replica.ReadVersion(ctx, conn)
			if err == nil && v >= st.version {
				break
			}
			select {
			case <-ctx.Done():
				conn.Close(context.Background())
				return fmt.Errorf("%s: replica %d at version %d (err %v), certifier at %d after %s",
					s.label, i+1, v, err, st.version, timeout)
			case <-time.After(20 * time.Millisecond):
			}
		}
		conn.Close(context.Background())
	}
	return nil
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

// backendAddr is the replica's Unix socket when it has one: the proxy beside
// its replica, as a deployment would run it.
func backendAddr(pg *pgserver.Server) string {
	if socket := pg.SocketPath(); socket != "" {
		return socket
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port()))
}
