package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// State is what the agent is doing.
type State string

const (
	// StateStarting: the agent connects to its database and registers.
	StateStarting State = "starting"
	// StateCatchingUp: the replica is being caught up with the certifier's
	// durable version; clients are refused (57P03).
	StateCatchingUp State = "catching_up"
	// StateServing: the replica certifies and applies; clients are admitted.
	StateServing State = "serving"
	// StateRecovering: the database restarted or was lost; the agent waits
	// for it and starts again (Tashkent §7.1).
	StateRecovering State = "recovering"
	// StateHalted: a version could not be applied; the replica must be
	// rebuilt.
	StateHalted State = "halted"
)

var states = []State{StateStarting, StateCatchingUp, StateServing, StateRecovering, StateHalted}

// Agent is one replica's agent.
type Agent struct {
	cfg Config
	log *slog.Logger
	// origin and txnSeq make transaction ids: origin is the replica's name
	// and 128 random bits of this run of the agent, so an id never repeats
	// whatever happened to the replica (the certifier would take a repeated
	// id for a re-sent request and answer with the old version).
	origin  string
	txnSeq  atomic.Uint64
	seq     *sequence
	metrics *metrics
	// flowControlPauses counts the times the replica fell behind and asked
	// for a pause (flowcontrol.go).
	flowControlPauses atomic.Uint64
	// certifierDurable is the certifier's durable version as last heard
	// (stream replies, Status), for the replica's lag; durable is the one
	// the durability feeds pass on, heard only on streams that admitted
	// the replica's history (feed.go, admission.go); applyStalledSince is
	// when remote versions began to wait without the apply making
	// progress, in Unix nanoseconds, 0 while none waits (flowcontrol.go).
	certifierDurable  atomic.Uint64
	durable           *durableWatch
	applyStalledSince atomic.Int64

	ln          net.Listener
	socket      string
	metricsAddr net.Addr
	ready       chan struct{}

	mu       sync.Mutex
	state    State
	why      string
	run      *run // the current run, nil between runs
	conns    map[*backendConn]struct{}
	everUp   bool
	applyPID uint32 // the PID whose applier hello is accepted now; 0: none

	holds holds // the session that holds the replica's commits (hold.go)

	rewinds rewinding // pins and the rewind asked for (rewind.go)

	failed *failedWatch // the versions that failed, for the feeds (failed.go)
}

// New validates the configuration.
func New(cfg Config) (*Agent, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	origin := newOrigin(cfg.Name)
	return &Agent{
		cfg: cfg, log: cfg.Logger, origin: origin, seq: newSequence(origin), metrics: newMetrics(),
		ready: make(chan struct{}), state: StateStarting, conns: map[*backendConn]struct{}{}, durable: newDurableWatch(),
		failed: newFailedWatch(),
	}, nil
}

// newOrigin names this run of the agent: the replica's name and 128 random
// bits.
func newOrigin(name string) string {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic(fmt.Sprintf("agent: no randomness for a run id: %v", err))
	}
	return name + "#" + hex.EncodeToString(id[:])
}

// Ready is closed once the agent serves for the first time.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Socket is the path of the socket backends connect to, once Run listens.
func (a *Agent) Socket() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.socket
}

// MetricsAddr is the address /metrics, /healthz and the dashboard are
// served on, once Run serves them (nil before, or without
// Config.MetricsAddr).
func (a *Agent) MetricsAddr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metricsAddr
}

// State says what the agent does now, and why when it is not serving.
func (a *Agent) State() (State, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state, a.why
}

// CommittedVersion is the replica's version as the agent knows it.
func (a *Agent) CommittedVersion() uint64 { return a.seq.committed() }

// BacklogBytes are the bytes of delivered versions the agent holds until
// they are committed.
func (a *Agent) BacklogBytes() int { return a.seq.waitingBytes() }

// FlowControlPauses is how many times the replica fell behind and asked
// the certifier to hold the other replicas' commits.
func (a *Agent) FlowControlPauses() uint64 { return a.flowControlPauses.Load() }

// heardDurable records the certifier's durable version, for the lag.
func (a *Agent) heardDurable(v uint64) {
	for {
		old := a.certifierDurable.Load()
		if v <= old || a.certifierDurable.CompareAndSwap(old, v) {
			return
		}
	}
}

// LagVersions is how many versions the replica is behind the certifier's
// durable version as last heard.
func (a *Agent) LagVersions() uint64 {
	durable, committed := a.certifierDurable.Load(), a.seq.committed()
	if durable <= committed {
		return 0
	}
	return durable - committed
}

// ApplyStalled is how long remote versions have waited without the apply
// making progress; 0 while none waits.
func (a *Agent) ApplyStalled() time.Duration {
	since := a.applyStalledSince.Load()
	if since == 0 {
		return 0
	}
	return max(time.Since(time.Unix(0, since)), 0)
}

// statusAddr is the address of the agent's HTTP listener for the
// certifier to list (OpenSession.status_addr); empty without one.
func (a *Agent) statusAddr() string {
	if addr := a.MetricsAddr(); addr != nil {
		return addr.String()
	}
	return ""
}

func (a *Agent) setState(s State, why string) { a.transition(s, why, false) }

// transition moves to state s, unless keepHalted and the agent is halted;
// it reports whether it moved.
func (a *Agent) transition(s State, why string, keepHalted bool) bool {
	a.mu.Lock()
	if keepHalted && a.state == StateHalted {
		a.mu.Unlock()
		return false
	}
	a.state, a.why = s, why
	first := s == StateServing && !a.everUp
	if s == StateServing {
		a.everUp = true
	}
	a.metrics.setState(s)
	a.mu.Unlock()
	if first {
		close(a.ready)
	}
	return true
}

// serveUnlessHalted moves to StateServing unless the applier halted
// meanwhile, and reports whether it did.
func (a *Agent) serveUnlessHalted() bool { return a.transition(StateServing, "", true) }

// currentRun is the run that serves, nil between runs.
func (a *Agent) currentRun() *run {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.run
}

// Run serves until ctx ends: it finds and opens the socket, then starts
// the replica (start.go), serves, and starts it again whenever its
// database is lost, until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.listen(ctx); err != nil {
		return err
	}
	defer a.closeConns()
	defer a.ln.Close()
	defer a.rewinds.close()
	go a.accept(ctx)
	go a.verifyLoop(ctx)
	if a.cfg.MetricsAddr != "" {
		stop, err := a.serveMetrics(a.cfg.MetricsAddr)
		if err != nil {
			return err
		}
		defer stop()
	}
	delay := 50 * time.Millisecond
	for ctx.Err() == nil {
		r, err := a.start(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("could not start the replica; retrying", "err", err, "retry_in", delay)
				a.setState(StateRecovering, err.Error())
				_ = ctxtime.Sleep(ctx, delay)
				delay = min(2*delay, reconnectDelayMax)
			}
			continue
		}
		delay = 50 * time.Millisecond
		err = r.wait(ctx)
		if ctx.Err() != nil {
			r.closeGate("the tashkent agent of this replica stopped")
		}
		a.endRun(r)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errRestart):
			a.log.Warn("starting the replica's run again", "why", err)
			a.setState(StateRecovering, err.Error())
		default:
			a.log.Warn("lost the replica's database; recovering", "err", err)
			a.setState(StateRecovering, "the replica's database restarted or was lost: "+err.Error())
		}
	}
	return nil
}

// endRun stops a run and closes the backends' connections of it.
func (a *Agent) endRun(r *run) {
	a.mu.Lock()
	if a.run == r {
		a.run = nil
	}
	var conns []*backendConn
	for c := range a.conns {
		if c.run == r {
			conns = append(conns, c)
		}
	}
	a.mu.Unlock()
	for _, c := range conns {
		c.nc.Close()
	}
	r.close()
}

// closeConns closes every backend's connection: the agent stops.
func (a *Agent) closeConns() {
	a.mu.Lock()
	conns := make([]*backendConn, 0, len(a.conns))
	for c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	for _, c := range conns {
		c.nc.Close()
	}
}
