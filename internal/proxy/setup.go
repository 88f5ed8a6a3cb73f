package proxy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// setup prepares the backend session for the proxy: the writeset buffer
// (replica.PrepareSession) and the proxy's prepared statements
// (statements.go; the BEGIN the proxy injects is one: unlike a simple
// Query, Bind/Execute of a named statement leaves the client's unnamed
// statement alone). It runs when the session starts and again after
// DISCARD, which drops both.
func (s *session) setup() error {
	committed := s.p.rep.seq.Committed() // before the database's record is read
	rows, res, err := s.queryRows("SELECT tashkent.prepare_session(), " + postmasterStartSQL + ", tashkent.recorded_version()")
	if err != nil {
		return err
	}
	if res.failed() {
		return fmt.Errorf("prepare the session for writeset capture: %s (is tashkent installed in database %q?)", res.err.Message, s.p.cfg.Database)
	}
	if len(rows) == 1 && string(rows[0][1]) != s.p.rep.postmasterStart() {
		// The database restarted and the proxy has not recovered it yet: it
		// may have lost commits, so nothing may run on it before that.
		s.p.rep.requestRecovery("a new session found the database restarted")
		return errRecovering
	}
	if len(rows) == 1 {
		// A backend crash reinitializes the database under the same
		// postmaster, and may lose commits all the same: a transaction
		// labelled with versions the database no longer holds would be
		// certified against writes it never saw.
		recorded, err := strconv.ParseUint(string(rows[0][2]), 10, 64)
		if err != nil || recorded < committed {
			s.p.rep.requestRecovery(fmt.Sprintf("a new session found the database at version %s, below the %d committed here (a crash lost commits)", rows[0][2], committed))
			return errRecovering
		}
	}
	return s.prepareStatements()
}

// begin opens a transaction block with the prepared BEGIN. If the client
// dropped it (DEALLOCATE ALL, DISCARD), it is prepared again.
func (s *session) begin() (result, error) {
	s.resetTransaction()
	for attempt := 0; ; attempt++ {
		s.w.Server.Send(&pgproto3.Bind{PreparedStatement: beginStatement})
		s.w.Server.Send(&pgproto3.Execute{})
		s.w.Server.Send(&pgproto3.Sync{})
		if err := s.w.Server.Flush(); err != nil {
			return result{}, errBackendGone
		}
		res, err := s.relay(true)
		if err != nil || !res.failed() || res.err.Code != codeInvalidStatementName || attempt > 0 {
			return res, err
		}
		if err := s.setup(); err != nil {
			return res, err
		}
	}
}

// failBlock puts the open transaction block into the failed state, after
// the proxy refused a statement in it, as an error from PostgreSQL would.
func (s *session) failBlock() error {
	_, err := s.exec(`DO $$BEGIN RAISE EXCEPTION 'refused by tashkent'; END$$`)
	return err
}

// noteStatement records what a statement that completed without error
// means for the proxy: DDL is replicated with the transaction's writeset;
// DISCARD dropped the proxy's session setup.
func (s *session) noteStatement(st sqlclass.Statement) error {
	if keepsSessionState(st) {
		s.sessionState = true
	}
	switch st.Kind {
	case sqlclass.DDL:
		if !st.TempOnly {
			s.ddl = append(s.ddl, st.SQL)
		}
	case sqlclass.Savepoint, sqlclass.Release, sqlclass.RollbackTo:
		s.noteSavepoint(st)
	case sqlclass.Deallocate:
		s.forgetStatements(st.Name)
		s.forgetProxyStatements(st.Name)
	case sqlclass.Discard:
		if st.Name == "all" {
			s.forgetStatements("")
			s.forgetProxyStatements("")
		}
		if s.status == 'I' {
			return s.setup()
		}
	case sqlclass.Set:
		if st.Name == "" { // RESET ALL: capture is a setting too
			_, err := s.exec(`SELECT set_config('tashkent.capture', 'on', false)`)
			return err
		}
	}
	return nil
}

// keepsSessionState reports a statement whose effect the transaction's
// writeset does not carry and that outlives the transaction in the
// session: a setting (not SET LOCAL, not the transaction's own
// characteristics) or a change to a temporary table. A transaction that
// gives way loses such effects (see applyInstead).
func keepsSessionState(st sqlclass.Statement) bool {
	switch st.Kind {
	case sqlclass.Set:
		return !st.TransactionLocal && st.Name != "transaction" && st.Name != "constraints"
	case sqlclass.DDL, sqlclass.Write, sqlclass.Truncate, sqlclass.CopyFrom:
		return st.TempOnly
	}
	return false
}

// reservedSetting reports a statement that would change one of the
// proxy's own settings, which would turn writeset capture off.
func reservedSetting(st sqlclass.Statement) bool {
	return st.Kind == sqlclass.Set && strings.HasPrefix(strings.ToLower(st.Name), "tashkent.")
}

// ddlChanges turns the transaction's DDL into writeset changes, which
// every replica applies in the global order (Postgres-R(SI) §5.1). A DDL
// change conflicts with every concurrent transaction.
func (s *session) ddlChanges() []*pb.Change {
	changes := make([]*pb.Change, len(s.ddl))
	for i, sql := range s.ddl {
		changes[i] = &pb.Change{Op: pb.Op_OP_DDL, Row: []byte(sql)}
	}
	return changes
}

// beginPrefix is the proxy's prepared BEGIN (see begin) as messages to
// send ahead of a segment of the client's, in the same write, without a
// Sync between: the block is open before the client's messages run, and it
// costs no round trip of its own.
var beginPrefix = func() []byte {
	b, _ := (&pgproto3.Bind{PreparedStatement: beginStatement}).Encode(nil)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	return b
}()

// afterPipelinedBegin reads the answers to beginPrefix, swallowed, and
// reports whether the block opened. If the BEGIN failed, PostgreSQL skipped
// what followed it up to a Sync (sent here unless synced: the messages sent
// after the BEGIN end with their own): the backend is idle again and the
// client has seen nothing; the block is opened the ordinary way (begin
// prepares the BEGIN again if the client dropped it) and then, the
// client's messages after the BEGIN, are sent again. false means that
// failed too, and the client got the error.
func (s *session) afterPipelinedBegin(then []byte, synced bool) (bool, error) {
	for {
		msg, err := s.w.Server.Receive()
		if err != nil {
			return false, fmt.Errorf("%w: %v", errBackendGone, err)
		}
		switch m := msg.(type) {
		case *pgproto3.CommandComplete:
			return true, nil
		case *pgproto3.ParameterStatus:
			s.w.ServerParams[m.Name] = m.Value
		case *pgproto3.ErrorResponse:
			if !synced {
				s.w.Server.Send(&pgproto3.Sync{})
				if err := s.w.Server.Flush(); err != nil {
					return false, errBackendGone
				}
			}
			if _, err := s.relay(true); err != nil { // up to the Sync
				return false, err
			}
			s.log.Debug("pipelined BEGIN failed; opening the block with its own round trip", "error", m.Message)
			res, err := s.begin()
			if err != nil {
				return false, err
			}
			if res.failed() {
				s.w.Client.Send(res.err)
				return false, nil
			}
			return true, s.forwardRaw(then)
		}
	}
}
