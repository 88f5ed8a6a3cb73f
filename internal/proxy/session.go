package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/pgwire"
	"github.com/tashkent-db/tashkent/internal/sequencer"
	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// session is one client connection. Its goroutine reads the client's
// units and processes them one at a time; mu is held while it does, so the
// lock watch can tell a session that is idle in a transaction (waiting for
// its client) from one that is running a statement.
type session struct {
	p   *Proxy
	w   *pgwire.Session
	log *slog.Logger

	mu     sync.Mutex
	status byte   // the backend's transaction status, as last reported
	start  uint64 // start_version of the open transaction

	// doomedErr is set by the lock watch after it rolled back the session's
	// idle transaction; the client gets it at its next statement, and the
	// proxy plays the failed block (failedBlock) until ROLLBACK or COMMIT.
	doomedErr   *pgproto3.ErrorResponse
	failedBlock bool
	// conflictCancelAt is when the lock watch last cancelled the running
	// statement (sinceProcessStart; 0: never): a 57014 within
	// conflictCancelWindow of it is reported as 40001 (see rewriteError).
	conflictCancelAt atomic.Int64
	// executing is set while the backend has a message of the client's that
	// executes a statement (a simple query, or an extended-protocol unit
	// with an Execute): only then does the lock watch cancel (see doom).
	executing   atomic.Bool
	committing  atomic.Bool                     // between asking the certifier and the end of COMMIT
	certified   atomic.Bool                     // the certifier said commit; the transaction waits for its turn
	waitingTurn atomic.Pointer[sequencer.Local] // the certified transaction's place in the order, while certified

	ex         exchange // the extended-protocol exchange in progress
	beginFirst bool     // the next statement goes after the proxy's BEGIN, in the same write (simple.go)
	// deferredBegin: the client's plain BEGIN was answered by the proxy and
	// status is 'T', but the database is idle; the block opens with the
	// next thing sent to it (deferbegin.go).
	deferredBegin bool
	// relayingSyncedUnit is set while relay reads the answer to an
	// extended-protocol unit sent with its Sync (forwardSyncAfterCopy).
	relayingSyncedUnit bool
	ddl                []string // DDL run by the open transaction
	sessionState       bool     // the open transaction ran a statement keepsSessionState reports
	// onlyReads: the open transaction ran only plain reads so far;
	// unitMayWrite: the unit being handled may write; hiddenWrites: a
	// transaction of this session that ran only reads wrote after all, so
	// every COMMIT collects (readonly.go).
	onlyReads, unitMayWrite, hiddenWrites bool
	// endAfterReply, once the reply to the current message is flushed, is
	// sent to the client and ends the session (see applyInstead); it is
	// also the client's last word if the rest of the message fails first.
	endAfterReply *pgproto3.ErrorResponse
	savepoints    []savepoint                  // the open transaction's, oldest first (savepoints.go)
	statements    map[string]preparedStatement // prepared statements by name
	portals       map[string]string            // portal -> statement name
	// unprepared are the proxy's own statements the client dropped
	// (statements.go).
	unprepared map[string]bool

	// unconfirmedParses: the current unit's Parses not yet completed by
	// PostgreSQL (parsetrack.go).
	unconfirmedParses []parseChange
}

func newSession(p *Proxy, w *pgwire.Session) *session {
	return &session{
		p: p, w: w, log: w.Logger().With("backend_pid", w.BackendPID),
		status: w.TxStatus, statements: map[string]preparedStatement{}, portals: map[string]string{},
		unprepared: map[string]bool{},
	}
}

// run serves the client until it leaves or a connection breaks.
func (s *session) run(ctx context.Context) error {
	for {
		msg, err := s.w.Client.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return fmt.Errorf("client: %w", err)
		}
		if refusal := s.haltedBetweenTransactions(msg); refusal != nil {
			s.w.Client.Send(refusal)
			return s.w.Client.Flush()
		}
		switch m := msg.(type) {
		case *pgproto3.Terminate:
			return nil
		case *pgproto3.Query:
			err = s.locked(true, func() error { return s.simpleQuery(ctx, m.String) })
			s.endUnit()
		case *pgproto3.FunctionCall:
			err = s.refuse(codeFeatureNotSupported, "the fastpath function call protocol is not supported by tashkent", "Call the function with SELECT.")
		default:
			var u *unit
			u, err = s.readUnit(msg)
			if err == nil {
				err = s.locked(executes(u.msgs), func() error { return s.extendedUnit(ctx, u) })
				s.endUnit()
			}
		}
		if err != nil {
			return err
		}
		if err := s.w.Client.Flush(); err != nil {
			return fmt.Errorf("client: %w", err)
		}
		if s.endAfterReply != nil {
			s.w.Client.Send(s.endAfterReply)
			return s.w.Client.Flush()
		}
	}
}

// haltedBetweenTransactions returns the error that ends a session between
// transactions on a replica that stopped applying: its data would only
// grow staler. A block whose BEGIN the proxy still defers has run nothing
// and ends too; a transaction in progress goes on to its end.
func (s *session) haltedBetweenTransactions(next pgproto3.FrontendMessage) *pgproto3.ErrorResponse {
	e := s.p.rep.broken.Load()
	if _, terminate := next.(*pgproto3.Terminate); e == nil || terminate {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if (s.status != 'I' && !s.deferredBegin) || s.ex.open {
		return nil // a transaction that ran something goes on to its end
	}
	return replicaHalted(*e)
}

// locked handles one message (or extended-protocol unit) of the client's
// under the session's lock, which the lock watch takes to roll back an idle
// transaction; executes says whether it runs a statement (see executing).
func (s *session) locked(executes bool, f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executing.Store(executes)
	defer s.executing.Store(false)
	return f()
}

// refuse answers a whole unit with an error and ReadyForQuery. An open
// transaction block fails, as after an error from PostgreSQL.
func (s *session) refuse(code, message, hint string) error {
	s.w.Client.Send(errorResponse(code, message, "", hint))
	if s.status == 'T' {
		if err := s.failBlock(); err != nil {
			return err
		}
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	return nil
}

// labelIfIdle returns the version to label a transaction with, read before
// anything of the unit reaches the database (Tashkent §6.2 A1–A2).
func (s *session) labelIfIdle() {
	if s.status == 'I' {
		s.start = s.p.rep.seq.Committed()
		s.resetTransaction()
	}
}

// A session the lock watch preempted while it was idle in a transaction
// block has had its backend transaction rolled back (the backend is idle);
// the client does not know yet. The proxy plays the rest of the client's
// failed block: its next statement gets the 40001 (doomedErr), later ones
// 25P02 (as PostgreSQL answers in a failed block), until ROLLBACK or
// COMMIT end it. Parse and Close are still forwarded, so that the client's
// prepared statements exist as it expects.

// takeDoom answers a unit of a preempted session, if the session is one,
// and reports whether it did. kinds are the unit's statements' kinds.
func (s *session) takeDoom(kinds []sqlclass.Kind, u *unit) (bool, error) {
	if s.doomedErr == nil && !s.failedBlock {
		return false, nil
	}
	if u != nil && !u.partial() && len(kinds) == 0 && s.doomedErr != nil {
		return true, s.answerWithoutStatement(u)
	}
	if u != nil {
		if err := s.forwardStatementMessages(u); err != nil {
			return true, err
		}
	}
	ends := len(kinds) == 1 && (kinds[0] == sqlclass.Rollback || kinds[0] == sqlclass.Commit)
	switch {
	case ends && s.doomedErr != nil && kinds[0] == sqlclass.Commit:
		s.w.Client.Send(s.doomedErr) // the COMMIT fails: the transaction is over
	case ends:
		s.w.Client.Send(&pgproto3.CommandComplete{CommandTag: []byte("ROLLBACK")})
	case s.doomedErr != nil:
		s.w.Client.Send(s.doomedErr)
	default:
		s.w.Client.Send(errorResponse(codeInFailedTransaction,
			"current transaction is aborted, commands ignored until end of transaction block", "", ""))
	}
	s.doomedErr, s.failedBlock = nil, !ends
	if u != nil && u.partial() {
		// No ReadyForQuery before the client's Sync; what it sends until
		// then is discarded, as after any error.
		s.ex = exchange{open: true, failed: true, played: true}
		return true, nil
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.playedStatus()})
	return true, nil
}

// playedStatus is the status a preempted session's client is told.
func (s *session) playedStatus() byte {
	if s.failedBlock {
		return 'E'
	}
	return 'I'
}

// forwardStatementMessages runs a unit's Parse and Close messages (those
// that outlive transactions) and relays their answers; the rest of the
// unit is answered by takeDoom.
func (s *session) forwardStatementMessages(u *unit) error {
	var raw []byte
	for _, m := range u.msgs {
		if m.typ == 'P' || (m.typ == 'C' && m.object == 'S') {
			raw = append(raw, m.raw...)
		}
	}
	if raw == nil {
		return nil
	}
	if err := s.forwardRaw(append(raw, syncMessage...)); err != nil {
		return err
	}
	_, err := s.relay(false)
	return err
}

var syncMessage, _ = (&pgproto3.Sync{}).Encode(nil)

// doom aborts the session's transaction because a remote writeset needs a
// row lock it holds: it would fail certification anyway (Tashkent §8.2).
// Called by the lock watch, from another goroutine.
func (s *session) doom() {
	if s.certified.Load() {
		if l := s.waitingTurn.Load(); l != nil {
			s.log.Warn("a remote writeset waits for a row lock held by a certified local transaction (a lock certification does not see: SELECT ... FOR UPDATE/SHARE of a row the transaction did not write, or a foreign-key check); the local transaction gives way and its writeset is applied in its place")
			s.p.rep.seq.Displace(l)
		}
		return
	}
	if s.committing.Load() {
		// Its certification is in flight and will abort it: it wrote a row
		// of a version it has not seen. The rollback releases the lock.
		return
	}
	if s.mu.TryLock() { // idle: waiting for its client
		defer s.mu.Unlock()
		if s.status != 'T' || s.ex.open || s.deferredBegin {
			// Not in a block; or between the parts of an extended-protocol
			// exchange, whose portals a rollback would destroy under the
			// client: the lock watch tries again after its Sync. A deferred
			// BEGIN holds no locks.
			return
		}
		res, err := s.exec("ROLLBACK")
		if err != nil {
			return
		}
		if res.status == 'I' {
			s.doomedErr = errorResponse(codeSerializationFailure,
				"could not serialize access: this transaction was aborted because a transaction committed first on another replica wrote the same rows",
				"The transaction held a row lock the other transaction's writeset needed; it would have failed certification at COMMIT (eager pre-certification, Tashkent §8.2).",
				"Roll back and retry the transaction.")
			s.p.metrics.outcomes.WithLabelValues("preempted").Inc()
		}
		return
	}
	// Running a statement: cancel it. Between statements the cancel is
	// ignored; the lock watch tries again. Not while the backend only
	// parses, binds or describes: a cancelled Parse aborts the transaction
	// too, but clients do not take an error on a Parse for a failed
	// transaction attempt (pgbench prepares a statement the first time it
	// reaches it, inside the block, and then fails its Bind with 26000
	// instead of retrying); the lock watch tries again, at the client's
	// next Execute. (The cancel is a signal: sent during an Execute, it
	// can still arrive after it, during the client's next message; that
	// window is one round trip of the control connection.)
	if !s.executing.Load() {
		return
	}
	s.conflictCancelAt.Store(int64(sinceProcessStart(time.Now())))
	s.p.rep.cancelBackend(s.w.BackendPID)
	s.p.metrics.outcomes.WithLabelValues("preempted").Inc()
}

// answerWithoutStatement answers a unit up to Sync that runs no statement
// (Parse, Describe, Bind, Close: a client preparing its next statement, as
// pgbench -M prepared does with PQprepare) of a session whose 40001 the
// client has not had yet: as PostgreSQL would in a block that has not
// failed. The 40001 waits for the next statement, which the client can
// retry; delivered here, it reads as a failed PREPARE, and the client's
// next statement then meets 25P02 and gives up.
func (s *session) answerWithoutStatement(u *unit) error {
	if err := s.forwardRaw(u.encoded(0, len(u.msgs), u.sync)); err != nil {
		return err
	}
	if _, err := s.relay(false); err != nil {
		return err
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: 'T'})
	return nil
}
