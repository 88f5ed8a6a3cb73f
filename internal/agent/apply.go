package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/order"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// applyLoop applies remote versions, one batch in flight at a time, until
// the run ends or halts. A batch is sent as soon as it is planned, also
// while local versions before it are not committed yet: its transaction
// waits for its turn inside PostgreSQL (extension/src/turn.c), so its
// writes overlap the commits before it.
//
// A remote span (a streamed transaction) comes one fragment per batch; its
// database transaction stays open on the applier's connection from its
// first batch to its last (replica.ApplySpan).
func (r *run) applyLoop() {
	for {
		b, err := r.a.seq.next(r.ctx)
		if errors.Is(err, errRestart) {
			r.restart()
		}
		if err != nil {
			return
		}
		err = r.applyBatch(b)
		if err == nil {
			r.a.seq.done(true)
			r.countApplied(b)
			continue
		}
		r.a.seq.done(false)
		if !r.handleApplyError(b, err) {
			return
		}
	}
}

// countApplied counts the versions a batch committed: a span's, all at
// once, with the batch that ends it.
func (r *run) countApplied(b *order.Batch) {
	first, last := b.First, b.Last
	switch {
	case b.EndsSpan():
		first = b.SpanFirst
	case b.InSpan():
		return
	}
	r.a.metrics.applied.Add(float64(last - first + 1))
	r.a.metrics.batchVersions.Observe(float64(last - first + 1))
}

// applyBatch applies one batch and, while it runs, watches it: local
// transactions that block it are doomed (lockwatch.go), and if a version
// before it was abandoned, it is cancelled, since it would wait for its
// turn behind a version only the applier can apply (Tashkent §8.1).
//
// A span's batch runs in the span's transaction, and its locks are needed
// for the span's first version, whose turn its commit waits for. If the
// order wants a new run meanwhile (order.Restart), the run ends, and with
// it the batch.
func (r *run) applyBatch(b *order.Batch) error {
	entries := make([]*pb.LogEntry, len(b.Entries))
	for i, e := range b.Entries {
		d, err := e.Decode()
		if err != nil {
			return fmt.Errorf("decode version %d: %w", e.Version, err)
		}
		entries[i] = d
	}
	done := make(chan error, 1)
	first := b.First
	if b.InSpan() {
		first = b.SpanFirst
		go func() { done <- r.applier.ApplySpan(r.ctx, r.apply, entries) }()
	} else {
		go func() { done <- r.applier.Apply(r.ctx, r.apply, entries) }()
	}
	watch := newLockWatch(r, first)
	tick := time.NewTicker(lockWatchInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-r.a.seq.changes():
		case <-tick.C:
			watch.check()
		}
		if r.a.seq.cancelWanted() {
			r.cancelApply(b)
		}
		if get(r.a.seq, (*order.Order).RestartWanted) {
			r.restart()
		}
	}
}

// restart ends the run because its order cannot go on (order.Restart):
// a local span whose backend gave it up, or a version before a span
// whose transaction is open, must be applied from entries the order did
// not keep. The next run delivers them again from the database's
// version.
func (r *run) restart() {
	r.fail(fmt.Errorf("%w: a streamed transaction must be applied from the certifier's log again (a backend gave up a certified version it had streamed, or one before a streamed transaction being applied)", errRestart))
}

// cancelApply cancels the statement the applier's backend runs. It is
// repeated while the batch runs: a cancel that arrives between two of its
// statements is lost.
func (r *run) cancelApply(b *order.Batch) {
	r.a.log.Debug("cancelling a batch that waits behind an abandoned version", "first", b.First, "last", b.Last)
	r.control.exec(r.ctx, `SELECT pg_catalog.pg_cancel_backend($1)`, int32(r.apply.PgConn().PID()))
}

// handleApplyError decides what follows a failed batch (planned again
// already); false ends the applier.
func (r *run) handleApplyError(b *order.Batch, err error) bool {
	switch code := pgcode.Of(err); {
	case r.ctx.Err() != nil:
		return false
	case b.InSpan() && !b.BeginsSpan() && (replica.IsSpanLost(err) || r.apply.IsClosed()):
		// The fragments applied before this batch are not kept.
		r.fail(fmt.Errorf("%w: the transaction of span %d..%d was lost at version %d: %w", errRestart, b.SpanFirst, b.SpanLast, b.First, err))
		return false
	case r.apply.IsClosed():
		return r.reconnectApplier(err)
	case code == pgcode.DeadlockDetected || code == pgcode.SerializationFailure || code == pgcode.LockNotAvailable || code == pgcode.QueryCanceled:
		r.a.log.Info("remote apply interrupted; retrying", "first_version", b.First, "code", code)
		if code != pgcode.QueryCanceled {
			_ = ctxtime.Sleep(r.ctx, retryPause)
		}
		return true
	case replica.IsAlreadyCommitted(err):
		return r.skipCommitted(b, err)
	}
	if b.InSpan() {
		r.rollbackSpan()
	}
	r.halt(fmt.Errorf("apply versions %d..%d: %w", b.First, b.Last, err))
	return false
}

// rollbackSpan rolls back the span's transaction, which a failed
// fragment inside it leaves open, before the applier stops for good: its
// row locks are not kept.
func (r *run) rollbackSpan() {
	ctx, cancel := context.WithTimeout(r.ctx, queryTimeout)
	defer cancel()
	if _, err := r.apply.Exec(ctx, "ROLLBACK"); err != nil {
		r.a.log.Warn("could not roll back the streamed transaction the applier stops in", "err", err)
	}
}

// skipCommitted handles a batch that holds versions the database
// committed already: a backend the agent took for gone committed its
// version after all, or an applier of before did. The database's version
// is the truth; the rest is applied next.
func (r *run) skipCommitted(b *order.Batch, err error) bool {
	committed, rerr := r.readCommitted()
	if errors.Is(rerr, errLostCommits) {
		r.fail(rerr)
		return false
	}
	if rerr != nil {
		r.a.log.Warn("could not read the replica's version after an apply failed", "err", rerr)
		return r.ctx.Err() == nil
	}
	if committed < b.First {
		r.halt(fmt.Errorf("apply versions %d..%d: %w", b.First, b.Last, err))
		return false
	}
	r.a.log.Info("the database holds versions the applier was given; they count as committed",
		"first_version", b.First, "committed", committed)
	return true
}

// reconnectApplier replaces the applier's connection after it was lost
// while the database stayed up (its backend was terminated): nothing is
// replayed, the batch is applied again unless the database shows it
// committed. It reports false and fails the run when the database
// restarted, lost commits or cannot be reached.
func (r *run) reconnectApplier(cause error) bool {
	if _, err := r.readCommitted(); err != nil && !r.reconnectControl(err) {
		return false // the control connection, which registering needs, is lost too
	}
	conn, err := r.a.connect(r.ctx, applyApplicationName)
	if err == nil {
		committed, ok := r.sameDatabase(r.ctx, conn)
		old := r.apply
		if ok {
			r.apply = conn
			if err = r.register(); err == nil {
				old.Close(context.Background())
				r.applier.Invalidate()
				r.a.seq.observe(committed)
				r.a.log.Warn("lost the applier's connection; reconnected (the database did not restart)", "err", cause)
				return true
			}
			r.apply = old
		}
		conn.Close(context.Background())
	}
	r.fail(errors.Join(cause, errors.New("the database restarted, lost commits or cannot be reached"), err))
	return false
}

// halt stops applying for good: the database refused a committed version,
// and the replica must be rebuilt. Clients are kept out and
// certifications refused (Unavailable) instead of letting the replica
// fall behind unseen.
func (r *run) halt(err error) {
	r.a.log.Error("the replica cannot apply a committed version; it stops applying and must be rebuilt", "err", err)
	r.a.setState(StateHalted, err.Error())
	r.closeGate("this replica stopped applying the cluster's commits and must be rebuilt")
}
