package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// A client's plain BEGIN is answered by the proxy and sent to PostgreSQL
// in the same write as whatever the session sends next (deferred BEGIN).
// It saves one round trip to the database per explicit transaction block:
// pgbench's TPC-B transaction is BEGIN, five statements and END, so the
// BEGIN's round trip was one of eight (issue 3, docs/BENCHMARKS.md).
//
// Why it keeps PostgreSQL's semantics: a REPEATABLE READ transaction takes
// its snapshot at its first statement, not at BEGIN, so the snapshot is the
// same; the start_version label is read when the client's BEGIN arrives,
// as before, and is therefore never newer than the snapshot (Tashkent §6.2,
// "conservative assigning of versions"). The client sees what PostgreSQL
// would answer: the BEGIN's CommandComplete and ReadyForQuery 'T'. Only a
// BEGIN without options is deferred (isPlainBegin): BEGIN READ ONLY,
// ISOLATION LEVEL, DEFERRABLE and SERIALIZABLE go to the database at once,
// as before. What differs: now() and transaction_timestamp() are the time
// the block opened in the database (at the next statement), and
// pg_stat_activity shows the session idle, not idle in transaction, until
// then.
//
// The deferred BEGIN is the proxy's prepared one (beginPrefix), sent ahead
// of the next client messages without a Sync between, so that if it fails
// PostgreSQL skips the client's messages (afterPipelinedBegin opens the
// block the ordinary way and sends them again). The proxy's own queries
// (exec, queryRows, the temporary-table check) open the block with a round
// trip of its own first (openDeferredBegin). A BEGIN followed directly by
// a simple-protocol COMMIT or END is answered by the proxy alone; a
// ROLLBACK goes to the database with the BEGIN, in one write; an
// extended-protocol COMMIT opens the block first (one round trip more).

// errDeferredBegin ends a session whose deferred BEGIN could not be opened
// in the database even with a round trip of its own: the client was told
// its block is open, so its statements must not run outside one.
var errDeferredBegin = errors.New("the transaction block the client opened could not be opened in the replica's database")

// isPlainBegin reports a BEGIN or START TRANSACTION without options (no
// isolation level, READ ONLY/WRITE or DEFERRABLE), whose text is one of the
// plain forms; anything else, a comment included, is sent as it is.
func isPlainBegin(st sqlclass.Statement) bool {
	if st.Kind != sqlclass.Begin || st.Isolation != "" || st.ReadOnly || st.Chain {
		return false
	}
	switch strings.Join(strings.Fields(strings.ToLower(st.SQL)), " ") {
	case "begin", "begin transaction", "begin work", "start transaction":
		return true
	}
	return false
}

// deferBegin answers a plain BEGIN arriving while the session is idle and
// leaves the block to be opened with the next thing sent to the database.
// It sends the BEGIN's CommandComplete and, if last, ReadyForQuery 'T'.
func (s *session) deferBegin(st sqlclass.Statement, last bool) {
	s.labelIfIdle()
	s.deferredBegin = true
	s.status = 'T'
	s.w.Client.Send(&pgproto3.CommandComplete{CommandTag: []byte(st.Tag)})
	if last {
		s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	}
}

// deferBeginUnit answers an extended-protocol unit that only runs a plain
// BEGIN through the unnamed portal (Bind, optionally Describe of the
// portal, Execute, Sync: how libpq runs a prepared statement, pgbench -M
// prepared among others) and reports whether it did. Units with a Parse
// are forwarded: the statement the client parses must exist in the
// database.
func (s *session) deferBeginUnit(u *unit, stmts [][]sqlclass.Statement) bool {
	if u.partial() || s.status != 'I' {
		return false
	}
	if st, ok := s.onlyPortalStatement(u, stmts); !ok || !isPlainBegin(st) {
		return false
	}
	s.labelIfIdle()
	s.deferredBegin = true
	s.status = 'T'
	s.answerBindAndDescribe(u)
	s.w.Client.Send(&pgproto3.CommandComplete{CommandTag: []byte(stmts[len(u.msgs)-1][0].Tag)})
	s.ex = exchange{}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	return true
}

// onlyPortalStatement returns the statement of a unit of exactly Bind (no
// arguments), an optional Describe of the portal, and Execute, all of the
// unnamed portal, binding a named prepared statement of one statement that
// declared no parameter types: a unit the proxy can answer itself when the
// statement is a plain BEGIN (deferBeginUnit) or a COMMIT (commitUnit),
// neither of which returns rows or takes parameters. Otherwise PostgreSQL
// may refuse the Bind, and so must the proxy: a statement that declared a
// parameter type needs an argument (08P01; review h39 found the proxy
// committing such a COMMIT), and the unnamed statement is dropped by every
// simple Query, the proxy's own included, which the tracking does not
// follow (26000; review h40).
func (s *session) onlyPortalStatement(u *unit, stmts [][]sqlclass.Statement) (sqlclass.Statement, bool) {
	n := len(u.msgs)
	if n < 2 || n > 3 {
		return sqlclass.Statement{}, false
	}
	first, last := u.msgs[0], u.msgs[n-1]
	if first.typ != 'B' || first.name != "" || first.stmt == "" || first.bindArgs != 0 || last.typ != 'E' || last.name != "" {
		return sqlclass.Statement{}, false
	}
	if s.statements[first.stmt].declaredParams != 0 {
		return sqlclass.Statement{}, false
	}
	if n == 3 && (u.msgs[1].typ != 'D' || u.msgs[1].object != 'P' || u.msgs[1].name != "") {
		return sqlclass.Statement{}, false
	}
	if len(stmts[n-1]) != 1 {
		return sqlclass.Statement{}, false
	}
	return stmts[n-1][0], true
}

// answerBindAndDescribe answers the Bind and the Describe of a unit
// onlyPortalStatement accepted, as PostgreSQL does for a statement that
// returns no rows.
func (s *session) answerBindAndDescribe(u *unit) {
	for _, m := range u.msgs {
		switch m.typ {
		case 'B':
			s.w.Client.Send(&pgproto3.BindComplete{})
		case 'D':
			s.w.Client.Send(&pgproto3.NoData{})
		}
	}
}

// forwardDeferred writes the client's messages to the backend, after the
// deferred BEGIN if there is one, in the same write, and reads the BEGIN's
// answers. raw ends with a Sync exactly when the client's messages end with
// their own (a Query or a Flush does not end with the Sync's five bytes).
func (s *session) forwardDeferred(raw []byte) error {
	s.deferredBegin = false
	if err := s.forwardRaw(append(append([]byte{}, beginPrefix...), raw...)); err != nil {
		return err
	}
	ok, err := s.afterPipelinedBegin(raw, bytes.HasSuffix(raw, syncMessage))
	if err == nil && !ok {
		err = errDeferredBegin
	}
	return err
}

// openDeferredBegin opens the deferred block with a round trip of its own,
// before a query of the proxy's.
func (s *session) openDeferredBegin() error {
	if !s.deferredBegin {
		return nil
	}
	s.deferredBegin = false
	res, err := s.begin()
	if err != nil {
		return err
	}
	if res.failed() {
		s.w.Client.Send(res.err)
		return fmt.Errorf("%w: %s", errDeferredBegin, res.err.Message)
	}
	return nil
}

// endDeferredBegin ends a block that never reached the database (COMMIT
// or ROLLBACK right after a deferred BEGIN) and reports whether there was
// one.
func (s *session) endDeferredBegin() bool {
	if !s.deferredBegin {
		return false
	}
	s.deferredBegin = false
	s.status = 'I'
	return true
}
