package proxy

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// beginStatement is the name of the prepared BEGIN the proxy injects with
// the extended protocol: unlike a simple Query, Bind/Execute of a named
// statement leaves the client's unnamed statement alone.
const beginStatement = "tashkent_begin"

// setup prepares the backend session for the proxy: the writeset buffer
// (replica.PrepareSession) and the prepared BEGIN. It runs when the session
// starts and again after DISCARD, which drops both.
func (s *session) setup() error {
	res, err := s.exec("SELECT tashkent.prepare_session()")
	if err != nil {
		return err
	}
	if res.failed() {
		return fmt.Errorf("prepare the session for writeset capture: %s (is tashkent installed in database %q?)", res.err.Message, s.p.cfg.Database)
	}
	s.w.Server.Send(&pgproto3.Parse{Name: beginStatement, Query: "BEGIN"})
	s.w.Server.Send(&pgproto3.Sync{})
	if err := s.w.Server.Flush(); err != nil {
		return errBackendGone
	}
	if res, err = s.relay(true); err != nil || res.failed() {
		if err == nil && res.err.Code != "42P05" { // already prepared
			err = fmt.Errorf("prepare BEGIN: %s", res.err.Message)
		}
		return err
	}
	return nil
}

// begin opens a transaction block with the prepared BEGIN.
func (s *session) begin() (result, error) {
	s.ddl = s.ddl[:0]
	s.w.Server.Send(&pgproto3.Bind{PreparedStatement: beginStatement})
	s.w.Server.Send(&pgproto3.Execute{})
	s.w.Server.Send(&pgproto3.Sync{})
	if err := s.w.Server.Flush(); err != nil {
		return result{}, errBackendGone
	}
	return s.relay(true)
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
	switch st.Kind {
	case sqlclass.DDL:
		if !st.TempOnly {
			s.ddl = append(s.ddl, st.SQL)
		}
	case sqlclass.Discard:
		if s.status == 'I' {
			return s.setup()
		}
	}
	return nil
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
