package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// fragmentSavepoint is the savepoint each ApplySpan call inside a span
// runs under, so that a failed call undoes only itself.
const fragmentSavepoint = "tashkent_fragment"

// ApplySpan applies entries, consecutive fragments of one span (a
// streamed transaction, committed as the versions span_first..span_last:
// certifierpb.LogEntry), in the span's one database transaction, which
// stays open on conn between calls. The call whose entries hold
// span_first begins it with tashkent.apply_versions(span_first,
// span_last), so that its COMMIT waits for its turn at span_first and
// records span_last (extension/src/commit.c, apply_in_turn); the call
// whose entries hold span_last commits it. Nothing else may run on conn
// in between: the replica's version goes from span_first - 1 to
// span_last in that one commit, and a span left unfinished (the run ends,
// the connection is lost) is rolled back whole.
//
// Each fragment is planned and applied as Apply applies the entries of
// one transaction: its changes are in the order they are to be applied,
// so collapsing them per key is correct within it; fragments are applied
// in order, one after the other. DDL runs in place, inside the span's
// transaction, as it ran at the origin: there, too, the whole streamed
// transaction was one transaction, so what a DDL statement makes is
// usable later in it exactly where it was at the origin (an enum value
// that ALTER TYPE ... ADD VALUE added was not, there either: 55P04).
//
// A call inside a span runs under a savepoint: when it fails, it undoes
// only itself and leaves the span's transaction open, and the same
// entries may be applied again (the retries Apply makes, for a unique
// violation, stale metadata or a keyless row not found, are made so). When
// the span's transaction itself is lost (a failed COMMIT, a lost
// connection, a savepoint that cannot be rolled back to), the error says
// so (IsSpanLost) and the span must be applied again from its first
// fragment, in a new transaction. A first call that fails leaves conn
// idle, as Apply does.
func (a *Applier) ApplySpan(ctx context.Context, conn *pgx.Conn, entries []*certifierpb.LogEntry) error {
	sp, err := checkSpan(entries)
	if err != nil {
		return err
	}
	begins := entries[0].GetVersion() == sp.first
	if begins {
		if err := idle(ctx, conn); err != nil {
			return err
		}
	} else if conn.IsClosed() || conn.PgConn().TxStatus() != 'T' {
		return &spanLostError{sp, fmt.Errorf("its transaction is not open on the connection (status %q)", conn.PgConn().TxStatus())}
	}
	plans := make([][]*step, len(entries))
	for i := range entries {
		if plans[i], err = buildPlan(entries[i : i+1]); err != nil {
			return err
		}
	}
	tg := target{sendBatch: conn.SendBatch, query: conn.Query, pg: conn.PgConn()}
	var r retries
	for {
		at := a.attempt(tg, &r)
		err := a.runFragments(ctx, conn, at, plans, sp, entries)
		if err == nil {
			at.succeeded()
			return nil
		}
		// What the call read after its own DDL is undone with it, and a
		// schema error may come from metadata read before; the rest of
		// the cache stays, with the tables whose COPY was refused
		// (refuseCopyInto), so that the span's next fragments give their
		// rows to the statements at once.
		if runsDDL(plans) || isSchemaError(pgcode.Of(err)) {
			a.Invalidate()
		}
		if lost := undoFragments(ctx, conn, begins); lost != nil {
			a.Invalidate() // the span's earlier fragments' DDL is undone too
			return &spanLostError{sp, errors.Join(err, lost)}
		}
		if ctx.Err() == nil && r.again(at, err) {
			continue
		}
		return fmt.Errorf("replica: apply versions %d..%d of span %d..%d: %w",
			entries[0].GetVersion(), entries[len(entries)-1].GetVersion(), sp.first, sp.last, err)
	}
}

// runsDDL reports whether a plan of plans runs DDL.
func runsDDL(plans [][]*step) bool {
	for _, plan := range plans {
		for _, st := range plan {
			if st.kind == stepDDL {
				return true
			}
		}
	}
	return false
}

// retries are the retries of a failed apply that another attempt may
// cure, each made once (see Applier.Apply): without COPY after an
// attempt that used it failed where the statements may not
// (copyRefused: from there on, the attempts are the statements' own, and
// a table whose COPY failed keeps to the statements in later calls too:
// refuseCopyInto); with fresh metadata after a schema error; deleting
// every key before inserting after a unique violation (a secondary
// unique index whose values the rows move between them); and after a
// keyless row was not found, as a local version before the apply may
// have changed the row after the statement took its snapshot, and
// committed while the delete waited for the row's lock (then the
// statement skipped the row; a new one sees it).
type retries struct {
	noCopy, deleteInsert, refreshed, missingRetried bool
}

// again reports whether an apply attempt at that failed with err is to
// be tried again, and how.
func (r *retries) again(at *attempt, err error) bool {
	code := pgcode.Of(err)
	switch {
	case at.copied && copyRefused(err):
		r.noCopy = true
		at.counts.fellBack()
		refuseCopyInto(err)
	case !r.refreshed && isSchemaError(code):
		r.refreshed = true
	case !r.deleteInsert && code == pgcode.UniqueViolation:
		r.deleteInsert = true
	case !r.missingRetried && code == pgcode.KeylessRowMissing:
		r.missingRetried = true
	default:
		return false
	}
	return true
}

// runFragments sends one call's statements: the span's start if it
// begins here, else a savepoint; each fragment's plan; the span's commit
// if it ends here.
func (a *Applier) runFragments(ctx context.Context, conn *pgx.Conn, at *attempt, plans [][]*step, sp versionSpan, entries []*certifierpb.LogEntry) error {
	begins := entries[0].GetVersion() == sp.first
	if begins {
		queueBegin(at.b, sp.first, sp.last)
	} else if _, err := conn.Exec(ctx, "SAVEPOINT "+fragmentSavepoint); err != nil {
		// sent alone, before the metadata queries: one that fails must
		// find the savepoint there to go back to
		return err
	}
	for i, plan := range plans {
		if err := a.queuePlan(ctx, at, plan, entries[i].GetVersion()); err != nil {
			return err
		}
	}
	if !begins {
		at.b.Queue("RELEASE SAVEPOINT " + fragmentSavepoint)
	}
	if entries[len(entries)-1].GetVersion() == sp.last {
		at.b.Queue("COMMIT")
	}
	return at.flush(ctx)
}

// undoFragments undoes a failed call: all of it if it began the span
// (conn is left idle), else back to its savepoint. It returns why the
// span's transaction is lost, nil if it is not.
func undoFragments(ctx context.Context, conn *pgx.Conn, begins bool) error {
	if begins {
		if err := rollback(ctx, conn); err != nil {
			return err
		}
		return nil
	}
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return errors.New("the transaction ended")
	}
	if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+fragmentSavepoint); err != nil {
		return errors.Join(fmt.Errorf("roll back to the fragment's savepoint: %w", err), rollback(ctx, conn))
	}
	return nil
}

// versionSpan is a span's first and last versions.
type versionSpan struct{ first, last uint64 }

// checkSpan checks that entries are consecutive versions of one span, and
// returns it.
func checkSpan(entries []*certifierpb.LogEntry) (versionSpan, error) {
	if len(entries) == 0 {
		return versionSpan{}, errors.New("replica: apply span: no entries")
	}
	if _, _, err := checkEntries(entries); err != nil {
		return versionSpan{}, err
	}
	sp := versionSpan{entries[0].GetSpanFirst(), entries[0].GetSpanLast()}
	for _, e := range entries {
		v := e.GetVersion()
		if e.GetSpanFirst() != sp.first || e.GetSpanLast() != sp.last || sp.first == 0 || v < sp.first || v > sp.last || sp.last > maxVersion {
			return versionSpan{}, fmt.Errorf("replica: apply span: version %d (span %d..%d) is not in span %d..%d",
				v, e.GetSpanFirst(), e.GetSpanLast(), sp.first, sp.last)
		}
	}
	return sp, nil
}

// spanLostError says that the span's transaction was rolled back: the
// span must be applied again from its first fragment.
type spanLostError struct {
	span versionSpan
	err  error
}

func (e *spanLostError) Error() string {
	return fmt.Sprintf("replica: the transaction of span %d..%d was rolled back: %v", e.span.first, e.span.last, e.err)
}

func (e *spanLostError) Unwrap() error { return e.err }

// IsSpanLost reports ApplySpan's error for a span whose transaction was
// rolled back after some of its fragments were applied in it.
func IsSpanLost(err error) bool {
	var e *spanLostError
	return errors.As(err, &e)
}
