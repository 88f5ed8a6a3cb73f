package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tashkent-db/tashkent/internal/pgwire"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// Proxy is one replica's proxy.
type Proxy struct {
	cfg     Config
	rep     *replication
	metrics *metrics
	// origin and txnSeq make transaction ids: origin is the replica's name
	// and a random id of this run of the proxy, so an id never repeats,
	// whatever happened to the replica's database (the certifier would take
	// a repeated id for a retry and answer with the old transaction's
	// version).
	origin string
	txnSeq atomic.Uint64

	mu       sync.Mutex
	sessions map[uint32]*session // by backend PID
	addr     net.Addr
	ready    chan struct{}

	// commitSent, set by tests only, runs once a certified transaction's
	// local commit is sent, before its answer is read (export_test.go).
	commitSent atomic.Pointer[func(backend net.Conn)]
}

// New validates the configuration.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return &Proxy{cfg: cfg, origin: newOrigin(cfg.Name), sessions: map[uint32]*session{}, metrics: newMetrics(), ready: make(chan struct{})}, nil
}

// newOrigin names this run of the proxy: the replica's name and 128 random
// bits.
func newOrigin(name string) string {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic(fmt.Sprintf("proxy: no randomness for a run id: %v", err))
	}
	return name + "#" + hex.EncodeToString(id[:])
}

func (p *Proxy) nextTxnSeq() uint64 { return p.txnSeq.Add(1) }

// Addr is the client-facing address once Run is serving. It blocks until
// then, forever if Run fails first: a caller that must not hang waits on
// Ready and on Run's return together.
func (p *Proxy) Addr() net.Addr {
	<-p.ready
	return p.addr
}

// Ready is closed once Run is serving and Addr answers at once.
func (p *Proxy) Ready() <-chan struct{} { return p.ready }

// Run serves until ctx ends. metricsAddr, if not empty, serves Prometheus
// metrics.
func (p *Proxy) Run(ctx context.Context, metricsAddr string) error {
	rep, err := p.startReplication(ctx)
	if err != nil {
		return err
	}
	p.rep = rep
	defer rep.close(context.Background())
	if err := p.configureSequences(ctx, rep.applyConn); err != nil {
		return err
	}
	if err := replica.PrepareApplySession(ctx, rep.applyConn); err != nil {
		return err
	}
	client, releaseAuth, err := p.clientConfig()
	if err != nil {
		return err
	}
	defer releaseAuth()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); rep.applyLoop(ctx) }()
	go func() { defer wg.Done(); rep.maintainLoop(ctx) }()
	defer wg.Wait()
	if err := rep.catchUp(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy listen on %s: %w", p.cfg.Listen, err)
	}
	p.addr = ln.Addr()
	if metricsAddr != "" {
		stop, err := p.serveMetrics(metricsAddr)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}
	srv := &pgwire.Server{
		Config:  client,
		Handler: func(w *pgwire.Session) { p.serveSession(ctx, w) },
	}
	close(p.ready)
	p.cfg.Logger.Info("proxy ready", "listen", p.addr.String(), "backend", p.cfg.BackendAddr,
		"certifier", p.cfg.Certifier, "mode", p.cfg.Mode, "version", rep.seq.Committed(),
		"tls", client.TLS != nil, "auth", p.cfg.Auth)
	err = srv.Serve(ctx, ln)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// clientConfig is the client side's pgwire configuration: TLS and who
// authenticates (auth.go).
func (p *Proxy) clientConfig() (pgwire.Config, func(), error) {
	cfg := pgwire.Config{
		BackendAddr:   p.cfg.BackendAddr,
		StartupParams: map[string]string{"default_transaction_isolation": "repeatable read"},
		Admit:         func(map[string]string) *pgproto3.ErrorResponse { return p.admitToReplica() },
		Logger:        p.cfg.Logger,

		AllowPasswordlessLogins: p.cfg.AllowPasswordlessLogins,
	}
	if p.cfg.TLSCert != "" {
		tlsCfg, err := pgwire.LoadTLSConfig(p.cfg.TLSCert, p.cfg.TLSKey)
		if err != nil {
			return cfg, nil, err
		}
		cfg.TLS = tlsCfg
	}
	lookup, release, err := p.clientAuth()
	if err != nil {
		return cfg, nil, err
	}
	cfg.SCRAM = lookup
	return cfg, release, nil
}

// configureSequences records the replica's index and the stride in its
// database and aligns its sequences (replica/sequences.go), over the
// proxy's admin connection, so that nothing of it is replicated.
func (p *Proxy) configureSequences(ctx context.Context, conn *pgx.Conn) error {
	index := p.cfg.ReplicaIndex
	if index == 0 {
		recorded, stride, ok, err := replica.SequenceSettings(ctx, conn)
		if err != nil {
			return err
		}
		if !ok {
			p.cfg.Logger.Warn("no replica index: sequences are not offset per replica and hand out the same values on every replica; start the proxy with --replica-index")
			return nil
		}
		index = recorded
		if p.cfg.SequenceStride != stride {
			p.cfg.Logger.Info("keeping the recorded sequence stride", "stride", stride)
			p.cfg.SequenceStride = stride
		}
	}
	if err := replica.ConfigureSequences(ctx, conn, index, p.cfg.SequenceStride); err != nil {
		return err
	}
	p.cfg.Logger.Info("sequences offset per replica", "replica_index", index, "stride", p.cfg.SequenceStride)
	return nil
}

func (p *Proxy) serveSession(ctx context.Context, w *pgwire.Session) {
	defer w.Close()
	if refusal := p.admit(w.Params); refusal != nil {
		w.SendErrorResponse(refusal)
		return
	}
	s := newSession(p, w)
	if err := s.setup(); errors.Is(err, errRecovering) {
		w.SendErrorResponse(fatal(codeCannotConnectNow, "the replica is recovering after its database restarted; retry shortly"))
		return
	} else if err != nil {
		s.log.Error("session setup failed", "err", err)
		w.SendErrorResponse(errorResponse(codeObjectNotInPrereqState, "tashkent could not prepare the session", err.Error(), ""))
		return
	}
	p.mu.Lock()
	p.sessions[w.BackendPID] = s
	p.mu.Unlock()
	p.metrics.sessions.Inc()
	defer func() {
		p.mu.Lock()
		if p.sessions[w.BackendPID] == s { // PostgreSQL may have given the PID to a newer session
			delete(p.sessions, w.BackendPID)
		}
		p.mu.Unlock()
		p.metrics.sessions.Dec()
	}()
	if err := s.run(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Info("session ended", "err", err)
		switch {
		case s.endAfterReply != nil:
			// The session's own last word (its transaction committed; see
			// endAfterReply), not lost to a statement the client sent after
			// the COMMIT in the same message.
			w.SendErrorResponse(s.endAfterReply)
		case errors.Is(err, errBackendGone):
			w.SendErrorResponse(fatal(codeAdminShutdown, "terminating connection: the replica's database connection was lost"))
		case errors.Is(err, errProtocol):
			w.SendErrorResponse(fatal(codeProtocolViolation, err.Error()))
		case errors.Is(err, errDeferredBegin):
			e := fatal(codeAdminShutdown, "terminating connection: "+err.Error())
			e.Hint = "Reconnect and run the transaction again; nothing of it ran."
			w.SendErrorResponse(e)
		}
	}
}

// admit refuses, once it authenticated, a client the proxy cannot serve:
// one that asked for another database, or any while the replica is
// recovering or halted (admitToReplica, asked again: the replica may have
// changed since).
func (p *Proxy) admit(params map[string]string) *pgproto3.ErrorResponse {
	if db := params["database"]; db != "" && db != p.cfg.Database {
		return fatal(codeFeatureNotSupported, fmt.Sprintf("tashkent replicates database %q, not %q", p.cfg.Database, db))
	}
	if params["database"] == "" && params["user"] != p.cfg.Database {
		return fatal(codeFeatureNotSupported, fmt.Sprintf("tashkent replicates database %q; connect to it by name", p.cfg.Database))
	}
	return p.admitToReplica()
}

// admitToReplica refuses every client while the replica is recovering or
// halted. pgwire asks it before the client authenticates and before a
// backend connection is opened (pgwire.Config.Admit), as PostgreSQL
// answers 57P03 while it starts up; it says nothing about the client.
func (p *Proxy) admitToReplica() *pgproto3.ErrorResponse {
	if p.rep.recovering.Load() || p.rep.needRecover.Load() {
		return fatal(codeCannotConnectNow, "the replica is recovering after its database restarted; retry shortly")
	}
	if e := p.rep.broken.Load(); e != nil {
		return replicaHalted(*e)
	}
	return nil
}

// replicaHalted is the FATAL error that keeps clients off a replica whose
// applier stopped for good (cause): new connections get it, and sessions
// get it at their next transaction.
func replicaHalted(cause error) *pgproto3.ErrorResponse {
	e := fatal(codeCannotConnectNow, "the replica stopped applying the cluster's commits and must be rebuilt: "+cause.Error())
	e.Hint = "Connect to another replica. OPERATIONS.md says how to repair or rebuild this one."
	return e
}

func fatal(code, message string) *pgproto3.ErrorResponse {
	return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: message}
}

func (p *Proxy) sessionByPID(pid uint32) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[pid]
}

// closeSessions disconnects every client (their backends are gone).
func (p *Proxy) closeSessions(reason string) {
	p.mu.Lock()
	sessions := make([]*session, 0, len(p.sessions))
	for _, s := range p.sessions {
		sessions = append(sessions, s)
	}
	p.mu.Unlock()
	for _, s := range sessions {
		s.log.Info("closing session", "reason", reason)
		s.w.ClientConn.Close()
		s.w.ServerConn.Close()
	}
}

type metrics struct {
	registry  *prometheus.Registry
	outcomes  *prometheus.CounterVec
	sessions  prometheus.Gauge
	delivered prometheus.Gauge
	applied   prometheus.Counter
	phases    *prometheus.HistogramVec
	// phaseObservers are phases' children, one per commitPhase, resolved
	// once rather than by label on every COMMIT.
	phaseObservers [phaseCount]prometheus.Observer
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tashkent_proxy_transactions_total",
			Help: "Update transactions by outcome: commit, abort (certification), preempted (by a remote writeset), unknown."}, []string{"outcome"}),
		sessions:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_proxy_sessions", Help: "Client sessions."}),
		delivered: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_proxy_delivered_version", Help: "Highest version the certifier delivered."}),
		applied:   prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_proxy_remote_versions_applied_total", Help: "Remote versions applied."}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tashkent_proxy_commit_phase_seconds",
			Help: "Time an update transaction's COMMIT spends in each phase (Tashkent §6.2): collect (read the writeset), " +
				"certify (certifier round trip, durable in mw), order (wait for earlier versions), local (record the version and commit).",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16)}, []string{"phase"}),
	}
	m.registry.MustRegister(m.outcomes, m.sessions, m.delivered, m.applied, m.phases)
	for phase, name := range commitPhaseNames {
		m.phaseObservers[phase] = m.phases.WithLabelValues(name)
	}
	return m
}

func (p *Proxy) serveMetrics(addr string) (func(), error) {
	p.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tashkent_proxy_replica_version", Help: "Highest version committed at the replica."},
		func() float64 { return float64(p.rep.seq.Committed()) }))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.metrics.registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}

// commitPhase is a phase of COMMIT (Tashkent §6.2), a label of the phases
// histogram.
type commitPhase int

const (
	phaseCollect commitPhase = iota
	phaseCertify
	phaseOrder
	phaseLocal
	phaseCount
)

var commitPhaseNames = [phaseCount]string{"collect", "certify", "order", "local"}

// phaseClock times the phases of one COMMIT into the phases histogram.
type phaseClock struct {
	observers *[phaseCount]prometheus.Observer
	last      time.Time
}

func (m *metrics) phaseClock() *phaseClock {
	return &phaseClock{observers: &m.phaseObservers, last: time.Now()}
}

// lap records the time since the previous lap (or the start) as phase.
func (c *phaseClock) lap(phase commitPhase) {
	now := time.Now()
	c.observers[phase].Observe(now.Sub(c.last).Seconds())
	c.last = now
}
