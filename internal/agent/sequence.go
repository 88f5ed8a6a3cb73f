package agent

import (
	"context"
	"errors"
	"sync"

	"github.com/tashkent-db/tashkent/internal/agent/order"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// sequence drives order.Order for the agent's goroutines: one lock around
// it, and a channel closed on every change for those that wait.
type sequence struct {
	mu      sync.Mutex
	o       *order.Order
	changed chan struct{}
}

func newSequence(origin string) *sequence {
	return &sequence{o: order.New(origin, 0), changed: make(chan struct{})}
}

// do runs f on the order and wakes the waiters.
func (s *sequence) do(f func(o *order.Order)) {
	s.mu.Lock()
	f(s.o)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// read runs f on the order without waking anyone: f reads it, or changes
// nothing a waiter waits for.
func (s *sequence) read(f func(o *order.Order)) {
	s.mu.Lock()
	f(s.o)
	s.mu.Unlock()
}

// wait blocks until ready holds (called under the lock) or ctx ends.
func (s *sequence) wait(ctx context.Context, ready func(o *order.Order) bool) error {
	for {
		s.mu.Lock()
		ok, ch := ready(s.o), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changes returns the channel closed at the next change.
func (s *sequence) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *sequence) committed() (v uint64) {
	s.read(func(o *order.Order) { v = o.Committed() })
	return v
}

func (s *sequence) remoteWaiting() (n int) {
	s.read(func(o *order.Order) { n = o.RemoteWaiting() })
	return n
}

func (s *sequence) delivered() (v uint64) {
	s.read(func(o *order.Order) { v = o.Delivered() })
	return v
}

func (s *sequence) round() (e uint64) {
	s.read(func(o *order.Order) { e = o.Round() })
	return e
}

// register wakes no one: a registration changes nothing the waiters
// wait for (a batch, a cancel, a restart, room, the committed version)
// until its version is delivered, and waking the applier at every
// certification would cost a goroutine switch each.
func (s *sequence) register(seq uint64) (l *order.Local) {
	s.read(func(o *order.Order) { l = o.Register(seq) })
	return l
}

func (s *sequence) versionOf(l *order.Local) (v uint64) {
	s.read(func(*order.Order) { v = l.Version() })
	return v
}

// abandon makes l remote; the applier sees CancelWanted if it must
// cancel its batch, and RestartWanted if the run must end (next).
func (s *sequence) abandon(l *order.Local) {
	s.do(func(o *order.Order) { o.Abandon(l) })
}

func (s *sequence) deliver(round uint64, entries []logentry.Entry) (err error) {
	s.do(func(o *order.Order) { err = o.Deliver(round, entries) })
	return err
}

func (s *sequence) observe(committed uint64) {
	s.do(func(o *order.Order) { o.Observe(committed) })
}

func (s *sequence) done(committed bool) {
	s.do(func(o *order.Order) { o.Done(committed) })
}

func (s *sequence) cancelWanted() (yes bool) {
	s.read(func(o *order.Order) { yes = o.CancelWanted() })
	return yes
}

// errRestart ends a run that cannot go on from what its order holds: a
// span must be delivered again (order.Restart). The next run starts from
// the database's version.
var errRestart = errors.New("the agent starts its run again")

// next waits for the next batch to apply. It returns errRestart once the
// order wants a new run.
func (s *sequence) next(ctx context.Context) (*order.Batch, error) {
	var b *order.Batch
	restart := false
	err := s.wait(ctx, func(o *order.Order) bool {
		if restart = o.RestartWanted(); restart {
			return true
		}
		b = o.Next(applyBatchEntriesMax)
		return b != nil
	})
	if restart {
		return nil, errRestart
	}
	return b, err
}

// get reads one value of the order: get(s, (*order.Order).Applied).
func get[T any](s *sequence, f func(o *order.Order) T) (v T) {
	s.read(func(o *order.Order) { v = f(o) })
	return v
}

// waitCommitted waits until version v is committed.
func (s *sequence) waitCommitted(ctx context.Context, v uint64) error {
	return s.wait(ctx, func(o *order.Order) bool { return o.Committed() >= v })
}

// hold holds the replica's commits after version v (order.Hold).
func (s *sequence) hold(v uint64) (held uint64) {
	s.do(func(o *order.Order) { held = o.Hold(v) })
	return held
}

// release ends the hold.
func (s *sequence) release() {
	s.do(func(o *order.Order) { o.Release() })
}

// awaitDecision records that the batch in flight waits for an undecided
// backend (order.AwaitDecision); a delivery waiting for room goes on.
func (s *sequence) awaitDecision() {
	s.do(func(o *order.Order) { o.AwaitDecision() })
}

// waitRoom waits while more than max bytes of delivered versions wait and
// the applier can commit some of them (order.Full).
func (s *sequence) waitRoom(ctx context.Context, max int) error {
	return s.wait(ctx, func(o *order.Order) bool { return !o.Full(max) })
}

func (s *sequence) waitingBytes() (n int) {
	s.read(func(o *order.Order) { n = o.WaitingBytes() })
	return n
}
