package order

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// model is the dumb reference: one owner per delivered version, scanned
// from scratch every time.
type model struct {
	local     map[uint64]bool      // delivered versions a backend commits
	span      map[uint64]spanRange // versions of spans, by version
	bytes     map[uint64]int       // each version's entry size
	dropped   map[uint64]bool      // delivered as a local span's: no bytes kept
	committed uint64
	delivered uint64
	open      spanRange // a remote span whose transaction is open
	applied   uint64    // its last fragment applied
	restart   bool
}

func (m *model) next(max int) [2]uint64 {
	if m.restart {
		return [2]uint64{}
	}
	if m.open.first != 0 {
		if v := m.applied + 1; v <= m.delivered {
			return [2]uint64{v, v}
		}
		return [2]uint64{}
	}
	for v := m.committed + 1; v <= m.delivered; v++ {
		if m.local[v] {
			continue
		}
		if m.span[v].first != 0 {
			return [2]uint64{v, v}
		}
		last := v
		for last+1 <= m.delivered && !m.local[last+1] && m.span[last+1].first == 0 && int(last+1-v) < max {
			last++
		}
		return [2]uint64{v, last}
	}
	return [2]uint64{}
}

// held is the bytes the order should hold: delivered, not committed,
// neither a local span's nor a fragment applied in the open span.
func (m *model) held() int {
	n := 0
	for v := m.committed + 1; v <= m.delivered; v++ {
		switch {
		case m.dropped[v]:
		case m.open.contains(v) && v <= m.applied:
		default:
			n += m.bytes[v]
		}
	}
	return n
}

// remoteWaiting counts remote transactions waiting, a span as one.
func (m *model) remoteWaiting() int {
	n := 0
	for v := m.committed + 1; v <= m.delivered; v++ {
		if !m.local[v] && (m.span[v].first == 0 || m.span[v].first == v) {
			n++
		}
	}
	return n
}

// txn is a transaction a backend commits itself.
type txn struct {
	l           *Local
	first, last uint64
}

// world runs Order against a simulated database (which commits each
// version at its turn, exactly once; a span's versions at once) and the
// reference model. Abandon's Restart starts a new run: the order is
// reset to the database's version, the backends that still hold versions
// are inherited, and the log is delivered again from there.
type world struct {
	t        *testing.T
	rng      *rand.Rand
	o        *Order
	m        model
	db       uint64 // the database's committed version
	by       map[uint64]string
	log      map[uint64]logentry.Entry // every entry the certifier committed
	queued   []logentry.Entry          // committed, not delivered yet (a span's rest)
	locals   map[uint64]txn            // delivered, uncommitted, not abandoned, by first version
	cancel   bool                      // the applier was told to cancel its batch
	restart  bool                      // the agent was told to end its run
	seq      uint64
	maxBatch int
}

func newWorld(t *testing.T, seed uint64) *world {
	return &world{t: t, rng: rand.New(rand.NewPCG(seed, 7)), o: New(me, 0),
		m:  model{local: map[uint64]bool{}, span: map[uint64]spanRange{}, bytes: map[uint64]int{}, dropped: map[uint64]bool{}},
		by: map[uint64]string{}, log: map[uint64]logentry.Entry{}, locals: map[uint64]txn{},
		maxBatch: 1 + int(seed%4)}
}

func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s (seed state: db %d, committed %d, delivered %d)", fmt.Sprintf(format, args...), w.db, w.o.Committed(), w.o.Delivered())
}

func (w *world) commit(v uint64, who string) {
	if v != w.db+1 {
		w.fail("%s committed version %d after %d", who, v, w.db)
	}
	if prev, ok := w.by[v]; ok {
		w.fail("version %d committed twice: by %s and %s", v, prev, who)
	}
	w.by[v], w.db = who, v
}

// deliver delivers the next entry: one the log has already (after a
// restart), the rest of a span, or a new transaction's first.
func (w *world) deliver() {
	v := w.o.Delivered() + 1
	e, ok := w.log[v]
	switch {
	case ok:
	case len(w.queued) > 0:
		e, w.queued = w.queued[0], w.queued[1:]
	default:
		e = w.newTransaction(v)
	}
	w.log[v] = e
	mustDeliver(w.t, w.o, e)
	w.m.delivered = v
	w.m.dropped[v] = w.m.local[v] && w.m.span[v].first != 0
}

// newTransaction commits a new transaction at version v and returns its
// first entry: remote, local, local abandoned before its entry arrives,
// or inherited; a version of its own, or a span of 2 to 5.
func (w *world) newTransaction(v uint64) logentry.Entry {
	last := v
	if w.rng.IntN(3) == 0 {
		last = v + 1 + uint64(w.rng.IntN(4))
	}
	origin, seq := "replica2#other", v
	kind := w.rng.IntN(5)
	switch kind {
	case 2, 3:
		w.seq++
		origin, seq = me, w.seq
		l := w.o.Register(w.seq)
		if kind == 3 {
			w.o.Abandon(l) // its connection closed before the entry arrived
		} else {
			w.locals[v] = txn{l, v, last}
		}
	case 4:
		origin = "replica1#before"
		w.locals[v] = txn{w.o.Inherit(last), v, last}
	}
	var es []logentry.Entry
	for u := v; u <= last; u++ {
		n := 10 + w.rng.IntN(200)
		var e logentry.Entry
		if last == v {
			e = fragment(u, 0, 0, origin, seq, n)
		} else {
			e = fragment(u, v, last, origin, seq, n)
			w.m.span[u] = spanRange{v, last}
		}
		w.m.bytes[u], w.m.local[u] = len(e.Bytes), kind == 2 || kind == 4
		es = append(es, e)
	}
	w.queued = es[1:]
	return es[0]
}

// localTurn lets the backend whose version is next commit it.
func (w *world) localTurn() {
	tx, ok := w.locals[w.db+1]
	if !ok || w.o.Delivered() < tx.last && w.o.Round() == tx.l.round {
		return // its decision comes after its last entry
	}
	for v := tx.first; v <= tx.last; v++ {
		w.commit(v, "local")
	}
	delete(w.locals, tx.first)
}

func (w *world) abandon() {
	for first, tx := range w.locals {
		if w.rng.IntN(3) != 0 {
			continue
		}
		wantRestart := !w.m.restart && w.m.delivered >= tx.first && (tx.first != tx.last || (w.m.open.first != 0 && tx.first < w.m.open.first))
		got := w.o.Abandon(tx.l)
		if (got == Restart) != wantRestart {
			w.fail("Abandon of %d..%d = %v; model wants a restart: %v", tx.first, tx.last, got, wantRestart)
		}
		switch got {
		case Restart:
			w.restart, w.m.restart = true, true
		case Cancel:
			w.cancel = true
		}
		delete(w.locals, first)
		for v := tx.first; v <= tx.last; v++ {
			w.m.local[v] = false
		}
		return
	}
}

// newRun is the agent's next run: the order starts from the database's
// version; the backends still holding versions are inherited.
func (w *world) newRun() {
	w.restart, w.cancel = false, false
	w.o.Reset(w.db)
	w.m = model{local: w.m.local, span: w.m.span, bytes: w.m.bytes, dropped: map[uint64]bool{}, committed: w.db, delivered: w.db}
	kept := map[uint64]txn{}
	for first, tx := range w.locals {
		if tx.last > w.db {
			kept[first] = txn{w.o.Inherit(tx.last), tx.first, tx.last}
		}
	}
	w.locals = kept
}

// apply plans a batch (checked against the model) or ends the one in
// flight: cancelled, applied inside a span, or committed when its turn
// has come.
func (w *world) apply() {
	b := w.o.InFlight()
	if b == nil {
		want := w.m.next(w.maxBatch)
		got := span(w.o.Next(w.maxBatch))
		if got != want {
			w.fail("Next = %v, model says %v", got, want)
		}
		return
	}
	switch {
	case w.cancel && b.InSpan() && !b.EndsSpan() && w.rng.IntN(2) == 0:
		// the cancel came too late: the fragment, which waits for no
		// turn, was applied
		w.cancel = false
		w.o.Done(true)
		w.m.open, w.m.applied = spanRange{b.SpanFirst, b.SpanLast}, b.Last
		if !w.o.RestartWanted() {
			w.fail("fragment %d applied despite a cancel, and no restart is wanted", b.First)
		}
		w.restart, w.m.restart = true, true
	case w.cancel:
		w.cancel = false
		w.o.Done(false)
	case b.InSpan() && !b.EndsSpan():
		w.o.Done(true)
		w.m.open, w.m.applied = spanRange{b.SpanFirst, b.SpanLast}, b.Last
	case b.InSpan() && w.db == b.SpanFirst-1:
		for v := b.SpanFirst; v <= b.SpanLast; v++ {
			w.commit(v, "applier")
		}
		w.o.Done(true)
		w.m.committed, w.m.open = b.SpanLast, spanRange{}
	case !b.InSpan() && w.db == b.First-1:
		for v := b.First; v <= b.Last; v++ {
			if w.m.local[v] {
				w.fail("batch %d..%d holds local version %d", b.First, b.Last, v)
			}
			w.commit(v, "applier")
		}
		w.o.Done(true)
		w.m.committed = max(w.m.committed, b.Last)
	}
}

func (w *world) observe() {
	w.o.Observe(w.db)
	w.m.committed = max(w.m.committed, w.db)
}

// checkNoDeadlock: a remote version next in line below what the applier
// is in the middle of (the batch in flight, the span it belongs to) must
// have asked for the batch's cancellation, or for a new run.
func (w *world) checkNoDeadlock() {
	next := w.db + 1
	start := w.m.open.first
	if b := w.o.InFlight(); b != nil && start == 0 {
		start = b.First
	}
	if start == 0 || next > w.o.Delivered() || w.m.local[next] || start <= next || w.restart {
		return
	}
	if !w.o.CancelWanted() || !w.cancel || w.m.open.first != 0 {
		w.fail("the applier is at %d, waiting for remote version %d, which only it can apply, and neither a cancel nor a restart was asked", start, next)
	}
}

// check compares what the order holds with the model; once a restart is
// wanted, the counts no longer matter (the run ends).
func (w *world) check() {
	if w.o.Committed() != w.m.committed {
		w.fail("committed %d, model says %d", w.o.Committed(), w.m.committed)
	}
	if w.restart {
		return
	}
	if got, want := w.o.WaitingBytes(), w.m.held(); got != want {
		w.fail("WaitingBytes %d, model says %d", got, want)
	}
	if got, want := w.o.RemoteWaiting(), w.m.remoteWaiting(); got != want {
		w.fail("RemoteWaiting %d, model says %d", got, want)
	}
}

func (w *world) step(delivering bool) {
	switch r := w.rng.IntN(11); {
	case r < 3 && (delivering || len(w.queued) > 0 || w.log[w.o.Delivered()+1].Bytes != nil):
		w.deliver()
	case r < 5:
		w.localTurn()
	case r < 6:
		w.abandon()
	case r < 9:
		w.apply()
	case r < 10:
		w.observe()
	case w.restart:
		w.newRun()
	}
	w.checkNoDeadlock()
	w.check()
}

// Seeded runs against the model: every version is committed exactly once,
// in order, by its backend or by the applier, a span's versions at once;
// batches match the model's; the held bytes and the backlog match; nothing
// deadlocks; and once deliveries stop, everything commits.
func TestOrderAgainstAModel(t *testing.T) {
	restarts := 0
	for seed := range uint64(300) {
		w := newWorld(t, seed)
		for range 400 {
			w.step(true)
		}
		for i := 0; w.db < w.o.Delivered() || len(w.queued) > 0 || w.restart; i++ {
			if i > 20000 {
				w.fail("seed %d: no progress: database at %d of %d delivered", seed, w.db, w.o.Delivered())
			}
			if w.restart {
				restarts++
			}
			w.step(false)
		}
		w.observe()
		if w.o.Committed() != w.o.Delivered() || w.o.Waiting() != 0 {
			w.fail("seed %d: committed %d delivered %d waiting %d", seed, w.o.Committed(), w.o.Delivered(), w.o.Waiting())
		}
	}
	if restarts == 0 {
		t.Fatal("no run restarted: the model never abandoned a span")
	}
}
