package order

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// model is the dumb reference: one owner per delivered version, scanned
// from scratch every time.
type model struct {
	local     map[uint64]bool // delivered versions a backend commits
	committed uint64
	delivered uint64
}

func (m *model) next(max int) [2]uint64 {
	for v := m.committed + 1; v <= m.delivered; v++ {
		if m.local[v] {
			continue
		}
		last := v
		for last+1 <= m.delivered && !m.local[last+1] && int(last+1-v) < max {
			last++
		}
		return [2]uint64{v, last}
	}
	return [2]uint64{}
}

// world runs Order against a simulated database (which commits each
// version at its turn, exactly once) and the reference model.
type world struct {
	t        *testing.T
	rng      *rand.Rand
	o        *Order
	m        model
	db       uint64 // the database's committed version
	by       map[uint64]string
	locals   map[uint64]*Local // delivered, uncommitted, not abandoned
	cancel   bool              // the applier was told to cancel its batch
	seq      uint64
	maxBatch int
}

func newWorld(t *testing.T, seed uint64) *world {
	return &world{t: t, rng: rand.New(rand.NewPCG(seed, 7)), o: New(me, 0),
		m: model{local: map[uint64]bool{}}, by: map[uint64]string{}, locals: map[uint64]*Local{},
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

// deliver delivers the next version: remote, local, local abandoned before
// its entry arrives, or inherited.
func (w *world) deliver() {
	v := w.o.Delivered() + 1
	switch w.rng.IntN(5) {
	case 0, 1:
		mustDeliver(w.t, w.o, remote(v))
	case 2:
		w.seq++
		l := w.o.Register(w.seq)
		mustDeliver(w.t, w.o, entry(v, me, w.seq))
		w.locals[v], w.m.local[v] = l, true
	case 3:
		w.seq++
		l := w.o.Register(w.seq)
		w.o.Abandon(l) // its connection closed before the entry arrived
		mustDeliver(w.t, w.o, entry(v, me, w.seq))
	case 4:
		l := w.o.Inherit(v)
		mustDeliver(w.t, w.o, entry(v, "replica1#before", v))
		w.locals[v], w.m.local[v] = l, true
	}
	w.m.delivered = v
}

// localTurn lets the backend whose version is next commit it.
func (w *world) localTurn() {
	v := w.db + 1
	if w.locals[v] == nil {
		return
	}
	w.commit(v, "local")
	delete(w.locals, v)
}

func (w *world) abandon() {
	for v, l := range w.locals {
		if w.rng.IntN(3) == 0 {
			if w.o.Abandon(l) {
				w.cancel = true
			}
			delete(w.locals, v)
			w.m.local[v] = false
			return
		}
	}
}

// apply plans a batch (checked against the model) or ends the one in
// flight: cancelled, or committed when its turn has come.
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
	case w.cancel:
		w.cancel = false
		w.o.Done(false)
	case w.db == b.First-1:
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
	w.m.committed = w.db
}

// checkNoDeadlock: a remote version next in line below the batch in
// flight must have asked for the batch's cancellation.
func (w *world) checkNoDeadlock() {
	b := w.o.InFlight()
	next := w.db + 1
	if b == nil || next > w.o.Delivered() || w.m.local[next] || b.First <= next {
		return
	}
	if !w.o.CancelWanted() || !w.cancel {
		w.fail("batch %d..%d waits for remote version %d, which only the applier can apply, and no cancel was asked", b.First, b.Last, next)
	}
}

func (w *world) step(delivering bool) {
	switch r := w.rng.IntN(10); {
	case r < 3 && delivering:
		w.deliver()
	case r < 5:
		w.localTurn()
	case r < 6:
		w.abandon()
	case r < 9:
		w.apply()
	default:
		w.observe()
	}
	w.checkNoDeadlock()
}

// Seeded runs against the model: every version is committed exactly once,
// in order, by its backend or by the applier; batches match the model's;
// nothing deadlocks; and once deliveries stop, everything commits.
func TestOrderAgainstAModel(t *testing.T) {
	for seed := range uint64(300) {
		w := newWorld(t, seed)
		for range 400 {
			w.step(true)
		}
		for i := 0; w.db < w.o.Delivered(); i++ {
			if i > 10000 {
				w.fail("seed %d: no progress: database at %d of %d delivered", seed, w.db, w.o.Delivered())
			}
			w.step(false)
		}
		w.observe()
		if w.o.Committed() != w.o.Delivered() || w.o.Waiting() != 0 {
			w.fail("seed %d: committed %d delivered %d waiting %d", seed, w.o.Committed(), w.o.Delivered(), w.o.Waiting())
		}
	}
}
