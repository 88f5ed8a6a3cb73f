package agent

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/replica"
)

type metrics struct {
	registry       *prometheus.Registry
	delivered      prometheus.Gauge
	applied        prometheus.Counter
	certifications *prometheus.CounterVec
	certifyLatency prometheus.Histogram
	// streamed counts the certifications of streamed writesets (also
	// counted in certifications); stagedBytes the fragments' bytes
	// forwarded to the certifier's Stage.
	streamed      *prometheus.CounterVec
	stagedBytes   prometheus.Counter
	syncs         *prometheus.CounterVec
	stateQueries  *prometheus.CounterVec
	feeds         prometheus.Gauge
	feedSends     prometheus.Counter
	batchVersions prometheus.Histogram
	dooms         *prometheus.CounterVec
	backends      prometheus.Gauge
	starts        prometheus.Counter
	state         *prometheus.GaugeVec

	flowControlPausing prometheus.Gauge
	flowControlPauses  prometheus.Counter
	writesRefused      prometheus.Gauge

	rewinds         prometheus.Counter
	rewoundVersions prometheus.Counter

	verify *verifyMetrics
	// copies is what the applier's COPY did, across the agent's runs
	// (each run's Applier counts into it).
	copies replica.CopyCounts
}

func newMetrics() *metrics {
	m := &metrics{
		registry:  prometheus.NewRegistry(),
		delivered: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_agent_delivered_version", Help: "Highest version the certifier delivered."}),
		applied:   prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_agent_remote_versions_applied_total", Help: "Remote versions the agent applied."}),
		certifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tashkent_agent_certifications_total",
			Help: "Certifications asked by the replica's backends, by outcome: commit, abort, unknown (no decision in time), unavailable (the agent could not ask)."}, []string{"outcome"}),
		certifyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tashkent_agent_certify_seconds",
			Help: "Time from a backend's certify request to the certifier's reply (durable in mw).", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		streamed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tashkent_agent_streamed_certifications_total",
			Help: "Certifications of streamed writesets (transactions over tashkent.stream_threshold, staged at the certifier in fragments), by outcome as tashkent_agent_certifications_total."}, []string{"outcome"}),
		stagedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_agent_staged_bytes_total",
			Help: "Bytes of streamed writesets' fragments forwarded to the certifier."}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tashkent_agent_syncs_total",
			Help: "Durable versions asked by backends for tashkent.sync_wait, by outcome: known, unavailable (not serving, or no certifier answer)."}, []string{"outcome"}),
		stateQueries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tashkent_agent_txn_state_queries_total",
			Help: "Transaction states asked by backends (tashkent.txn_state, wait_durable), by answer: durable, committed, failed, unknown, unavailable."}, []string{"state"}),
		feeds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_agent_durability_feeds",
			Help: "Durability feeds connected to the agent's socket: 1 while the server's feed worker follows the durable version."}),
		feedSends: prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_agent_durability_feed_sends_total",
			Help: "Durable versions sent to durability feeds: in mode ed as they advance, at most one per 10 ms in mw and base."}),
		batchVersions: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tashkent_agent_apply_batch_versions",
			Help: "Remote versions per apply transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
		dooms: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tashkent_agent_dooms_total",
			Help: "Local transactions made to give way to a remote writeset (Tashkent §8.2): blocker (aborted), displaced (certified, applied instead), terminated."}, []string{"as"}),
		backends: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_agent_backends", Help: "Backends connected to the agent's socket."}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_agent_starts_total",
			Help: "Start sequences run: the first, and one per recovery after the database restarted or was lost (attempts that failed included)."}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tashkent_agent_state",
			Help: "1 for the agent's state: starting, catching_up, serving, recovering, halted."}, []string{"state"}),
		flowControlPausing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_agent_flow_control_pausing",
			Help: "1 while this replica has fallen behind and asks the certifier to hold the other replicas' commits (flow control)."}),
		flowControlPauses: prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_agent_flow_control_pauses_total",
			Help: "Times this replica fell behind and asked for a pause."}),
		writesRefused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_agent_writes_refused",
			Help: "1 while this replica's apply is stuck and its clients' writes are refused (--refuse-writes-after)."}),
		rewinds: prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_agent_rewinds_total",
			Help: "Rewinds: the replica went back past versions that failed (taken before they were durable, lost with the certifier that decided them)."}),
		rewoundVersions: prometheus.NewCounter(prometheus.CounterOpts{Name: "tashkent_agent_rewound_versions_total",
			Help: "Versions undone by rewinds: those that failed and the durable ones after the pin, which the replica then applied again."}),
	}
	m.registry.MustRegister(m.delivered, m.applied, m.certifications, m.certifyLatency, m.streamed, m.stagedBytes, m.syncs, m.stateQueries, m.feeds, m.feedSends, m.batchVersions, m.dooms, m.backends, m.starts, m.state,
		m.flowControlPausing, m.flowControlPauses, m.writesRefused, m.rewinds, m.rewoundVersions)
	m.verify = newVerifyMetrics(m.registry)
	m.registerCopyCounters()
	m.setState(StateStarting)
	return m
}

// registerCopyCounters registers the counters of the applier's COPY,
// read from copies when scraped.
func (m *metrics) registerCopyCounters() {
	m.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tashkent_agent_apply_copy_rows_total",
			Help: "Remote rows the applier loaded with COPY (a table's 1,000 or more new rows in an apply transaction)."},
			func() float64 { rows, _ := m.copies.Read(); return float64(rows) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tashkent_agent_apply_copy_fallbacks_total",
			Help: "Apply attempts that used COPY and were made again by statements alone (COPY met a row that exists here)."},
			func() float64 { _, fallbacks := m.copies.Read(); return float64(fallbacks) }))
}

// outcomes are the certifications' outcome labels, by decision.
var outcomes = map[wire.DecisionKind]string{wire.Commit: "commit", wire.Abort: "abort", wire.Unknown: "unknown", wire.Unavailable: "unavailable"}

// certified counts a certification's decision.
func (m *metrics) certified(d wire.Decision, streamed bool) {
	m.certifications.WithLabelValues(outcomes[d.Kind]).Inc()
	if streamed {
		m.streamed.WithLabelValues(outcomes[d.Kind]).Inc()
	}
}

func (m *metrics) setState(s State) {
	for _, st := range states {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(string(st)).Set(v)
	}
}

// serveMetrics serves /metrics, /healthz (200 while serving, 503 with
// the state and why otherwise) and the dashboard (internal/dashboard).
func (a *Agent) serveMetrics(addr string) (func(), error) {
	a.registerGauges()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		state, why := a.State()
		if state != StateServing {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%s: %s\n", state, why)
			return
		}
		fmt.Fprintf(w, "%s: version %d\n", state, a.seq.committed())
	})
	view := a.newDashboard()
	view.Register(mux)
	a.mu.Lock()
	a.metricsAddr = ln.Addr()
	a.mu.Unlock()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() {
		srv.Close()
		view.Close()
	}, nil
}

// registerGauges registers the gauges read from the agent when scraped,
// and the Go runtime's and the process's standard metrics.
func (a *Agent) registerGauges() {
	a.metrics.registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	for _, g := range []struct {
		opts prometheus.GaugeOpts
		read func() float64
	}{
		{prometheus.GaugeOpts{Name: "tashkent_agent_replica_version", Help: "Highest version committed at the replica, as the agent knows it."},
			func() float64 { return float64(a.seq.committed()) }},
		{prometheus.GaugeOpts{Name: "tashkent_agent_certifier_durable_version", Help: "The certifier's durable version as the agent last heard it."},
			func() float64 { return float64(a.certifierDurable.Load()) }},
		{prometheus.GaugeOpts{Name: "tashkent_agent_lag_versions", Help: "Versions the replica is behind the certifier's durable version as last heard."},
			func() float64 { return float64(a.LagVersions()) }},
		{prometheus.GaugeOpts{Name: "tashkent_agent_apply_stalled_seconds", Help: "How long remote versions have waited without the apply making progress; 0 while none waits."},
			func() float64 { return a.ApplyStalled().Seconds() }},
		{prometheus.GaugeOpts{Name: "tashkent_agent_apply_backlog_bytes", Help: "Bytes of delivered versions the agent holds until they are committed (at most about --apply-backlog-bytes)."},
			func() float64 { return float64(a.seq.waitingBytes()) }},
	} {
		a.metrics.registry.MustRegister(prometheus.NewGaugeFunc(g.opts, g.read))
	}
}
