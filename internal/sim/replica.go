package sim

import (
	"context"
	"fmt"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/sequencer"
)

// replica is the model of one replica: its database and the process that
// certifies and applies for it (its agent). internal/sequencer orders its
// commits; remote versions are applied by the applier and local ones by
// their sessions, one version at a time.
type replica struct {
	w           *world
	id          int
	up          bool // the agent is running
	dbUp        bool // the database is running
	incarnation uint64

	db       *store
	seq      *sequencer.Sequencer
	client   *streamClient
	origin   string
	restarts int
	txnSeq   uint64
	connN    uint64
	entries  map[uint64]entry // delivered, not yet committed here
	sessions []*session
	busy     bool   // a commit (a remote batch or a local one) is in flight
	inFlight func() // its database part, which a crash may or may not let happen
	// versionBeforeCrash is what the replica had committed when its
	// database crashed (only MutationRecoverFromMemory uses it).
	versionBeforeCrash uint64

	recovering  bool // clients wait until the replica caught up
	targetKnown bool
	target      uint64 // the certifier's durable version when recovery began
}

// cancelled makes the sequencer's waits non-blocking polls: wait checks its
// condition first and, when it does not hold, returns the context's error.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func newReplica(w *world, id int) *replica {
	r := &replica{w: w, id: id, db: newStore(w, id), entries: make(map[uint64]entry)}
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
// version the database holds, opens the stream from there and catches up
// before admitting clients.
// The origin is new at every start, so transaction ids never repeat.
func (r *replica) restart() {
	r.up, r.dbUp = true, true
	r.incarnation++
	r.restarts++
	r.origin = fmt.Sprintf("r%d.%d", r.id, r.restarts)
	r.txnSeq = 0
	r.seq = sequencer.New(r.origin, r.recoveredVersion())
	r.w.note("replica-up", uint64(r.id), r.db.version, 0)
	r.openStream()
	for _, s := range r.sessions {
		s.scheduleNext()
	}
}

// openStream replaces the certifier client with one that starts at the
// database's version, in the sequencer's current epoch.
func (r *replica) openStream() {
	if r.client != nil {
		r.client.close()
	}
	r.recovering, r.targetKnown = true, false
	r.entries = make(map[uint64]entry)
	r.client = newStreamClient(r, r.seq.Epoch(), r.seq.Committed())
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
// sequencer and the client's pending calls are gone. A database that
// crashes keeps what it flushed; one that stays up keeps every commit,
// including the one in flight, if it got that far.
func (r *replica) crash(agentOnly bool) {
	if !r.up {
		return
	}
	r.w.stats.ReplicaCrashes++
	r.up = false
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
// agent resets its sequencer at once, the sessions are closed, and when the
// database answers again, the agent resets to the version it recovered and
// reopens the stream from there. Until then the old stream keeps delivering
// into a stale epoch.
func (r *replica) crashDatabaseOnly(downTicks int64) {
	if !r.up || !r.dbUp {
		return
	}
	r.w.stats.ReplicaCrashes++
	r.crashDatabase()
	r.seq.Reset(r.seq.Committed())
	inc := r.incarnation
	r.w.after(downTicks, "database-up", func() {
		if r.incarnation != inc || !r.up || r.dbUp {
			return // crashed again, or healed already
		}
		r.resumeAfterDatabaseRestart()
	})
}

func (r *replica) resumeAfterDatabaseRestart() {
	r.dbUp = true
	r.seq.Reset(r.recoveredVersion())
	r.w.note("database-up", uint64(r.id), r.db.version, 0)
	r.openStream()
	for _, s := range r.sessions {
		s.scheduleNext()
	}
}

func (r *replica) crashDatabase() {
	r.settleInFlight()
	r.versionBeforeCrash = r.db.version
	r.dbUp = false
	r.incarnation++ // in-flight commits and timers of this life are void
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

// deliver hands entries of the stream opened at epoch to the sequencer.
func (r *replica) deliver(epoch uint64, entries []entry) {
	les := make([]logentry.Entry, len(entries))
	origins := make([]string, len(entries))
	seqs := make([]uint64, len(entries))
	for i, e := range entries {
		les[i] = logentry.Entry{Version: e.version}
		origins[i], seqs[i] = e.txn.Origin, e.txn.Seq
		if old, ok := r.entries[e.version]; ok && old.txn != e.txn {
			r.w.violate("replica %d was delivered two different entries for version %d: %v and %v", r.id, e.version, old.txn, e.txn)
		}
		if e.version > r.db.version {
			r.entries[e.version] = e
		}
	}
	r.seq.Deliver(epoch, les, origins, seqs)
	r.w.note("delivered", uint64(r.id), entries[len(entries)-1].version, epoch)
	r.progress()
}

// durableSeen notes the certifier's durable version: the first one after
// a (re)start is the catch-up target.
func (r *replica) durableSeen(durable uint64) {
	if r.recovering && !r.targetKnown {
		r.target, r.targetKnown = durable, true
	}
	r.progress()
}

// progress starts the next commit if its turn has come: a batch of remote
// versions (applyLoop) or a session's local commit (WaitTurn).
func (r *replica) progress() {
	if !r.up || !r.dbUp || r.busy {
		return
	}
	r.endRecoveryIfCaughtUp()
	r.ackSoftRecovered()
	if batch, err := r.seq.NextRemote(cancelled, r.w.cfg.ApplyBatchEntriesMax); err == nil {
		r.applyRemote(batch)
		return
	}
	next := r.seq.Committed() + 1
	for _, s := range r.sessions {
		if s.phase == waitingTurn && (s.local.Version() == next || r.w.cfg.Mutation == MutationCommitWithoutTurn) {
			r.commitLocal(s)
			return
		}
	}
}

func (r *replica) endRecoveryIfCaughtUp() {
	if r.recovering && r.targetKnown && r.seq.Committed() >= r.target {
		r.recovering = false
		r.w.note("caught-up", uint64(r.id), r.seq.Committed(), 0)
		for _, s := range r.sessions {
			s.scheduleNext()
		}
	}
}

// applyRemote applies a batch in one database transaction, after a
// latency. A crash meanwhile may or may not have let the database commit it
// (crashDatabase); the agent never learns which.
func (r *replica) applyRemote(batch []logentry.Entry) {
	entries := make([]entry, len(batch))
	for i, le := range batch {
		e, ok := r.entries[le.Version]
		if !ok {
			r.w.violate("replica %d: version %d is next but its entry is unknown", r.id, le.Version)
			return
		}
		entries[i] = e
	}
	if r.w.cfg.Mutation == MutationSwapRemoteVersions && len(entries) >= 2 {
		entries[0].writes, entries[1].writes = entries[1].writes, entries[0].writes
	}
	r.startCommit("apply", func() {
		for _, e := range entries {
			r.db.commit(e.version, e.txn, e.writes)
			delete(r.entries, e.version)
		}
	}, func() {
		r.seq.CommitBatch(batch)
		r.w.note("applied", uint64(r.id), batch[len(batch)-1].Version, uint64(len(batch)))
	})
}

// commitLocal is C5: the session records its version and commits. If the
// database refuses (out of disk, a crashed backend), the session rolls back
// and hands the version to the applier, which applies its writeset like a
// remote one; the client still gets COMMIT (Tashkent §8.1 soft recovery).
func (r *replica) commitLocal(s *session) {
	s.phase = committing
	v, txn := s.local.Version(), s.txn
	if r.w.chance(r.w.cfg.SoftRecoveryPerMille) {
		r.startCommit("commit-refused", func() {}, func() {
			r.w.stats.SoftRecoveries++
			r.seq.Abandon(s.local)
			s.phase = awaitingApply
		})
		return
	}
	r.startCommit("commit-local", func() {
		r.db.commit(v, txn.id, txn.writes)
	}, func() {
		delete(r.entries, v)
		r.seq.Commit(v)
		r.w.hist.ack(txn, v)
		s.finish()
	})
}

// ackSoftRecovered answers the sessions whose version the applier
// committed for them.
func (r *replica) ackSoftRecovered() {
	for _, s := range r.sessions {
		if s.phase == awaitingApply && r.seq.Committed() >= s.version {
			r.w.hist.ack(s.txn, s.version)
			s.finish()
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

// scheduleMaintenance is the agent's maintenance: a catch-up request every
// staleness period (bounded staleness), which also tells a dead stream from
// a quiet one.
func (r *replica) scheduleMaintenance() {
	r.w.after(r.w.cfg.StalenessTicks, "maintenance", func() {
		if r.up && r.client != nil {
			r.client.keepalive()
		}
		r.scheduleMaintenance() // the run ends at convergence or its time limit

	})
}

// idle is true when nothing of this replica is in flight.
func (r *replica) idle() bool {
	if r.busy || r.client == nil || len(r.client.pending) > 0 {
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
