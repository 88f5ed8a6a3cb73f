package sim

import (
	"math"
	"slices"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Mode ed: eventual durability (Kashi, "Eventual Durability", ch. 2, and
// ED Postgres, §3.6–3.8; docs/MODES.md). A transaction commits at its
// commit point, the certifier's decision, and is durable once the
// certifier's log syncs it; between the two it can fail (§2.2.1,
// property 2), and durability is a prefix of the order (§2.2.3): when the
// certifier crashes, every version above what its log kept fails, and its
// next generation numbers other transactions from there. The replicas
// that applied a failed version are told at admission to rewind to the
// common version (certifier.Admit, pb.RewindRequired) and undo what they
// hold above it before they serve again (§2.2.1, property 3).
//
// What a client is told (§3.6, docs/GUARANTEES.md "Eventual durability"):
// a fast transaction (synchronous_commit off) at the commit point; a safe
// writing one once its version is durable (§3.7: after the commit, locks
// released, so it is visible before); a safe read-only one once every
// version it may have read is durable (§3.8: the replica's version at
// COMMIT is the bound). A safe transaction whose version fails is never
// acknowledged (TK006); a fast one was, and fails afterwards.

// failure is a certifier crash that lost versions it had delivered: every
// version above after decided in epoch or an earlier one of lineage
// failed (durability is a prefix, §2.2.3).
type failure struct {
	lineage int
	after   uint64
	epoch   uint64
}

// epochVersion names one decided entry (log matching: an epoch assigns
// each version once).
type epochVersion struct {
	epoch, version uint64
}

// noteFailure records that the certifier crashed with versions above
// after, delivered early by its generation epoch, lost.
func (w *world) noteFailure(after, epoch uint64) {
	w.failures = append(w.failures, failure{lineage: w.lineage(), after: after, epoch: epoch})
	w.stats.VersionFailures++
	w.note("versions-failed", after, epoch, 0)
}

// noteDecided records the entries the certifier decided, which streams
// may be sent before they are durable, before they are even written:
// the only entries a replica may commit (checkCommit).
func (w *world) noteDecided(entries []logentry.Entry) {
	for _, e := range entries {
		h, err := logentry.RawHeaderOf(e.Bytes)
		if err != nil {
			panic("sim: the certifier decided a log entry it cannot read: " + err.Error())
		}
		w.decided[epochVersion{h.Epoch, h.Version}] = certification.TxnID{Origin: string(h.Origin), Seq: h.Seq}
	}
}

// versionFailed reports whether version v, decided in epoch by a certifier of
// lineage, failed.
func (w *world) versionFailed(lineage int, v, epoch uint64) bool {
	for _, f := range w.failures {
		if f.lineage == lineage && v > f.after && epoch <= f.epoch {
			return true
		}
	}
	return false
}

// rewinder is the agent's replica.Rewinder (agent/rewind.go, replica/pins.go)
// as far as a rewind's outcome depends on it: it starts with the first
// entry delivered before it was durable, lives as long as the agent
// process and its database's life, and pins snapshots of the replica (at
// its start and every maintenance period). A pin is usable once the
// durable version reaches it; a rewind to the common version c goes back
// to the newest usable pin at or below c. (The undo window and the
// pins' connections are not modelled: the store keeps every version.)
type rewinder struct {
	on      bool
	pins    []uint64 // ascending
	durable uint64   // Pins.Advance
}

func (p *rewinder) take(v uint64) {
	if !p.on || (len(p.pins) > 0 && p.pins[len(p.pins)-1] == v) {
		return
	}
	p.pins = append(p.pins, v)
	p.prune()
}

func (p *rewinder) advance(durable uint64) {
	if p.on && durable > p.durable {
		p.durable = durable
		p.prune()
	}
}

// prune keeps the newest usable pin and the candidates above it.
func (p *rewinder) prune() {
	for len(p.pins) > 1 && p.pins[1] <= p.durable {
		p.pins = p.pins[1:]
	}
}

// usable is Pins.Usable: the newest pin at or below c that is durable.
func (p *rewinder) usable(c uint64) (uint64, bool) {
	for _, v := range slices.Backward(p.pins) {
		if v <= c && v <= p.durable {
			return v, true
		}
	}
	return 0, false
}

// rewound is Pins.Rewound: the pins above k saw versions that failed.
func (p *rewinder) rewound(k uint64) {
	p.pins = slices.DeleteFunc(p.pins, func(v uint64) bool { return v > k })
}

// noteDelivered is the agent's noteDelivered: the rewinder starts at the
// first entry sent before it was durable (the message names the durable
// version), pinning the replica where it is.
func (r *replica) noteDelivered(last, durable uint64) {
	if r.w.cfg.Mode != ModeED || r.rewinder.on || last <= durable {
		return
	}
	r.rewinder = rewinder{on: true, durable: durable}
	r.rewinder.take(r.db.version)
}

// askedToRewind is the agent's answer to a verdict "rewind to common"
// from a certifier of lineage (agent/progress.go refused, rewind.go
// askRewind and rewindIfAsked): it tells the sessions what failed
// (failed.go: every version above common decided in the newest epoch of
// its history or an earlier one), ends the run and the transactions in
// the way, undoes what the store holds above common back to a usable pin
// (or halts for a rebuild if it cannot), and starts a new run from there.
// It is false when the verdict is left to the halt it leads to: the
// replica halted already, or its database is down (the next database
// life has no pin).
func (r *replica) askedToRewind(common uint64, lineage int) bool {
	if r.halted || !r.dbUp {
		return false
	}
	epoch := failedEpoch(r.db.runs)
	r.w.note("rewind-asked", uint64(r.id), common, r.db.version)
	r.failDecided(common, epoch, lineage)
	r.endRun()
	k, undone := r.rewindStore(common)
	r.ord.Reset(k)
	r.db.trimRuns(k)
	r.openStream()
	for _, s := range r.sessions {
		s.scheduleNext()
	}
	if !undone {
		r.refused() // rewind.go cannotRewind: halt for a rebuild from a peer
	}
	return true
}

// failedEpoch is the agent's failedEpoch: the newest epoch of the
// replica's history (every epoch without one).
func failedEpoch(runs []*pb.EpochRun) uint64 {
	if len(runs) == 0 {
		return math.MaxUint64
	}
	return runs[len(runs)-1].Epoch
}

// failDecided is the failure 'X' common, epoch reaching the sessions
// (extension/src/safe.c, turn.c): a safe commit waiting for durability
// whose version failed is never acknowledged (FATAL TK006); a safe read
// whose bound is above common gets 40001; a decided transaction still
// waiting for its turn gets 40001 (nothing was committed). Fast commits
// of this replica acknowledged in lineage whose version failed are told
// so (WARNING TK006).
func (r *replica) failDecided(common, epoch uint64, lineage int) {
	for _, s := range r.sessions {
		switch {
		case s.phase == awaitingDurable && s.version > common && len(s.txn.writes) == 0:
			s.txn.abortedIn = anyLineage
			r.w.hist.end(s.txn, aborted)
			s.finish()
		case s.phase == awaitingDurable && s.version > common && s.txn.epoch <= epoch:
			s.txn.abortedIn = lineage
			r.w.hist.end(s.txn, failed)
			s.finish()
		case s.phase == waitingTurn && s.version > common:
			s.txn.abortedIn = s.decidedIn
			r.w.hist.end(s.txn, aborted)
			s.finish()
		}
	}
	for _, t := range r.w.hist.txns {
		if t.replica == r.id && t.status == acked && t.fast && t.lineage == lineage && t.version > common && t.epoch <= epoch {
			t.toldFailed = true
		}
	}
}

// endRun ends the agent's run for a rewind: the commit in flight may or
// may not have reached the database, and the transactions in progress
// and in the commit order are ended (rewind.go, endTransactions). A safe
// commit waiting for durability is neither: it waits on.
func (r *replica) endRun() {
	r.settleInFlight()
	r.batch = nil
	r.incarnation++
	for _, s := range r.sessions {
		if !(s.phase == awaitingDurable && len(s.txn.writes) > 0) {
			s.lost()
		}
	}
}

// rewindStore takes the store back to k <= common (rewind.go, rewindTo):
// nothing to undo if it holds nothing above common; otherwise back to the
// newest usable pin, if the rewinder has one. undone is false when it
// cannot: the replica must be rebuilt.
func (r *replica) rewindStore(common uint64) (k uint64, undone bool) {
	v := r.db.version
	if v <= common {
		return v, true
	}
	k, ok := r.rewinder.usable(common)
	if !ok {
		r.w.note("cannot-rewind", uint64(r.id), v, common)
		return v, false
	}
	r.db.rewind(k, r.w.cfg.Mutation == MutationKeepFailedVersion)
	r.rewinder.rewound(k)
	r.w.stats.Rewinds++
	r.w.note("rewound", uint64(r.id), v, k)
	return k, true
}

// waitsForDurability: in mode ed a safe transaction is acknowledged only
// once durable.
func (s *session) waitsForDurability() bool {
	w := s.r.w
	return w.cfg.Mode == ModeED && !s.txn.fast && w.cfg.Mutation != MutationAckSafeBeforeDurable
}

// acknowledge answers a session whose transaction committed at version
// v (epoch): at once, or, for a safe one in mode ed, once v is durable
// (ED Postgres §3.7: the wait comes after the commit, so the transaction
// is visible, and its locks released, before).
func (r *replica) acknowledge(s *session, v, epoch uint64) {
	s.txn.epoch, s.txn.lineage = epoch, r.db.lineage
	if s.waitsForDurability() && v > r.durableHeard {
		s.phase, s.version = awaitingDurable, v
		return
	}
	r.w.hist.ack(s.txn, v, r.db.lineage)
	s.finish()
}

// wakeDurable answers the sessions whose wait for durability is over.
func (r *replica) wakeDurable() {
	for _, s := range r.sessions {
		if s.phase != awaitingDurable || s.version > r.durableHeard {
			continue
		}
		if len(s.txn.writes) > 0 {
			r.w.hist.ack(s.txn, s.version, s.txn.lineage)
		} else {
			r.w.hist.end(s.txn, readOnly)
		}
		s.finish()
	}
}
