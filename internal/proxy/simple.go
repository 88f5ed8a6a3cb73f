package proxy

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// simpleQuery handles one Query message.
func (s *session) simpleQuery(ctx context.Context, sql string) error {
	stmts, err := s.classify(sql)
	if err != nil && !utf8.ValidString(sql) { // see textencoding.go
		return s.refuse(codeFeatureNotSupported, notUTF8Message, notUTF8Hint)
	}
	if err != nil { // PostgreSQL reports the syntax error itself
		s.noteUnit([]sqlclass.Kind{sqlclass.Other})
		return s.forwardQuery(sql)
	}
	kinds := kindsOf(stmts)
	s.noteUnit(kinds)
	if taken, err := s.takeDoom(kinds, nil); taken || err != nil {
		return err
	}
	if refused, err := s.refuseUnreplicated(stmts...); refused || err != nil {
		return err
	}
	for _, st := range stmts {
		if reservedSetting(st) {
			return s.refuse(codeInsufficientPrivilege, "settings named tashkent.* belong to the tashkent proxy", "")
		}
	}
	if len(stmts) == 1 {
		return s.oneStatement(ctx, stmts[0], true)
	}
	if !needsIntervention(stmts, s.status) {
		return s.forwardQuery(sql)
	}
	return s.multiStatement(ctx, stmts)
}

func kindsOf(stmts []sqlclass.Statement) []sqlclass.Kind {
	kinds := make([]sqlclass.Kind, len(stmts))
	for i, st := range stmts {
		kinds[i] = st.Kind
	}
	return kinds
}

// needsIntervention reports whether any statement changes the transaction
// in a way the proxy must handle: anything but reads may.
func needsIntervention(stmts []sqlclass.Statement, status byte) bool {
	for _, st := range stmts {
		if !isPlainRead(st.Kind) || rewriteIsolation(st) != "" {
			return true
		}
	}
	return false
}

// isPlainRead: statements that neither write nor change the transaction.
func isPlainRead(k sqlclass.Kind) bool {
	switch k {
	case sqlclass.Read, sqlclass.CopyTo, sqlclass.Set, sqlclass.Listen, sqlclass.Unlisten, sqlclass.Notify,
		sqlclass.Prepare, sqlclass.Deallocate, sqlclass.Discard, sqlclass.Vacuum, sqlclass.Analyze, sqlclass.Savepoint,
		sqlclass.Release, sqlclass.RollbackTo:
		return true
	}
	return false
}

// writes reports whether a statement may write replicated data, so that
// outside a transaction block it must be wrapped in one and certified.
// Unknown statements count as writes: certifying a read costs one round
// trip, missing a write loses consistency.
func writes(k sqlclass.Kind) bool {
	switch k {
	case sqlclass.Begin, sqlclass.Commit, sqlclass.Rollback, sqlclass.PrepareTransaction,
		sqlclass.CommitPrepared, sqlclass.RollbackPrepared:
		return false
	}
	return !isPlainRead(k)
}

func (s *session) forwardQuery(sql string) error {
	s.labelIfIdle()
	query, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	if err := s.forwardRaw(query); err != nil {
		return err
	}
	res, err := s.relay(false)
	if err != nil {
		return err
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: res.status})
	return nil
}

// oneStatement runs a single statement the way PostgreSQL's simple query
// protocol would, with the proxy's interventions. last says whether the
// client gets ReadyForQuery after it.
func (s *session) oneStatement(ctx context.Context, st sqlclass.Statement, last bool) error {
	switch {
	case st.Kind == sqlclass.PrepareTransaction || st.Kind == sqlclass.CommitPrepared || st.Kind == sqlclass.RollbackPrepared:
		return s.refuse(codeFeatureNotSupported, "tashkent does not support two-phase commit (PREPARE TRANSACTION)",
			"The cluster itself is the coordinator: commit the transaction normally.")
	case st.Kind == sqlclass.Commit && s.status == 'T':
		return s.commitStatement(ctx, st, last)
	case s.status == 'I' && isPlainBegin(st):
		s.deferBegin(st, last)
		return nil
	case s.status == 'I' && writes(st.Kind):
		return s.wrapped(ctx, func() (result, error) { return s.runStatement(st) }, last)
	}
	res, err := s.runStatement(st)
	if err != nil {
		return err
	}
	if last {
		s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: res.status})
	}
	return nil
}

// runStatement forwards one statement (rewritten if it asks for another
// isolation level) and relays its answer without ReadyForQuery.
func (s *session) runStatement(st sqlclass.Statement) (result, error) {
	st, refusal, _, err := s.localDDL(st)
	if err != nil {
		return result{}, err
	}
	sql := st.SQL
	if refusal != nil { // DDL tashkent can neither replicate nor keep local (tempddl.go)
		sql = refusalSQL(refusal)
	}
	if rewritten := rewriteIsolation(st); rewritten != "" {
		s.isolationNotice()
		sql = rewritten
	}
	s.labelIfIdle()
	query, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	if s.beginFirst {
		if ok, err := s.pipelineBegin(query); !ok || err != nil {
			return result{status: s.status, err: errBeginFailed}, err
		}
	} else if err := s.forwardRaw(query); err != nil {
		return result{}, err
	}
	res, err := s.relay(false)
	if err != nil || res.failed() {
		return res, err
	}
	return res, s.noteStatement(st)
}

// errBeginFailed marks a statement that did not run because the proxy
// could not open its transaction block; the client got the error.
var errBeginFailed = &pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX000", Message: "the proxy could not open a transaction block"}

// pipelineBegin sends query after the proxy's BEGIN, in one write (see
// beginPrefix). If the BEGIN fails, PostgreSQL ignores the query until
// Sync: the proxy sends one, and opens the block the ordinary way before
// it sends the query again. false means that failed too, and the client
// got the error.
func (s *session) pipelineBegin(query []byte) (bool, error) {
	s.beginFirst = false
	if err := s.forwardRaw(append(append([]byte{}, beginPrefix...), query...)); err != nil {
		return false, err
	}
	return s.afterPipelinedBegin(query, false)
}

// wrapped runs a write that arrived outside a transaction block inside one
// the proxy opens, so that it is certified (the database would commit it by
// itself), then commits it or rolls it back.
func (s *session) wrapped(ctx context.Context, run func() (result, error), last bool) error {
	s.labelIfIdle()
	s.beginFirst = true // run's first statement opens the block (runStatement)
	res, err := run()
	s.beginFirst = false
	if err != nil {
		return err
	}
	if res.err == errBeginFailed {
		if last {
			s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
		}
		return nil
	}
	if res.failed() || res.status != 'T' {
		if err := s.rollback(); err != nil {
			return err
		}
	} else {
		errResp, err := s.commitTransaction(ctx)
		if err != nil {
			return err
		}
		if errResp != nil {
			s.w.Client.Send(errResp)
		}
	}
	if last {
		s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	}
	return nil
}

// commitStatement intercepts COMMIT (or END, or COMMIT AND CHAIN).
func (s *session) commitStatement(ctx context.Context, st sqlclass.Statement, last bool) error {
	errResp, err := s.commitTransaction(ctx)
	if err != nil {
		return err
	}
	if errResp != nil {
		s.w.Client.Send(errResp)
	} else {
		s.w.Client.Send(&pgproto3.CommandComplete{CommandTag: []byte("COMMIT")})
		if st.Chain && s.endAfterReply == nil { // a session about to end opens no block
			s.labelIfIdle()
			if _, err := s.begin(); err != nil {
				return err
			}
		}
	}
	if last {
		s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	}
	return nil
}

// multiStatement runs a Query of several statements one by one. Without an
// explicit transaction block it is one implicit transaction, as in
// PostgreSQL: the proxy makes it an explicit one and certifies it.
func (s *session) multiStatement(ctx context.Context, stmts []sqlclass.Statement) error {
	explicit := false
	for _, st := range stmts {
		switch st.Kind {
		case sqlclass.Begin, sqlclass.Commit, sqlclass.Rollback, sqlclass.PrepareTransaction:
			explicit = true
		}
	}
	if s.status == 'I' && !explicit {
		return s.wrapped(ctx, func() (result, error) {
			var res result
			for _, st := range stmts {
				var err error
				if res, err = s.runStatement(st); err != nil || res.failed() {
					return res, err
				}
			}
			return res, nil
		}, true)
	}
	for i, st := range stmts {
		if err := s.oneStatement(ctx, st, false); err != nil {
			return err
		}
		if s.status == 'E' || i == len(stmts)-1 {
			break
		}
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	return nil
}

// isolationNotice tells the client its isolation request was mapped.
func (s *session) isolationNotice() {
	s.notice("tashkent runs every transaction at snapshot isolation across replicas (generalized snapshot isolation); "+
		"the requested isolation level is mapped to REPEATABLE READ",
		"Write skew is possible, as under PostgreSQL's REPEATABLE READ. See docs/GUARANTEES.md.")
}

// rewriteIsolation returns the statement rewritten to REPEATABLE READ if it
// asks for another isolation level, or "" if it does not.
func rewriteIsolation(st sqlclass.Statement) string {
	if st.Isolation == "" || st.Isolation == "repeatable read" {
		return ""
	}
	readOnly := ""
	if st.ReadOnly {
		readOnly = " READ ONLY"
	}
	switch st.Kind {
	case sqlclass.Begin:
		verb := "BEGIN"
		if strings.EqualFold(st.Tag, "START TRANSACTION") {
			verb = "START TRANSACTION"
		}
		return verb + " ISOLATION LEVEL REPEATABLE READ" + readOnly
	case sqlclass.Set:
		switch strings.ToLower(st.Name) {
		case "transaction":
			return "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ" + readOnly
		case "session characteristics":
			return "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ" + readOnly
		case "default_transaction_isolation":
			return "SET default_transaction_isolation = 'repeatable read'"
		case "transaction_isolation":
			return "SET transaction_isolation = 'repeatable read'"
		}
	}
	return ""
}
