package proxy

import (
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/replica"
)

// The proxy's own prepared statements. Every backend session has them,
// prepared by setup, so that what the proxy runs at every transaction is
// neither parsed nor planned again: its BEGIN, the collect at COMMIT (C1:
// check deferred constraints, take the writeset, trim the buffer) and the
// ordered commit (C5: record the version, commit), each sent as one
// pipeline of Bind/Execute with a single Sync.
//
// A client can drop them. DEALLOCATE ALL (and DEALLOCATE of one of these
// names) the proxy sees: it marks them unprepared, and the next pipeline
// that uses one prepares it again first (inside the transaction, where a
// Parse of a name that still exists would fail it: hence only the ones
// known to be gone); DISCARD ALL runs setup again. What the proxy cannot
// see (a protocol Close of one of these names, a DEALLOCATE inside a
// function) fails the pipeline that needs it: a collect's COMMIT is rolled
// back with 26000 and a hint, an ordered commit is applied from its
// writeset instead (soft recovery; the COMMIT succeeds), and then the
// statements are prepared again.
const (
	beginStatement       = "tashkent_begin"
	constraintsStatement = "tashkent_constraints"
	collectStatement     = "tashkent_collect"
	trimStatement        = "tashkent_trim"
	recordStatement      = "tashkent_record"
	commitStatement      = "tashkent_commit"
	// readOnlyCheckStatement is the check before the COMMIT of a
	// transaction that ran only reads (readonly.go).
	readOnlyCheckStatement = "tashkent_read_only"
)

// proxyStatement is one of the proxy's prepared statements.
type proxyStatement struct{ name, sql string }

// collectStatements are the collect's pipeline, in order; the rows of
// collectStatement (index collectIndex) are the writeset, the trim's row
// (index trimIndex) holds the DDL guard's notes (replica.CollectEndSQL,
// ddlnotes.go). A deferred constraint that fails stops the pipeline
// there, as it would fail the COMMIT in PostgreSQL: nothing is certified.
var collectStatements = []proxyStatement{
	{constraintsStatement, "SET CONSTRAINTS ALL IMMEDIATE"},
	{collectStatement, replica.CollectQuery},
	{trimStatement, replica.CollectEndSQL},
}

const (
	collectIndex = 1
	trimIndex    = 2
)

// commitStatements commit a certified transaction in its turn: the
// version is recorded (its parameter) in the transaction that commits it.
var commitStatements = []proxyStatement{{recordStatement, replica.RecordVersionSQL}, commit}

// commit is the proxy's prepared COMMIT.
var commit = proxyStatement{commitStatement, "COMMIT"}

// proxyStatements are all of them, as setup prepares them.
var proxyStatements = slices.Concat([]proxyStatement{{beginStatement, "BEGIN"}}, collectStatements, commitStatements,
	[]proxyStatement{readOnlyCheck})

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

// sendPipeline writes one pipeline of the proxy's statements, with the
// text parameters args[i] for statements[i] (none if args is short),
// preparing first whichever of them the client dropped.
func (s *session) sendPipeline(statements []proxyStatement, args ...[][]byte) error {
	for i, st := range statements {
		if s.unprepared[st.name] {
			s.w.Server.Send(&pgproto3.Parse{Name: st.name, Query: st.sql})
		}
		bind := &pgproto3.Bind{PreparedStatement: st.name}
		if i < len(args) {
			bind.Parameters = args[i]
		}
		s.w.Server.Send(bind)
		s.w.Server.Send(&pgproto3.Execute{})
	}
	s.w.Server.Send(&pgproto3.Sync{})
	if err := s.w.Server.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errBackendGone, err)
	}
	return nil
}

// resyncStatements, once the transaction of a failed pipeline is over,
// prepares the proxy's statements again if the failure was theirs (lost)
// or if the pipeline was to prepare some again: whether those Parses ran
// before the failure is unknown. Outside a transaction a Parse of a name
// that exists harms nothing.
func (s *session) resyncStatements(lost bool) error {
	if !lost && len(s.unprepared) == 0 {
		return nil
	}
	return s.prepareStatements()
}

// notePipeline records the outcome of a pipeline for the statements it
// used, and reports whether it failed for want of one of them (or because
// one was there already): what the proxy could not see, a protocol Close
// of one of them. The error then says so; the caller prepares them all
// again once the transaction is over.
func (s *session) notePipeline(statements []proxyStatement, res result) (lost bool) {
	if !res.failed() {
		for _, st := range statements {
			delete(s.unprepared, st.name)
		}
		return false
	}
	if res.err.Code != codeInvalidStatementName && res.err.Code != "42P05" {
		return false
	}
	res.err.Message = "the tashkent proxy's prepared statements were closed in this session: " + res.err.Message
	res.err.Hint = "Do not close or deallocate prepared statements named tashkent_*."
	return true
}
