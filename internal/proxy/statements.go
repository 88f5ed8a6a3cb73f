package proxy

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/replica"
)

// The proxy's own prepared statements. Every backend session has them,
// prepared by setup, so that what the proxy runs at every transaction is
// neither parsed nor planned again: its BEGIN, and the collect at COMMIT
// (C1: check deferred constraints, take the writeset, trim the buffer),
// sent as one pipeline of Bind/Execute with a single Sync.
//
// A client can drop them: DEALLOCATE ALL (and DEALLOCATE of one of these
// names), which the proxy sees, marks them unprepared and the next collect
// prepares them again in its pipeline (inside the transaction, where a
// Parse of a name that still exists would fail it: hence only the ones
// known to be gone); DISCARD ALL runs setup again. What the proxy cannot
// see (a protocol Close of one of these names, a DEALLOCATE inside a
// function) fails the next COMMIT cleanly (26000, rolled back, with a
// hint) and the statements are prepared again after it.
const (
	beginStatement       = "tashkent_begin"
	constraintsStatement = "tashkent_constraints"
	collectStatement     = "tashkent_collect"
	trimStatement        = "tashkent_trim"
)

// proxyStatement is one of the proxy's prepared statements.
type proxyStatement struct{ name, sql string }

// collectStatements are the collect's pipeline, in order; the rows of
// collectStatement (index collectIndex) are the writeset. A deferred
// constraint that fails stops the pipeline there, as it would fail the
// COMMIT in PostgreSQL: nothing is certified.
var collectStatements = []proxyStatement{
	{constraintsStatement, "SET CONSTRAINTS ALL IMMEDIATE"},
	{collectStatement, replica.CollectQuery},
	{trimStatement, replica.TrimSQL},
}

const collectIndex = 1

// proxyStatements are all of them, as setup prepares them.
var proxyStatements = append([]proxyStatement{{beginStatement, "BEGIN"}}, collectStatements...)

// isProxyStatement reports one of the proxy's statement names.
func isProxyStatement(name string) bool {
	for _, st := range proxyStatements {
		if st.name == name {
			return true
		}
	}
	return false
}

// prepareStatements prepares the proxy's statements, each in its own
// exchange, so that one that exists already (42P05) does not stop the
// others. Only outside a transaction block, where such an error harms
// nothing.
func (s *session) prepareStatements() error {
	for _, st := range proxyStatements {
		s.w.Server.Send(&pgproto3.Parse{Name: st.name, Query: st.sql})
		s.w.Server.Send(&pgproto3.Sync{})
	}
	if err := s.w.Server.Flush(); err != nil {
		return errBackendGone
	}
	for _, st := range proxyStatements {
		res, err := s.relay(true)
		if err != nil {
			return err
		}
		if res.failed() && res.err.Code != "42P05" { // already prepared
			return fmt.Errorf("prepare the proxy's statement %s: %s", st.name, res.err.Message)
		}
	}
	clear(s.unprepared)
	return nil
}

// forgetProxyStatements records that DEALLOCATE dropped name ("" for ALL)
// if it is one of the proxy's statements.
func (s *session) forgetProxyStatements(name string) {
	for _, st := range proxyStatements {
		if name == "" || name == st.name {
			s.unprepared[st.name] = true
		}
	}
}

// sendCollect writes the collect's pipeline, preparing first whichever of
// its statements the client dropped.
func (s *session) sendCollect() error {
	for _, st := range collectStatements {
		if s.unprepared[st.name] {
			s.w.Server.Send(&pgproto3.Parse{Name: st.name, Query: st.sql})
		}
		s.w.Server.Send(&pgproto3.Bind{PreparedStatement: st.name})
		s.w.Server.Send(&pgproto3.Execute{})
	}
	s.w.Server.Send(&pgproto3.Sync{})
	if err := s.w.Server.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errBackendGone, err)
	}
	return nil
}

// noteCollectStatements records the outcome of a collect for the statements it
// used: prepared if it succeeded; if one was missing or there already
// (what the proxy could not see), the error the client gets says what
// happened, and they are all prepared again once the transaction is rolled
// back (afterCollectFailure).
func (s *session) noteCollectStatements(res result) (lost bool) {
	if !res.failed() {
		for _, st := range collectStatements {
			delete(s.unprepared, st.name)
		}
		return false
	}
	if res.err.Code != codeInvalidStatementName && res.err.Code != "42P05" {
		return false
	}
	res.err.Message = "the tashkent proxy's prepared statements were closed in this session: " + res.err.Message
	res.err.Hint = "The transaction was rolled back; retry it. Do not close or deallocate prepared statements named tashkent_*."
	return true
}
