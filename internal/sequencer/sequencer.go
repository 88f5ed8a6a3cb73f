// Package sequencer orders the commits of one replica: every version of the
// global order commits there strictly after the one before it (BRIEF.md:
// commit visibility must follow the certifier's order on every replica, or
// read-only transactions on different replicas see a Long Fork).
//
// Only the simulation's replica model (internal/sim) uses it. The agent
// keeps its replica's commit order with internal/agent/order, and the
// extension makes each commit wait for its turn inside PostgreSQL.
//
// A version is either local (a transaction of one of this replica's client
// sessions, which commits it on its own backend connection) or remote (a
// writeset the applier applies). The certifier delivers every version to the
// replica, its own included, in order and before the reply that depends on
// it; a session registers its transaction before asking, so when a version
// arrives the sequencer knows whose it is. Tashkent §6.2 steps C4 and C5 are
// serialized exactly this way in Base and Tashkent-MW.
//
// A session that cannot commit its version after all (its database commit
// failed, or it gave up waiting for the certifier) hands it back with
// Abandon; the version becomes remote and the applier applies its writeset,
// so the replica never skips a version the rest of the cluster has.
//
// The sequencer holds no connections and does no I/O; its waits take a
// context. It is safe for concurrent use.
package sequencer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// ErrReset is returned to waiters when the sequencer is reset (the replica's
// database restarted and its state is being recovered).
var ErrReset = errors.New("replica is recovering: its commit order was reset")

// ErrDisplaced is returned by WaitTurn to a local transaction that was
// displaced (Displace): it must roll back its database transaction and
// Abandon its version, which is then applied from its writeset.
var ErrDisplaced = errors.New("an earlier version needs a lock this transaction holds: it gives way, and its writeset is applied in its place")

// ErrHalted is returned to waiters once the replica stopped applying the
// cluster's commits for good (Halt): what they wait for will not happen
// here until the replica is rebuilt.
var ErrHalted = errors.New("the replica stopped applying the cluster's commits")

// Local is a transaction of this replica waiting for its version.
type Local struct {
	Seq       uint64
	version   uint64         // 0 until its entry is delivered
	entry     logentry.Entry // kept so that Abandon can make it remote
	displaced bool           // see Displace
}

// Version is the commit version delivered for the transaction, 0 if none yet.
func (l *Local) Version() uint64 { return l.version }

type slot struct {
	entry logentry.Entry
	local *Local // nil for a remote version
}

// Sequencer is the commit order of one replica.
type Sequencer struct {
	origin string

	mu        sync.Mutex
	committed uint64            // every version up to here is committed in the database
	slots     map[uint64]slot   // delivered versions above committed
	delivered uint64            // highest version delivered
	locals    map[uint64]*Local // registered transactions by sequence number
	changed   chan struct{}     // closed and replaced on every change
	epoch     uint64            // incremented by Reset
	halted    error             // set by Halt; wraps ErrHalted
}

// New starts the order after version committed. origin is this replica's
// name, as in the transaction ids it sends.
func New(origin string, committed uint64) *Sequencer {
	return &Sequencer{
		origin: origin, committed: committed, delivered: committed,
		slots: make(map[uint64]slot), locals: make(map[uint64]*Local), changed: make(chan struct{}),
	}
}

// Committed is the replica's version: what new transactions are labelled
// with (Tashkent §6.2 A2).
func (s *Sequencer) Committed() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// Delivered is the highest version the certifier delivered.
func (s *Sequencer) Delivered() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered
}

// Register announces a local transaction before it is sent for
// certification.
func (s *Sequencer) Register(seq uint64) *Local {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &Local{Seq: seq}
	s.locals[seq] = l
	return l
}

// Epoch counts resets. A stream of entries opened at epoch e delivers with
// e; once the sequencer is reset, its deliveries are dropped, and a stream
// opened after the reset delivers them again.
func (s *Sequencer) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Deliver records delivered entries, in order, from a stream opened at
// epoch (see Epoch). origins[i] and seqs[i] are entry i's transaction id.
func (s *Sequencer) Deliver(epoch uint64, entries []logentry.Entry, origins []string, seqs []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch != s.epoch {
		return // a stream from before a reset
	}
	for i, e := range entries {
		if e.Version <= s.delivered {
			continue // already delivered before a reconnection
		}
		if e.Version != s.delivered+1 {
			panic(fmt.Sprintf("sequencer: version %d delivered after %d", e.Version, s.delivered))
		}
		s.delivered = e.Version
		sl := slot{entry: e}
		if origins[i] == s.origin {
			if l := s.locals[seqs[i]]; l != nil {
				l.version, l.entry = e.Version, e
				sl.local = l
				delete(s.locals, seqs[i])
			}
		}
		if e.Version > s.committed {
			s.slots[e.Version] = sl
		}
	}
	s.notifyLocked()
}

// Abandon withdraws a local transaction: not yet delivered, it is
// forgotten (an entry for it arriving later is remote); delivered, its
// version becomes remote.
func (s *Sequencer) Abandon(l *Local) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locals, l.Seq)
	if sl, ok := s.slots[l.version]; ok && sl.local == l {
		s.slots[l.version] = slot{entry: l.entry}
		s.notifyLocked()
	}
}

// WaitTurn waits until every version before l's is committed, so that l may
// commit. l must have a version. It returns ErrDisplaced if l is displaced
// before its turn comes.
func (s *Sequencer) WaitTurn(ctx context.Context, l *Local) error {
	if l.version == 0 {
		panic("sequencer: WaitTurn before the version was delivered")
	}
	turn := false
	err := s.wait(ctx, func() bool {
		turn = s.committed+1 >= l.version
		return turn || l.displaced
	})
	if err == nil && !turn {
		return ErrDisplaced
	}
	return err
}

// Displace makes a local transaction that waits for its turn give way
// (WaitTurn returns ErrDisplaced): an earlier version cannot be applied
// because the transaction's database session holds a row lock it needs,
// a conflict certification does not see (SELECT ... FOR UPDATE of a row
// the transaction does not write, a foreign-key check's lock on the
// parent row). Without it, each waits for the other for ever. Once its
// turn has come, Displace has no effect: the earlier versions committed.
func (s *Sequencer) Displace(l *Local) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.displaced = true
	s.notifyLocked()
}

// Commit records that version v committed in the database. Versions commit
// one at a time, in order.
func (s *Sequencer) Commit(v uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v != s.committed+1 {
		panic(fmt.Sprintf("sequencer: commit of version %d after %d", v, s.committed))
	}
	delete(s.slots, v)
	s.committed = v
	s.notifyLocked()
}

// NextRemote waits until the next version to commit is remote and returns
// it with the remote versions right after it, at most max entries in all.
func (s *Sequencer) NextRemote(ctx context.Context, max int) ([]logentry.Entry, error) {
	var batch []logentry.Entry
	err := s.wait(ctx, func() bool {
		sl, ok := s.slots[s.committed+1]
		if !ok || sl.local != nil {
			return false
		}
		for v := s.committed + 1; len(batch) < max; v++ {
			sl, ok := s.slots[v]
			if !ok || sl.local != nil {
				break
			}
			batch = append(batch, sl.entry)
		}
		return true
	})
	return batch, err
}

// CommitBatch records that a batch returned by NextRemote committed.
func (s *Sequencer) CommitBatch(batch []logentry.Entry) {
	for _, e := range batch {
		s.Commit(e.Version)
	}
}

// Reset restarts the order after version committed, as read back from the
// database after it restarted: versions above it that were committed before
// are delivered again. Waiting sessions get ErrReset.
func (s *Sequencer) Reset(committed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.committed, s.delivered = committed, committed
	s.slots = make(map[uint64]slot)
	s.locals = make(map[uint64]*Local)
	s.epoch++
	s.notifyLocked()
}

// Halt records that no further version will commit here: the applier met
// a version the database refuses (cause) and the replica must be rebuilt.
// Every wait, current and future, returns an error wrapping ErrHalted and
// cause instead of waiting for ever. Reset does not undo it.
func (s *Sequencer) Halt(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.halted == nil {
		s.halted = fmt.Errorf("%w: %w", ErrHalted, cause)
		s.notifyLocked()
	}
}

func (s *Sequencer) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait blocks until ready (called with mu held) is true.
func (s *Sequencer) wait(ctx context.Context, ready func() bool) error {
	s.mu.Lock()
	epoch := s.epoch
	for {
		if s.epoch != epoch {
			s.mu.Unlock()
			return ErrReset
		}
		if ready() {
			s.mu.Unlock()
			return nil
		}
		if s.halted != nil {
			err := s.halted
			s.mu.Unlock()
			return err
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
	}
}

// WaitCommitted waits until version v is committed in the database.
func (s *Sequencer) WaitCommitted(ctx context.Context, v uint64) error {
	return s.wait(ctx, func() bool { return s.committed >= v })
}
