package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// A replica that took entries before they were durable may hold versions
// that failed: the certifier that decided them died before they were
// durable, and its successor numbers other transactions from there
// (Eventual Durability, Kashi, §2.2.1: a committed transaction becomes
// durable or fails; §2.2.3: durability is a prefix). Admission finds such
// a replica by its history and tells it to rewind to C, the last version
// it shares with the log (pb.RewindRequired). The agent then ends its run
// and, before the next one serves, takes the replica back to a version
// k <= C by undoing rows (replica.Rewinder: pinned snapshots and the
// entries above them), then catches up from k. If it cannot undo (no pin,
// the replica's database restarted, a barrier with no pin after it), the replica
// halts and is rebuilt from a peer.
//
// The agent keeps pins only once its certifier sends it entries before
// they are durable: in mw nothing it holds can fail, and pins would only
// hold back vacuum.

// rewinding is what the agent keeps for rewinds, across its runs: one
// Rewinder per life of the database, and the rewind a refusal asked for.
type rewinding struct {
	mu       sync.Mutex
	rewinder *replica.Rewinder
	database string             // the life of the database it pins (run.started)
	stop     context.CancelFunc // ends its pinning
	asked    *rewindAsked       // the last refusal's, until a start rewinds
}

// rewindAsked is a refusal's verdict "rewind to C" and its message.
type rewindAsked struct {
	*pb.RewindRequired
	refusal string
}

// forDatabase is the Rewinder for the database's life started, nil if
// none: a Rewinder of another life is stopped (its pins are gone).
func (w *rewinding) forDatabase(started string) *replica.Rewinder {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rewinder != nil && w.database != started {
		w.stopLocked()
	}
	return w.rewinder
}

// ensure returns the database's Rewinder, starting one whose window begins
// after version if there is none: the first entries sent before they were
// durable have just arrived.
func (w *rewinding) ensure(a *Agent, started string, version uint64) *replica.Rewinder {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rewinder != nil && w.database == started {
		return w.rewinder
	}
	w.stopLocked()
	ctx, cancel := context.WithCancel(context.Background())
	w.rewinder = replica.NewRewinder(replica.RewinderConfig{
		Pins:    replica.PinsConfig{Connect: func(ctx context.Context) (*pgx.Conn, error) { return a.connect(ctx, pinApplicationName) }},
		Version: version, Logger: a.log})
	w.database, w.stop = started, cancel
	go w.rewinder.Run(ctx)
	a.log.Info("the certifier sends entries before they are durable: pinning snapshots of the replica, so that versions that fail can be undone",
		"from_version", version)
	return w.rewinder
}

func (w *rewinding) stopLocked() {
	if w.stop != nil {
		w.stop()
	}
	w.rewinder, w.database, w.stop = nil, "", nil
}

// close stops the pinning: the agent stops.
func (w *rewinding) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
}

func (w *rewinding) ask(rw *rewindAsked) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked = rw
}

// take returns the rewind asked for and forgets it.
func (w *rewinding) take() *rewindAsked {
	w.mu.Lock()
	defer w.mu.Unlock()
	rw := w.asked
	w.asked = nil
	return rw
}

// noteDelivered hands the run's Rewinder what the certifier delivered and
// the durable version it named, starting the Rewinder at the first entry
// sent before it was durable. Only an admitted stream's messages come
// here, so durable is the admitted epoch's: a pin at or below it holds no
// failed version.
func (r *run) noteDelivered(entries []logentry.Entry, durable uint64) {
	rw := r.a.rewinds.forDatabase(r.started)
	if rw == nil && len(entries) > 0 && entries[len(entries)-1].Version > durable {
		rw = r.a.rewinds.ensure(r.a, r.started, entries[0].Version-1)
	}
	if rw == nil {
		return
	}
	rw.Delivered(entries...)
	rw.Advance(durable)
	r.pinBarrier(entries)
}

// pinBarrier asks for a pin at the last barrier among entries, before
// they reach the order (barrierPinner). The pinner's session connects
// with the first entries a Rewinder hears of: from then on the agent
// keeps pins.
func (r *run) pinBarrier(entries []logentry.Entry) {
	r.barriers.start()
	b, err := lastBarrier(entries)
	if err != nil {
		r.a.log.Warn("could not read a delivered entry's changes to find barriers", "err", err)
		return
	}
	if b.at != 0 {
		r.barriers.want(b)
	}
}

// streamOpened tells the run's Rewinder, if any, that a stream opens at
// the replica's version: what was delivered above it is delivered again.
func (r *run) streamOpened(version uint64) {
	if rw := r.a.rewinds.forDatabase(r.started); rw != nil {
		rw.StreamOpened(version)
	}
}

// askRewind is a refusal's verdict "rewind to C": the run ends, and the
// next one rewinds before it serves (rewindIfAsked).
func (r *run) askRewind(rw *pb.RewindRequired, refusal string) {
	r.admission.refuse(refusal) // what the replica holds may have failed
	r.a.durable.suspend()
	r.a.rewinds.ask(&rewindAsked{RewindRequired: rw, refusal: refusal})
	// before the run ends: the backends holding failed versions end first
	r.a.failed.set(rw.CommonVersion, r.failedEpoch())
	r.a.log.Warn("the replica holds versions the certifier's log does not (failed versions); it goes back to where they agree before it serves again",
		"replica_version", rw.ReplicaVersion, "common_version", rw.CommonVersion)
	r.fail(fmt.Errorf("%w: the replica holds versions after %d that the certifier's log does not", errRestart, rw.CommonVersion))
}

// resumeRewindTries bounds the immediate tries of an interrupted
// rewind's finish; then the run's start is retried with its backoff.
const resumeRewindTries = 20

// resumeRewind finishes a rewind whose undo committed but whose finish did
// not (the agent or its connection died in between), before anything
// reads the replica's version.
//
// The finish is refused (55006) while a backend waits for its
// certification. Sessions left open by clients begin transactions again as
// soon as they are ended, so the transactions are ended right before each
// try, and a refused try is repeated at once: with only the run's backoff
// between tries, a replica under a steady write load can keep meeting a
// new certification for as long as the load lasts.
func (r *run) resumeRewind() error {
	target, pending, err := replica.PendingRewind(r.ctx, r.apply)
	if err != nil || !pending {
		if err != nil {
			return fmt.Errorf("finish an interrupted rewind: %w", err)
		}
		return nil
	}
	if err := r.raiseFence(target); err != nil {
		return fmt.Errorf("finish an interrupted rewind: %w", err)
	}
	defer r.lowerFence()
	var k uint64
	var resumed bool
	for try := 1; ; try++ {
		if err = r.endTransactions(); err != nil {
			return fmt.Errorf("finish an interrupted rewind: %w", err)
		}
		if rw := r.a.rewinds.forDatabase(r.started); rw != nil {
			k, resumed, err = rw.ResumeRewind(r.ctx, r.apply)
		} else {
			k, resumed, err = replica.ResumeRewind(r.ctx, r.apply)
		}
		if err == nil || pgcode.Of(err) != pgcode.ObjectInUse || try == resumeRewindTries {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("finish an interrupted rewind: %w", err)
	}
	if resumed {
		r.a.log.Warn("finished a rewind that was interrupted after its undo", "version", k)
	}
	return nil
}

// rewindIfAsked takes the replica back below the version a refusal named,
// if it holds versions above it. The gate is closed, and the fence raised
// (raiseFence): from here clients' transactions are refused. Backends in
// the commit order or in a transaction are ended then, whatever the
// replica's version: their snapshots may hold failed versions, a backend
// may hold a failed version not committed yet, and the rewind needs the
// turn. They are ended again once the undo committed, for an extension
// without the fence, where a session that was idle may have begun a
// transaction meanwhile. A replica that cannot be rewound halts for a
// rebuild (errHalted).
func (r *run) rewindIfAsked() error {
	asked := r.a.rewinds.take()
	if asked == nil {
		return nil
	}
	r.a.setState(StateRecovering, fmt.Sprintf("going back to version %d or below: the replica holds versions the certifier's log does not", asked.CommonVersion))
	if err := r.raiseFence(asked.CommonVersion); err != nil {
		r.a.rewinds.ask(asked)
		return err
	}
	defer r.lowerFence()
	if err := r.rewindTo(asked); err != nil {
		if !errors.Is(err, errHalted) {
			r.a.rewinds.ask(asked) // the next start finishes it (resumeRewind) or tries again
		}
		return err
	}
	return r.endTransactions()
}

// rewindTo ends the transactions in the way and undoes what the replica
// holds above the common version.
func (r *run) rewindTo(asked *rewindAsked) error {
	c := asked.CommonVersion
	if err := r.endTransactions(); err != nil {
		return err
	}
	v, err := r.control.committedVersion(r.ctx)
	if err != nil {
		return err
	}
	if v <= c {
		r.a.log.Info("the replica holds no version the certifier's log does not; nothing to undo", "version", v, "common_version", c)
		return nil
	}
	rw := r.a.rewinds.forDatabase(r.started)
	if rw == nil {
		return r.cannotRewind(asked, "this agent pinned no snapshot of the replica's database in its current life (it restarted, or the agent did)")
	}
	started := time.Now()
	k, err := r.rewindWithin(rw, c, v)
	var cannot *replica.CannotUndoError
	if errors.As(err, &cannot) {
		return r.cannotRewind(asked, cannot.Error())
	}
	if err != nil {
		return fmt.Errorf("rewind the replica from version %d to %d or below: %w", v, c, err)
	}
	r.a.metrics.rewinds.Inc()
	r.a.metrics.rewoundVersions.Add(float64(v - k))
	r.a.log.Warn("rewound: the replica went back past versions that failed, and catches up from the certifier's log",
		"from_version", v, "common_version", c, "to_version", k, "failed_versions", v-c, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// rewindLockTimeout bounds how long the undo waits for a row lock: a
// transaction that began after the backends were ended may hold one, and
// nothing else would end the wait. The rewind is then tried again, after
// ending the transactions again.
const rewindLockTimeout = 5 * time.Second

// rewindWithin runs the rewind with the apply session's lock_timeout set
// to rewindLockTimeout.
func (r *run) rewindWithin(rw *replica.Rewinder, c, v uint64) (uint64, error) {
	if _, err := r.apply.Exec(r.ctx, fmt.Sprintf("SET lock_timeout = %d", rewindLockTimeout.Milliseconds())); err != nil {
		return 0, fmt.Errorf("bound the rewind's lock waits: %w", err)
	}
	k, err := rw.Rewind(r.ctx, r.apply, c, v)
	if !r.apply.IsClosed() {
		if _, rerr := r.apply.Exec(r.ctx, "RESET lock_timeout"); rerr != nil && err == nil {
			err = fmt.Errorf("reset the apply session's lock timeout: %w", rerr)
		}
	}
	return k, err
}

// cannotRewind halts the replica for a rebuild from a peer, with the
// refusal and why the agent cannot undo what it names.
func (r *run) cannotRewind(asked *rewindAsked, why string) error {
	reason := fmt.Sprintf("%s: %s; this agent cannot undo the versions after %d: %s",
		pb.NeedsStateTransfer, asked.refusal, asked.CommonVersion, why)
	r.a.log.Error("the replica holds versions that failed and cannot undo them; it halts and must be rebuilt from a peer (state transfer)", "err", reason)
	r.haltForStateTransfer(reason)
	return errHalted
}

// lowerFenceSQL lowers the rewind fence; an agent that starts lowers one
// that an earlier agent left raised (it died during a rewind).
const lowerFenceSQL = `SELECT tashkent.lower_rewind_fence()`

// raiseFence makes the extension refuse clients' transactions (57P03,
// extension/src/fence.c) while the replica goes back to target or below,
// before the transactions in the way are listed: clients that reconnect
// and retry at once cannot begin new ones, so the set to end only
// shrinks, and no transaction reads a version that failed while the
// rewind runs. The agent's own sessions go on (tashkent.agent_session,
// db.go). An extension without the fence is warned about: the rewind
// goes on without it.
func (r *run) raiseFence(target uint64) error {
	err := r.control.exec(r.ctx, `SELECT tashkent.raise_rewind_fence($1)`, int64(target))
	if pgcode.MissingObject(err) {
		r.a.log.Warn("this extension has no rewind fence: clients that retry at once can delay a rewind (install the extension that matches the agent)")
		return nil
	}
	if err != nil {
		return fmt.Errorf("refuse clients' transactions during the rewind: %w", err)
	}
	return nil
}

// lowerFence lets clients' transactions in again: the rewind finished or
// was given up. If it cannot, the fence stays until the next run's start
// lowers it (install).
func (r *run) lowerFence() {
	err := r.control.exec(context.WithoutCancel(r.ctx), lowerFenceSQL)
	if err != nil && !pgcode.MissingObject(err) {
		r.a.log.Warn("could not lower the rewind fence: clients' transactions stay refused until the agent starts its run again", "err", err)
	}
}

// transactionsToEndSQL lists the client backends of the replica's
// database a rewind must end: those inside a transaction, whose snapshot
// may hold failed versions, and those in the commit order (certifying,
// holding or committing a version), which tashkent.rewind_begin refuses
// to run beside; a durable version a backend held comes back from the
// log. The agent's own connections (its role and its application names)
// are left alone, the pins' open transactions among them. A session idle
// in a transaction block that failed is not listed: PostgreSQL released
// its snapshot and cleared its xact_start at the failure, and it can only
// roll back. One whose failure was inside a savepoint is: it keeps its
// xact_start and snapshot, and reads again after ROLLBACK TO SAVEPOINT.
const transactionsToEndSQL = `SELECT a.pid FROM pg_catalog.pg_stat_activity AS a
WHERE a.backend_type OPERATOR(pg_catalog.=) 'client backend' AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
	AND a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
	AND NOT (a.application_name OPERATOR(pg_catalog.~~) 'tashkent-agent%' AND a.usename OPERATOR(pg_catalog.=) CURRENT_USER)
	AND (a.xact_start IS NOT NULL OR a.pid IN (SELECT b.pid FROM tashkent.backends() AS b
		WHERE b.state OPERATOR(pg_catalog.=) ANY ('{certifying,holding,committing}'::pg_catalog.text[])))`

// endTransactions terminates those backends and waits until they are gone.
func (r *run) endTransactions() error {
	return r.terminateUntilGone("the transactions in progress around a rewind (they may have read versions that failed)", transactionsToEndSQL)
}

// failedEpoch is the epoch of a rewind verdict's failure: the newest
// epoch the replica's history holds. Every decision a backend holds is of
// it or an earlier one (a run is recorded before its first entry is
// ordered, and entries come before the replies that depend on them); the
// epoch the replica is admitted in next is later. Without a history
// (an extension installed before it existed), every epoch.
func (r *run) failedEpoch() uint64 {
	if e := r.history.top(); e != 0 {
		return e
	}
	return math.MaxUint64
}
