package sim

import (
	"fmt"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/order"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// replica is one replica: its database and the agent that certifies and
// applies for it. The agent's commit order is the real one
// (internal/agent/order): it learns which delivered versions are local,
// plans the applier's batches, cancels a batch that waits behind an
// abandoned version, and counts versions committed from what the applier
// reports and what it reads from the database (Observe), as the agent's
// sequence.go drives it. The database is a model: a store (store.go) whose
// commits each wait for their turn, as the extension's turn in shared
// memory makes them (extension/src/turn.c): a version commits only once
// the one before it is visible, whoever commits it.
type replica struct {
	w           *world
	id          int
	name        string // the replica's name, as its agent opens streams with
	up          bool   // the agent is running
	dbUp        bool   // the database is running
	incarnation uint64

	db       *store
	ord      *order.Order
	client   *streamClient
	origin   string
	restarts int
	txnSeq   uint64
	connN    uint64
	// delivered is the transaction and epoch of each version delivered and
	// not yet committed here: a version delivered again must be the same
	// one.
	delivered map[uint64]deliveredEntry
	sessions  []*session
	// batch is the applier's batch in flight: sent to the database, where
	// it waits for its turn (order.Next); nil if none.
	batch    *order.Batch
	busy     bool   // a commit holds the turn and is in flight in the database
	inFlight func() // its database part, which a crash may or may not let happen
	// versionBeforeCrash is what the replica had committed when its
	// database crashed (only MutationRecoverFromMemory uses it).
	versionBeforeCrash uint64

	recovering  bool // clients wait until the replica caught up
	targetKnown bool
	target      uint64 // the certifier's durable version when recovery began
	// halted: the certifier refused the agent's session; the agent
	// admits no new transaction until its next run (an agent start or a
	// database restart), and the supervisor rebuilds the replica if its
	// agent runs and still says it halted when its turn comes.
	halted bool

	// Mode ed (ed.go): the rewinder of the agent process and database
	// life, and the certifier's durable version as the current run's
	// stream last named it (the durability feed's).
	rewinder     rewinder
	durableHeard uint64
}

type deliveredEntry struct {
	txn   certification.TxnID
	epoch uint64
}

func newReplica(w *world, id int) *replica {
	r := &replica{w: w, id: id, name: fmt.Sprintf("r%d", id), db: newStore(w, id), delivered: make(map[uint64]deliveredEntry)}
	for i := range w.cfg.ClientsPerReplica {
		r.sessions = append(r.sessions, &session{r: r, id: i})
	}
	return r
}

func (r *replica) start() {
	r.restart()
	r.scheduleFlush()
	r.scheduleMaintenance()
}

// restart is the agent starting on a database that recovered: it reads the
// version the database holds, deletes the runs of its history above it,
// opens the stream from there and catches up before admitting clients.
// The origin is new at every start, so transaction ids never repeat; a new
// agent process has not halted (yet).
func (r *replica) restart() {
	r.up, r.dbUp, r.halted = true, true, false
	r.incarnation++
	r.restarts++
	r.origin = fmt.Sprintf("r%d.%d", r.id, r.restarts)
	r.txnSeq = 0
	r.rewinder = rewinder{}
	r.ord = order.New(r.origin, r.recoveredVersion())
	r.db.trimRuns(r.ord.Committed())
	r.batch = nil
	r.w.note("replica-up", uint64(r.id), r.db.version, 0)
	r.openStream()
	for _, s := range r.sessions {
		s.scheduleNext()
	}
}

// openStream replaces the certifier client with one that starts at the
// order's committed version, in its current round.
func (r *replica) openStream() {
	if r.client != nil {
		r.client.close()
	}
	r.recovering, r.targetKnown = true, false
	r.durableHeard = 0
	clear(r.delivered)
	r.client = newStreamClient(r, r.ord.Round(), r.ord.Committed())
	r.client.connect()
}

// recoveredVersion is the version the database says it holds
// (replica.ReadVersion), where the replica resumes.
func (r *replica) recoveredVersion() uint64 {
	if r.w.cfg.Mutation == MutationRecoverFromMemory {
		return max(r.db.version, r.versionBeforeCrash)
	}
	return r.db.version
}

// crash stops the agent, and its database unless agentOnly: sessions, the
// order and the client's pending calls are gone. A database that crashes
// keeps what it flushed; one that stays up keeps every commit, including
// the one in flight, if it got that far.
func (r *replica) crash(agentOnly bool) {
	if !r.up {
		return
	}
	r.w.stats.ReplicaCrashes++
	r.up, r.halted = false, false // a halt is the agent's state: it ends with the process
	if agentOnly {
		r.crashAgent()
	} else {
		r.crashDatabase()
	}
	r.client.close()
	r.client = nil
}

func (r *replica) crashAgent() {
	r.settleInFlight()
	r.incarnation++
	for _, s := range r.sessions {
		s.lost()
	}
	r.w.note("agent-crash", uint64(r.id), r.db.version, 0)
}

// crashDatabaseOnly is the database restarting under a running agent: the
// agent resets its order at once, the sessions are closed, and when the
// database answers again, the agent resets to the version it recovered and
// reopens the stream from there. Until then the old stream keeps delivering
// into a stale round.
func (r *replica) crashDatabaseOnly(downTicks int64) {
	if !r.up || !r.dbUp {
		return
	}
	r.w.stats.ReplicaCrashes++
	r.crashDatabase()
	r.ord.Reset(r.ord.Committed())
	inc := r.incarnation
	r.w.after(downTicks, "database-up", func() {
		if r.incarnation != inc || !r.up || r.dbUp {
			return // crashed again, or healed already
		}
		r.resumeAfterDatabaseRestart()
	})
}

// resumeAfterDatabaseRestart is the agent's next run (agent.go, Run) once
// its database answers again: like an agent start, it has not halted
// (yet) and deletes the runs of its history above the recovered version.
func (r *replica) resumeAfterDatabaseRestart() {
	r.dbUp, r.halted = true, false
	r.ord.Reset(r.recoveredVersion())
	r.db.trimRuns(r.ord.Committed())
	r.w.note("database-up", uint64(r.id), r.db.version, 0)
	r.openStream()
	for _, s := range r.sessions {
		s.scheduleNext()
	}
}

// crashDatabase loses the database's connections (the applier's batch
// in flight, the sessions) and its unflushed tail.
func (r *replica) crashDatabase() {
	r.settleInFlight()
	r.batch = nil
	r.versionBeforeCrash = r.db.version
	r.dbUp = false
	r.rewinder = rewinder{} // its pins were this life's
	r.incarnation++         // in-flight commits and timers of this life are void
	for _, s := range r.sessions {
		s.lost()
	}
	lost := r.db.crash()
	r.w.stats.LostTailVersions += lost
	r.w.note("replica-crash", uint64(r.id), r.db.version, uint64(lost))
}

// settleInFlight decides the fate of the commit in flight at a crash: the
// database may have committed it, and nobody was told.
func (r *replica) settleInFlight() {
	if r.busy && r.w.rng.IntN(2) == 0 {
		r.inFlight()
		r.w.note("committed-at-crash", uint64(r.id), r.db.version, 0)
	}
	r.busy, r.inFlight = false, nil
}

// deliver hands entries of the stream opened at round to the order, after
// recording the runs they start in the replica's history, as the agent
// does (internal/agent/history.go, recordRuns). It is false if the
// entries were not delivered: a run could not be recorded because the
// database is down (the next stream delivers them again), or an entry
// cannot be read or the order refused them (a violation).
func (r *replica) deliver(round uint64, entries []logentry.Entry) bool {
	heads := make([]logentry.RawHeader, len(entries))
	for i, e := range entries {
		h, err := logentry.RawHeaderOf(e.Bytes)
		if err != nil {
			r.w.violate("replica %d was delivered version %d, which it cannot read: %v", r.id, e.Version, err)
			return false
		}
		heads[i] = h
	}
	if started := runsStarted(r.db.runs, heads); len(started) > 0 {
		if !r.dbUp {
			return false
		}
		r.db.recordRuns(started)
		r.w.note("run-recorded", uint64(r.id), started[0].Epoch, started[0].FirstVersion)
	}
	for _, h := range heads {
		txn := certification.TxnID{Origin: string(h.Origin), Seq: h.Seq}
		if old, ok := r.delivered[h.Version]; ok && old.txn != txn {
			r.w.violate("replica %d was delivered two different entries for version %d: %v and %v", r.id, h.Version, old.txn, txn)
		}
		if h.Version > r.db.version {
			r.delivered[h.Version] = deliveredEntry{txn: txn, epoch: h.Epoch}
		}
	}
	if err := r.ord.Deliver(round, entries); err != nil {
		r.w.violate("replica %d: %v", r.id, err)
		return false
	}
	r.w.note("delivered", uint64(r.id), entries[len(entries)-1].Version, round)
	r.progress()
	return true
}

// runsStarted is the runs that entries start after runs: one at each
// entry whose epoch is not the one before it (history.go, changesIn).
func runsStarted(runs []*pb.EpochRun, heads []logentry.RawHeader) []*pb.EpochRun {
	var started []*pb.EpochRun
	have, current := len(runs) > 0, uint64(0)
	if have {
		current = runs[len(runs)-1].Epoch
	}
	for _, h := range heads {
		if !have || h.Epoch != current {
			started = append(started, &pb.EpochRun{Epoch: h.Epoch, FirstVersion: h.Version})
			have, current = true, h.Epoch
		}
	}
	return started
}

// durableSeen notes the certifier's durable version: the first one after
// a (re)start is the catch-up target. In mode ed it feeds the rewinder's
// pins and ends the waits for durability it covers.
func (r *replica) durableSeen(durable uint64) {
	if r.recovering && !r.targetKnown {
		r.target, r.targetKnown = durable, true
	}
	if durable > r.durableHeard {
		r.durableHeard = durable
		r.rewinder.advance(durable)
		r.wakeDurable()
	}
	r.progress()
}

// progress does what the agent and the database do next: the applier
// plans its next batch (order.Next) or cancels one that waits behind an
// abandoned version, and the commit whose turn it is starts.
func (r *replica) progress() {
	if !r.up || !r.dbUp {
		return
	}
	r.endRecoveryIfCaughtUp()
	r.ackSoftRecovered()
	r.planBatch()
	if !r.busy {
		r.takeTurn()
	}
}

// planBatch is the applier's loop (internal/agent, apply.go): a batch
// waiting for its turn behind an abandoned version is cancelled, since only
// the applier can commit that version (it cannot hold the turn: the
// abandoned version before it is not visible); the next batch is sent as
// soon as it is planned.
func (r *replica) planBatch() {
	if r.batch != nil && r.ord.CancelWanted() {
		r.ord.Done(false)
		r.w.stats.BatchesCancelled++
		r.w.note("apply-cancelled", uint64(r.id), r.batch.First, r.batch.Last)
		r.batch = nil
	}
	if r.batch == nil {
		r.batch = r.ord.Next(r.w.cfg.ApplyBatchEntriesMax)
	}
}

// takeTurn starts the commit whose turn it is in the database: the
// version after the visible one, a session's or the applier's batch.
func (r *replica) takeTurn() {
	next := r.db.version + 1
	for _, s := range r.sessions {
		if s.phase == waitingTurn && (s.version == next || r.w.cfg.Mutation == MutationCommitWithoutTurn) {
			r.commitLocal(s)
			return
		}
	}
	if r.batch != nil && r.batch.First == next {
		r.applyBatch(r.batch)
	}
}

func (r *replica) endRecoveryIfCaughtUp() {
	if r.recovering && r.targetKnown && r.ord.Committed() >= r.target {
		r.recovering = false
		r.w.note("caught-up", uint64(r.id), r.ord.Committed(), 0)
		for _, s := range r.sessions {
			s.scheduleNext()
		}
	}
}

// applyBatch commits the applier's batch, which has its turn, in one
// database transaction, after a latency. A crash meanwhile may or may not
// have let the database commit it (crashDatabase); the agent never learns
// which.
func (r *replica) applyBatch(b *order.Batch) {
	type applied struct {
		version uint64
		txn     certification.TxnID
		epoch   uint64
		writes  []write
	}
	batch := make([]applied, len(b.Entries))
	for i, e := range b.Entries {
		le, err := e.Decode()
		if err != nil {
			r.w.violate("replica %d cannot decode version %d: %v", r.id, e.Version, err)
			return
		}
		batch[i] = applied{e.Version, txnOf(le.Txn), le.Epoch, writesOf(le.Writeset)}
	}
	if r.w.cfg.Mutation == MutationSwapRemoteVersions && len(batch) >= 2 {
		batch[0].writes, batch[1].writes = batch[1].writes, batch[0].writes
	}
	r.startCommit("apply", func() {
		for _, a := range batch {
			r.db.commit(a.version, a.txn, a.epoch, a.writes)
			delete(r.delivered, a.version)
		}
	}, func() {
		r.ord.Done(true)
		r.batch = nil
		r.w.note("applied", uint64(r.id), b.Last, uint64(len(batch)))
	})
}

// commitLocal is C5: the session records its version and commits. If the
// database refuses (out of disk, a crashed backend), the session rolls back
// and abandons its version, which the applier applies like a remote one
// (order.Abandon; a batch already waiting behind it is cancelled); the
// client still gets COMMIT (Tashkent §8.1 soft recovery).
func (r *replica) commitLocal(s *session) {
	v, txn := s.version, s.txn
	entry, ok := r.delivered[v]
	if !ok {
		// Without its entry the commit has no epoch: the session gives
		// its version up to the applier, as after a refused commit, and
		// its client does not learn the outcome.
		r.w.violate("replica %d: %v commits version %d, which was never delivered to it", r.id, txn.id, v)
		r.ord.Abandon(s.local)
		r.w.hist.end(txn, unknown)
		s.finish()
		return
	}
	s.phase = committing
	if r.w.chance(r.w.cfg.SoftRecoveryPerMille) {
		r.startCommit("commit-refused", func() {}, func() {
			r.w.stats.SoftRecoveries++
			r.ord.Abandon(s.local)
			s.phase = awaitingApply
		})
		return
	}
	r.startCommit("commit-local", func() {
		r.db.commit(v, txn.id, entry.epoch, txn.writes)
		delete(r.delivered, v)
	}, func() {
		r.acknowledge(s, v, entry.epoch)
	})
}

// ackSoftRecovered answers the sessions whose version the applier
// committed for them.
func (r *replica) ackSoftRecovered() {
	for _, s := range r.sessions {
		if s.phase == awaitingApply && r.db.version >= s.version {
			r.acknowledge(s, s.version, r.db.epochAt(s.version))
		}
	}
}

// startCommit runs a database commit (inDatabase) after a latency, then
// what the agent does once the database answered (answered).
func (r *replica) startCommit(name string, inDatabase, answered func()) {
	r.busy, r.inFlight = true, inDatabase
	inc := r.incarnation
	r.w.after(r.w.between(1, r.w.cfg.ApplyTicksMax), name, func() {
		if r.incarnation != inc {
			return
		}
		r.busy, r.inFlight = false, nil
		inDatabase()
		answered()
		r.progress()
	})
}

func (r *replica) scheduleFlush() {
	r.w.after(r.w.cfg.StoreFlushTicks, "store-flush", func() {
		if r.dbUp {
			r.db.flush()
		}
		r.scheduleFlush()
	})
}

// scheduleMaintenance is the agent's maintenance (internal/agent,
// maintain.go): a catch-up request every staleness period (bounded
// staleness), which also tells a dead stream from a quiet one, and the
// database's version read into the order (local commits advance it
// without the agent).
func (r *replica) scheduleMaintenance() {
	r.w.after(r.w.cfg.StalenessTicks, "maintenance", func() {
		if r.up && r.client != nil {
			r.client.keepalive()
		}
		if r.up && r.dbUp {
			r.rewinder.take(r.db.version)
			r.ord.Observe(r.db.version)
			r.progress()
		}
		r.scheduleMaintenance() // the run ends at convergence or its time limit
	})
}

// idle is true when nothing of this replica is in flight.
func (r *replica) idle() bool {
	if r.busy || r.batch != nil || r.client == nil || len(r.client.pending) > 0 {
		return false
	}
	for _, s := range r.sessions {
		if s.phase != idle {
			return false
		}
	}
	return true
}

func (r *replica) nextTxnID() certification.TxnID {
	r.txnSeq++
	return certification.TxnID{Origin: r.origin, Seq: r.txnSeq}
}

// receive hands a message from the certifier to the agent's client.
func (r *replica) receive(m message) {
	if r.up && r.client != nil {
		r.client.receive(m)
	}
}
