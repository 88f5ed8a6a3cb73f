package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/tashkent-db/tashkent/internal/certification"
)

// Result is what one seed's run produced.
type Result struct {
	Seed       uint64
	Config     Config
	TraceHash  uint64   // equal for equal seeds and configs: determinism
	Violations []string // empty when every checker passed
	Stats      Stats
	Trace      []string // the event trace, when Options.Trace is set
}

// Stats counts what a run did, for reports and for tests that the faults
// really happened.
type Stats struct {
	Events               int
	Transactions         int // begun
	Committed            int // acknowledged commits
	Aborted              int
	Unknown              int // outcome unknown to the client (timeout, crash)
	ReadOnly             int
	Versions             uint64 // final log length
	ReplicaCrashes       int
	CertifierCrashes     int
	Partitions           int
	Dropped              int
	Duplicated           int
	StreamBreaks         int
	Resent               int // requests re-sent after a reconnection
	SettledFromLog       int // pending calls answered from delivered entries
	CommitReplies        int // commit replies that answered a call (settling from entries comes first)
	DuplicateOutcomes    int // certifier answered a retry with the original version
	TooOld               int // aborts below the low-water mark
	LostTailVersions     int // versions mw replicas lost on crashes and replayed
	SoftRecoveries       int // local commits the store refused, applied as remote
	BatchesCancelled     int // apply batches cancelled behind an abandoned version
	Overloaded           int // requests the certifier received over its in-flight limit
	CertifierRecreations int // the certifier re-created from an empty data directory
	Refusals             int // streams the certifier refused (certifier.Admit)
	Rebuilds             int // refused replicas rebuilt
	// RebuildsWithoutDonor are the rebuilds that found no serving
	// replica to copy and caught up from the log's start instead: the
	// real supervisor cannot do that, so an operator must act there.
	RebuildsWithoutDonor int
	// Mode ed (ed.go).
	VersionFailures int // certifier crashes that lost versions delivered before they were durable
	Rewinds         int // replicas that undid failed versions (back to a pin)
	SafeFailed      int // safe commits whose version failed, never acknowledged (TK006)
	FastFailed      int // fast commits acknowledged whose version then failed
	// EarlyStops are the entries the certifier's recent ring could not
	// hold without dropping one not yet durable: delivered once durable.
	EarlyStops      int
	ConvergedAtTick int64
}

// Options change how a run is observed, not what it does.
type Options struct {
	Trace bool // keep a readable trace in Result.Trace
}

// violationsMax stops a broken run from flooding the report.
const violationsMax = 20

// Run simulates one seed with cfg.
func Run(seed uint64, cfg Config, opts Options) (res Result) {
	w := newWorld(seed, cfg, opts)
	defer func() {
		if p := recover(); p != nil {
			// A panic is a broken invariant in real code (the order
			// panics on a gap) or in the simulation: a finding either way.
			w.violate("panic at tick %d: %v", w.now, p)
		}
		res = w.result()
	}()
	w.start()
	w.loop()
	w.check()
	return w.result()
}

// event is one scheduled step. fn runs at tick at; seq breaks ties in
// scheduling order, so the run depends only on the seed.
type event struct {
	at   int64
	seq  uint64
	name string
	fn   func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// world is the whole simulated cluster.
type world struct {
	seed uint64
	cfg  Config
	opts Options
	rng  *rand.Rand
	now  int64

	queue    eventQueue
	eventSeq uint64

	net      *network
	cert     *certProcess
	replicas []*replica
	hist     *history
	lineages lineages
	// Mode ed: every entry the certifier decided (and may have delivered
	// before it was written or durable), and the crashes that lost some.
	decided  map[epochVersion]certification.TxnID
	failures []failure
	// supervisor rebuilds the replicas the certifier refused.
	supervisor supervisor

	healing    bool // faults stopped, no new transactions
	converged  bool
	hash       uint64
	trace      []string
	violations []string
	stats      Stats
}

func newWorld(seed uint64, cfg Config, opts Options) *world {
	w := &world{
		seed: seed, cfg: cfg, opts: opts,
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		hash: fnvOffset,
	}
	w.hist = newHistory(w)
	w.lineages.ofEpoch = make(map[uint64]int)
	w.decided = make(map[epochVersion]certification.TxnID)
	w.supervisor.w = w
	w.net = newNetwork(w)
	w.cert = newCertifier(w)
	for i := range cfg.Replicas {
		w.replicas = append(w.replicas, newReplica(w, i))
	}
	return w
}

func (w *world) start() {
	w.cert.start()
	for _, r := range w.replicas {
		r.start()
	}
	startNemesis(w)
	w.after(w.cfg.WorkloadTicks, "heal", w.heal)
}

// loop runs events until the cluster converged after healing, or the time
// limit.
func (w *world) loop() {
	limit := w.cfg.WorkloadTicks + w.cfg.HealTicksMax
	for w.queue.Len() > 0 && !w.converged && len(w.violations) < violationsMax {
		e := popEvent(w)
		if e.at > limit {
			break
		}
		w.now = e.at
		w.stats.Events++
		w.hashEvent(e)
		e.fn()
	}
}

func popEvent(w *world) *event { return heap.Pop(&w.queue).(*event) }

// after schedules fn to run delay ticks from now (at least one).
func (w *world) after(delay int64, name string, fn func()) {
	w.eventSeq++
	heap.Push(&w.queue, &event{at: w.now + max(delay, 1), seq: w.eventSeq, name: name, fn: fn})
}

// between draws an integer in [lo, hi].
func (w *world) between(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	return lo + w.rng.Int64N(hi-lo+1)
}

// chance is true with probability perMille/1000.
func (w *world) chance(perMille int) bool {
	return perMille > 0 && w.rng.IntN(1000) < perMille
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashEvent adds every event's time and kind to the trace hash, so that
// two runs that differ anywhere have different hashes.
func (w *world) hashEvent(e *event) {
	h := (w.hash ^ uint64(e.at)) * fnvPrime
	for i := 0; i < len(e.name); i++ {
		h = (h ^ uint64(e.name[i])) * fnvPrime
	}
	w.hash = h
}

// note adds a step to the trace hash (and the readable trace if asked).
// Hashing numbers instead of formatting strings keeps thousands of seeds
// fast.
func (w *world) note(kind string, a, b, c uint64) {
	h := w.hash
	for i := 0; i < len(kind); i++ {
		h = (h ^ uint64(kind[i])) * fnvPrime
	}
	for _, x := range [...]uint64{uint64(w.now), a, b, c} {
		for range 8 {
			h = (h ^ (x & 0xff)) * fnvPrime
			x >>= 8
		}
	}
	w.hash = h
	if w.opts.Trace {
		w.trace = append(w.trace, traceLine(w.now, kind, [3]uint64{a, b, c}))
	}
}

func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.note("violation", uint64(len(w.violations)), 0, 0)
	if len(w.violations) < violationsMax {
		w.violations = append(w.violations, msg)
	}
}

// heal stops the faults and the workload: crashed nodes restart,
// partitions heal, messages flow, and the cluster must converge.
func (w *world) heal() {
	w.healing = true
	w.note("heal", 0, 0, 0)
	w.net.healAll()
	if !w.cert.up {
		w.cert.restart()
	}
	for _, r := range w.replicas {
		switch {
		case !r.up:
			r.restart()
		case !r.dbUp:
			r.resumeAfterDatabaseRestart()
		}
	}
	w.after(1, "convergence-check", w.checkConverged)
}

// checkConverged ends the run once every replica holds every durable
// version on a stream the certifier admitted, and nothing is in flight.
// (Equal version numbers alone do not say that a replica holds the log's
// versions.)
func (w *world) checkConverged() {
	if w.quiescent() {
		w.converged = true
		w.stats.ConvergedAtTick = w.now - w.cfg.WorkloadTicks
		return
	}
	w.after(1, "convergence-check", w.checkConverged)
}

func (w *world) quiescent() bool {
	c := w.cert
	if !c.up || len(c.pending) > 0 || c.writing {
		return false
	}
	for _, r := range w.replicas {
		if !r.up || r.recovering || r.halted || r.db.version != c.disk.durable() || !r.idle() || !c.admitted(r) {
			return false
		}
	}
	return true
}

func (w *world) result() Result {
	w.stats.Versions = w.cert.disk.durable()
	return Result{
		Seed: w.seed, Config: w.cfg, TraceHash: w.hash,
		Violations: w.violations, Stats: w.stats, Trace: w.trace,
	}
}

// Report is a failing run's description for a test log.
func (r Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d violation(s)\n", r.Seed, len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	fmt.Fprintf(&b, "config: %+v\nstats: %+v\n", r.Config, r.Stats)
	return b.String()
}
