package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/replica"
	"github.com/tashkent-db/tashkent/internal/sequencer"
)

// commitTransaction is Tashkent §6.2 C1–C5 for the transaction open on the
// backend. It leaves the backend idle. It returns the error the client gets
// for its COMMIT (nil: committed) and, separately, a broken connection.
func (s *session) commitTransaction(ctx context.Context) (*pgproto3.ErrorResponse, error) {
	if s.endDeferredBegin() { // nothing ran: nothing to commit
		return nil, nil
	}
	if s.readsOnly() { // C2 without the collect (readonly.go)
		return s.commitReadOnly()
	}
	clock := s.p.metrics.phaseClock()
	changes, notes, res, err := s.collectWriteset()
	clock.lap(phaseCollect)
	if err != nil {
		return nil, err
	}
	if res.failed() {
		return explainCollectError(res.err), s.rollbackAfterCollect(res)
	}
	if refusal := s.unreplicatedDDL(notes); refusal != nil {
		return refusal, s.rollback()
	}
	if refusal := s.unguardedDDL(); refusal != nil {
		return refusal, s.rollback()
	}
	changes = append(s.ddlChanges(), changes...)
	if len(changes) == 0 { // read-only: commits locally (C2)
		res, err := s.exec("COMMIT")
		return res.err, err
	}
	return s.certifyAndCommit(ctx, changes, clock)
}

// collectWriteset reads the writeset the capture triggers buffered (C1),
// and the DDL guard's notes (ddlnotes.go). Deferred constraints are
// checked first, in the same round trip: a transaction that violates one
// must fail here, as in PostgreSQL, not be certified (other replicas apply
// writesets without checking them).
func (s *session) collectWriteset() ([]*pb.Change, []byte, result, error) {
	token := *s.p.rep.recordToken.Load() // the sealed buffer's collect and trim check it
	if err := s.sendPipeline(collectStatements, nil, [][]byte{token}, [][]byte{token}); err != nil {
		return nil, nil, result{}, err
	}
	byStatement, res, err := s.readStatementRows()
	if err != nil || res.failed() {
		return nil, nil, res, err
	}
	s.notePipeline(collectStatements, res)
	rows := rowsOf(byStatement, collectIndex)
	events := make([]replica.Event, 0, len(rows))
	for _, row := range rows {
		if len(row) != 4 || len(row[1]) != 1 {
			return nil, nil, res, fmt.Errorf("proxy: unexpected writeset row %q", row)
		}
		events = append(events, replica.Event{Table: string(row[0]), Op: row[1][0], Key: row[2], Row: row[3]})
	}
	trim := rowsOf(byStatement, trimIndex)
	if len(trim) != 1 || len(trim[0]) != 2 {
		return nil, nil, res, fmt.Errorf("proxy: unexpected result of the collect's last statement %q", trim)
	}
	changes, err := replica.Collapse(events)
	return changes, trim[0][1], res, err
}

// explainCollectError says why a collect found no writeset buffer: the
// transaction ran DISCARD TEMP, which drops the session's temporary
// tables, the buffer with them. PostgreSQL's own error (relation
// pg_temp.tashkent_writeset does not exist) names an object the client
// never made. The rollback undoes the DISCARD, so the session keeps its
// buffer; outside a transaction block the proxy sets it up again after a
// DISCARD (noteStatement).
func explainCollectError(e *pgproto3.ErrorResponse) *pgproto3.ErrorResponse {
	if e.Code != codeUndefinedTable || !strings.Contains(e.Message, replica.WritesetBuffer) {
		return e
	}
	return errorResponse(codeFeatureNotSupported,
		"DISCARD TEMP inside a transaction block is not supported by tashkent: it dropped the buffer that holds the transaction's writeset, so the transaction was rolled back",
		"PostgreSQL: "+e.Message,
		"Run DISCARD TEMP (or DISCARD ALL) outside a transaction block, where tashkent sets its buffer up again; or drop your temporary tables by name.")
}

// rollbackAfterCollect rolls back a transaction whose collect failed, and
// resyncs the proxy's statements.
func (s *session) rollbackAfterCollect(res result) error {
	lost := s.notePipeline(collectStatements, res)
	if lost {
		res.err.Hint = "The transaction was rolled back; retry it. " + res.err.Hint
	}
	if err := s.rollback(); err != nil {
		return err
	}
	return s.resyncStatements(lost)
}

// certifyAndCommit asks the certifier (C2, C3) and commits in version order
// (C5) or rolls back (40001).
func (s *session) certifyAndCommit(ctx context.Context, changes []*pb.Change, clock *phaseClock) (*pgproto3.ErrorResponse, error) {
	rep := s.p.rep
	seq := s.p.nextTxnSeq()
	local := rep.seq.Register(seq)
	epoch := rep.seq.Epoch()
	s.committing.Store(true)
	defer func() { s.committing.Store(false); s.certified.Store(false); s.waitingTurn.Store(nil) }()

	cctx, cancel := context.WithTimeout(ctx, certifyTimeout)
	reply, err := rep.cert.Certify(cctx, &pb.CertifyRequest{
		Txn:          &pb.TxnID{Origin: s.p.origin, Seq: seq},
		StartVersion: s.start,
		Writeset:     &pb.Writeset{Changes: changes},
	})
	cancel()
	clock.lap(phaseCertify)
	if err != nil {
		rep.seq.Abandon(local)
		s.p.metrics.outcomes.WithLabelValues("unknown").Inc()
		return errorResponse(codeResolutionUnknown,
				"could not learn whether the transaction committed: the certifier did not answer in time",
				err.Error(), "If it committed, every replica applies it; check before retrying."),
			s.rollback()
	}
	if reply.Decision != pb.Decision_DECISION_COMMIT {
		rep.seq.Abandon(local)
		s.p.metrics.outcomes.WithLabelValues("abort").Inc()
		rollbackErr := s.rollback()
		s.awaitConflictingVersion(ctx, reply.ConflictVersion)
		return certificationAbort(reply), rollbackErr
	}
	v := reply.CommitVersion
	s.waitingTurn.Store(local)
	s.certified.Store(true)
	if local.Version() != v {
		// The certifier delivers a version before its reply, so a mismatch
		// means the replica was recovered meanwhile (the sequencer drops
		// what the stream opened before the reset delivers) or a bug.
		// Either way the version is applied as a remote one, in its place.
		if rep.seq.Epoch() != epoch {
			s.log.Info("the replica was recovered while this transaction was certified; its version is applied with the others",
				"version", v)
		} else {
			s.log.Error("certified version was not delivered to this transaction", "version", v, "delivered", local.Version())
		}
		return nil, s.applyInstead(ctx, local, v)
	}
	if err := rep.seq.WaitTurn(ctx, local); errors.Is(err, sequencer.ErrDisplaced) {
		s.log.Info("the transaction gave way to an earlier version; its writeset is applied in its place", "version", v)
		return nil, s.applyInstead(ctx, local, v)
	} else if errors.Is(err, sequencer.ErrHalted) {
		rep.seq.Abandon(local)
		return nil, s.committedButHalted(v, err, s.rollback())
	} else if err != nil {
		rep.seq.Abandon(local)
		return nil, fmt.Errorf("waiting to commit version %d: %w", v, err)
	}
	clock.lap(phaseOrder)
	res, err := s.commitInTurn(v)
	if err != nil {
		return nil, s.lostDatabaseAfterCommit(ctx, local, err)
	}
	if lost := s.notePipeline(commitStatements, res); res.failed() || res.status != 'I' {
		if err := s.softRecover(ctx, local, res); err != nil {
			return nil, err
		}
		return nil, s.resyncStatements(lost)
	}
	rep.seq.Commit(v)
	clock.lap(phaseLocal)
	s.p.metrics.outcomes.WithLabelValues("commit").Inc()
	return nil, nil
}

// awaitConflictingVersion holds a certification abort back, after the
// rollback, until the replica has applied the version the transaction
// conflicted with (at most conflictCatchUpMax). The client retries on
// 40001 at once, and usually writes the same rows again: from a snapshot
// without that version the retry is certain to conflict again, a whole
// attempt (its statements, certification and the flush) spent for
// nothing. The certifier sends an abort as soon as it decides it, often
// before the conflicting version is durable (certifier.takeSendable), so
// the wait is for that flush and the apply here; the rollback before it
// has released the doomed transaction's row locks already.
func (s *session) awaitConflictingVersion(ctx context.Context, v uint64) {
	seq := s.p.rep.seq
	if v == 0 || seq.Committed() >= v {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, conflictCatchUpMax)
	defer cancel()
	if err := seq.WaitCommitted(wctx, v); err != nil {
		s.log.Debug("answering the abort before its conflicting version was applied here", "version", v, "err", err)
	}
}

// commitInTurn records version v in the open transaction and commits it
// (C5), in one round trip. The session records it with the record token,
// whatever the client's role (replica.RecordVersionSQL).
func (s *session) commitInTurn(v uint64) (result, error) {
	record := [][]byte{[]byte(strconv.FormatUint(v, 10)), *s.p.rep.recordToken.Load()}
	if err := s.sendPipeline(commitStatements, record); err != nil {
		return result{}, err
	}
	if hook := s.p.commitSent.Load(); hook != nil {
		(*hook)(s.w.ServerConn)
	}
	return s.relay(true)
}

// lostAnswerWaitMax bounds lostDatabaseAfterCommit's wait for the applier.
const lostAnswerWaitMax = 10 * time.Second

// lostDatabaseAfterCommit answers the COMMIT of a certified transaction
// whose connection to the database broke once its local commit was sent:
// the session cannot tell whether the database committed it, but the
// cluster did (the certifier's log holds its version). The version goes to
// the applier, which applies it or finds it recorded (skipRecorded), and
// the client's COMMIT succeeds once it is committed here (or after
// lostAnswerWaitMax): without an answer, the client could only guess, and
// a retry would commit the transaction twice. The session ends after the
// answer, its database connection gone. If the replica is recovering
// meanwhile, the answer does not wait for the replay (GUARANTEES.md, "Read
// your writes").
func (s *session) lostDatabaseAfterCommit(ctx context.Context, local *sequencer.Local, broken error) error {
	v := local.Version()
	// Closed first: a backend that did not commit (the COMMIT never arrived
	// whole) must not keep the transaction's row locks, which the applier
	// needs to apply v while this session waits for it.
	_ = s.w.ServerConn.Close()
	s.p.rep.seq.Abandon(local)
	s.status = 'I'
	s.log.Warn("the database connection broke after a certified transaction's commit was sent; the applier commits its version here if the database did not",
		"version", v, "err", broken)
	// The answer does not depend on the wait, which only keeps read-your-
	// writes on this replica: bounded, since a backend on a half-open TCP
	// connection keeps its locks, and the applier waits, until keepalive
	// notices (hours by default).
	wctx, cancel := context.WithTimeout(ctx, lostAnswerWaitMax)
	defer cancel()
	if err := s.p.rep.seq.WaitCommitted(wctx, v); errors.Is(err, sequencer.ErrHalted) {
		return s.committedButHalted(v, err, nil)
	} else if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("answering the COMMIT before its version is committed here: the applier has not committed it yet", "version", v, "waited", lostAnswerWaitMax)
	}
	s.p.metrics.outcomes.WithLabelValues("commit").Inc()
	s.endAfterReply = &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: codeAdminShutdown,
		Message: "terminating connection: the proxy lost its connection to the replica's database after this session's transaction committed",
		Detail:  broken.Error(),
		Hint:    "The transaction is committed: do not retry it. Reconnect."}
	return nil
}

// applyInstead rolls back the database transaction of certified version v
// and waits until the replica applies v from its writeset, in its place in
// the order, like a remote version: the client's COMMIT succeeds, as the
// version is committed in the cluster.
func (s *session) applyInstead(ctx context.Context, local *sequencer.Local, v uint64) error {
	s.p.rep.seq.Abandon(local)
	lost := s.sessionState || s.wroteTemporaryTables()
	if err := s.rollback(); err != nil {
		return err
	}
	if lost {
		s.endSessionAfterCommit()
	}
	if err := s.p.rep.seq.WaitCommitted(ctx, v); errors.Is(err, sequencer.ErrHalted) {
		return s.committedButHalted(v, err, nil)
	} else if err != nil {
		return err
	}
	s.p.metrics.outcomes.WithLabelValues("commit").Inc()
	return nil
}

// committedButHalted answers the COMMIT of certified version v on a
// replica whose applier stopped for good (halted wraps
// sequencer.ErrHalted) before v could commit here: v is committed in the
// cluster, durably in the certifier's log, so the COMMIT succeeds (a
// retry would commit it twice), with a WARNING that this replica cannot
// show it; then the session ends (57P03, as for new connections), since
// nothing will commit here until the replica is rebuilt. rollbackErr is
// the rollback of the local transaction, if the caller made one: the
// client is warned even if it failed.
func (s *session) committedButHalted(v uint64, halted, rollbackErr error) error {
	s.log.Error("a certified transaction cannot commit here: the replica stopped applying", "version", v, "err", halted)
	s.w.Client.Send(&pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: "01000",
		Message: fmt.Sprintf("the transaction is committed in the cluster (version %d), but this replica stopped applying the cluster's commits and will not show it", v),
		Detail:  halted.Error(),
		Hint:    "Do not retry the transaction: other replicas apply it. This replica must be rebuilt; see OPERATIONS.md."})
	s.p.metrics.outcomes.WithLabelValues("commit").Inc()
	if rollbackErr != nil {
		return rollbackErr // the client was warned first; the session ends on the lost connection
	}
	s.endAfterReply = replicaHalted(halted)
	return nil
}

// wroteTemporaryTables reports whether the open transaction changed rows
// of temporary tables (other than the proxy's writeset buffer), from the
// database's statistics of the current transaction. An error reads as yes.
func (s *session) wroteTemporaryTables() bool {
	rows, res, err := s.queryRows(`SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_xact_all_tables
		WHERE schemaname LIKE 'pg\_temp\_%' AND relname <> 'tashkent_writeset'
		AND n_tup_ins + n_tup_upd + n_tup_del > 0)`)
	return err != nil || res.failed() || len(rows) != 1 || string(rows[0][0]) != "f"
}

// hasTemporaryTables reports whether the session has temporary tables
// (other than the proxy's writeset buffer): after a failed commit, whose
// transaction can no longer be asked what it wrote (wroteTemporaryTables),
// it is the conservative answer to whether rolling it back lost changes
// to them. An error reads as yes.
func (s *session) hasTemporaryTables() bool {
	rows, res, err := s.queryRows(`SELECT EXISTS (SELECT FROM pg_catalog.pg_class
		WHERE relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()
		AND relkind OPERATOR(pg_catalog.=) 'r' AND relname OPERATOR(pg_catalog.<>) 'tashkent_writeset')`)
	return err != nil || res.failed() || len(rows) != 1 || string(rows[0][0]) != "f"
}

// endSessionAfterCommit is for a committed transaction whose effects on
// the session (settings, temporary tables) were rolled back with its
// database transaction while its writeset was applied: the session is no
// longer what the client believes, so the client is told, its COMMIT
// succeeds (the transaction is committed), and then the session ends.
func (s *session) endSessionAfterCommit() {
	s.log.Warn("the committed transaction's settings and temporary-table changes were lost when it was applied from its writeset; ending the session after its COMMIT")
	s.w.Client.Send(&pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: "01000",
		Message: "the transaction is committed, but its settings and temporary-table changes were lost; this session ends after the COMMIT",
		Detail:  "The transaction had to be applied from its writeset instead of committing where it ran (an earlier transaction needed a lock it held, or the database refused the commit); a writeset carries only replicated rows."})
	s.endAfterReply = &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: codeAdminShutdown,
		Message: "terminating connection: its last transaction committed, but the settings and temporary tables it changed could not be kept",
		Hint:    "Reconnect; settings and temporary tables must be set up again. The transaction itself is committed: do not retry it."}
}

// softRecover handles a database that refused to commit what the cluster
// committed (Tashkent §8.1 "Soft Recovery"): the transaction is rolled back
// here and its writeset applied like a remote one, in its place in the
// order, so the replica still holds exactly the committed versions.
func (s *session) softRecover(ctx context.Context, local *sequencer.Local, res result) error {
	msg := ""
	if res.err != nil {
		msg = res.err.Code + " " + res.err.Message
	}
	s.log.Warn("the database refused to commit a certified transaction; applying its writeset instead",
		"version", local.Version(), "error", msg)
	if err := s.rollback(); err != nil {
		s.p.rep.seq.Abandon(local)
		return err
	}
	s.p.rep.seq.Abandon(local)
	if s.sessionState || s.hasTemporaryTables() {
		s.endSessionAfterCommit()
	}
	err := s.p.rep.seq.WaitCommitted(ctx, local.Version())
	if errors.Is(err, sequencer.ErrHalted) {
		return s.committedButHalted(local.Version(), err, nil)
	}
	s.p.metrics.outcomes.WithLabelValues("commit").Inc()
	return err
}

// certificationAbort is the error a client gets for a transaction that
// failed certification: 40001, which drivers and ORMs retry.
func certificationAbort(r *pb.CertifyReply) *pgproto3.ErrorResponse {
	switch r.AbortReason {
	case pb.AbortReason_ABORT_REASON_CONFLICT:
		return errorResponse(codeSerializationFailure,
			"could not serialize access due to concurrent update on another replica",
			r.Detail, "Retry the transaction.")
	case pb.AbortReason_ABORT_REASON_REFERENCE_CONFLICT:
		// A foreign key met a concurrent change on another replica: the
		// parent row this transaction references was changed or deleted,
		// or a row it changed or deleted was newly referenced. The detail
		// says which.
		return errorResponse(codeSerializationFailure,
			"could not serialize access: a row this transaction references was changed or deleted concurrently on another replica, or a row it changed was referenced there",
			r.Detail, "Retry the transaction.")
	case pb.AbortReason_ABORT_REASON_TOO_OLD:
		return errorResponse(codeSerializationFailure,
			"could not serialize access: the transaction's snapshot is too old to be certified",
			r.Detail, "Retry the transaction; keep write transactions short, or raise the certifier's --window-versions.")
	case pb.AbortReason_ABORT_REASON_OVERLOADED:
		// Nothing was certified: like any serialization failure, retrying
		// is right, and drivers do it for 40001.
		return errorResponse(codeSerializationFailure,
			"could not serialize access: the certifier is overloaded",
			r.Detail, "Retry the transaction.")
	case pb.AbortReason_ABORT_REASON_LIMIT:
		return errorResponse("54000", "the transaction's writeset exceeds a certifier limit", r.Detail,
			"Split the transaction into smaller ones.")
	default:
		return errorResponse("XX000", "the certifier rejected the transaction", r.Detail, rejectionHint(r.Detail))
	}
}

// rejectionHint explains the one rejection an operator causes: a certifier
// older than the proxy does not know an operation the proxy sends (the
// foreign-key references, OP_REFERENCE, added after it).
func rejectionHint(detail string) string {
	if strings.Contains(detail, "unknown operation") {
		return "The certifier is older than this proxy: upgrade every certifier before the proxies (docs/OPERATIONS.md, upgrading)."
	}
	return ""
}
