package proxy

import (
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// unreplicatedRefusal is the error for a statement that uses a feature
// whose effect would stay on this replica (sqlclass.Feature), nil for
// others. On a cluster these would silently mean something else than on
// one PostgreSQL: a NOTIFY that only this replica's listeners hear, a
// large object the other replicas never get, an advisory lock that does
// not exclude sessions of other replicas. So they are refused, with
// SQLSTATE 0A000 and what to do instead (docs/COMPATIBILITY.md). The
// answer is the same in the simple and the extended protocol; an open
// transaction block fails, as after an error from PostgreSQL.
func unreplicatedRefusal(st sqlclass.Statement) *pgproto3.ErrorResponse {
	switch st.Unreplicated {
	case sqlclass.Notifications:
		return errorResponse(codeFeatureNotSupported,
			"LISTEN, NOTIFY and pg_notify() are not supported by tashkent: notifications would reach only sessions on the same replica",
			"tashkent replicates table rows, not notifications.",
			"Poll a table for changes instead (rows are replicated), or send notifications through a PostgreSQL outside the cluster.")
	case sqlclass.LargeObjects:
		return errorResponse(codeFeatureNotSupported,
			"large objects are not supported by tashkent: pg_largeobject is not replicated",
			"tashkent replicates rows of tables with a primary key; large objects live outside them.",
			"Store the data in a bytea column of a table with a primary key.")
	case sqlclass.AdvisoryLocks:
		return errorResponse(codeFeatureNotSupported,
			"advisory locks are not supported by tashkent: they would exclude only sessions on the same replica",
			"An advisory lock is held in one replica's memory; the other replicas do not see it.",
			"Update a row of a lock table instead: tashkent certifies concurrent writes of one row across replicas, and one of two such transactions fails with 40001.")
	case sqlclass.DDLInPreparedStatement:
		// A write to the table it creates would stop the other replicas'
		// appliers.
		return errorResponse(codeFeatureNotSupported,
			"SELECT INTO in a prepared statement is not supported by tashkent: the table it creates would exist on this replica only",
			"tashkent replicates DDL as the statements the client sends; EXECUTE of a prepared statement does not say what it creates.",
			"Use CREATE TABLE name AS SELECT ..., which is replicated.")
	case sqlclass.PreparedQueryDDL:
		return errorResponse(codeFeatureNotSupported,
			"CREATE TABLE AS EXECUTE is not supported by tashkent: the other replicas do not have the prepared statement it runs",
			"tashkent replicates DDL as its text; a prepared statement exists only in the session that prepared it.",
			"Write the query out: CREATE TABLE name AS SELECT ...")
	case sqlclass.HoldableCursorCode:
		return errorResponse(codeFeatureNotSupported,
			"DECLARE ... WITH HOLD over a query that calls a function of yours is not supported by tashkent: what the function writes would stay on this replica",
			"PostgreSQL runs a holdable cursor's query to its end inside COMMIT, after tashkent has collected the transaction's writes for the other replicas.",
			"Declare the cursor without WITH HOLD inside a transaction block, or call the function in a SELECT of its own.")
	case sqlclass.SequenceSet:
		return errorResponse(codeFeatureNotSupported,
			"setval() is not supported by tashkent: it would move the sequence on this replica only",
			"Each replica's sequences hand out their own values (a per-replica offset); setval would break that on one replica.",
			"Use ALTER SEQUENCE name RESTART WITH n: it is replicated, and every replica moves the sequence to its own next value at or past n and past the values already in the sequence's column.")
	}
	return nil
}

// refuseUnreplicated answers a unit whose statements use such a feature
// with the refusal and reports whether it did.
func (s *session) refuseUnreplicated(stmts ...sqlclass.Statement) (bool, error) {
	for _, st := range stmts {
		if e := unreplicatedRefusal(st); e != nil {
			s.w.Client.Send(e)
			if s.status == 'T' {
				if err := s.failBlock(); err != nil {
					return true, err
				}
			}
			s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
			return true, nil
		}
	}
	return false, nil
}

// executed is what an extended-protocol message runs: the statement of an
// Execute, nothing for the others.
func executed(m unitMsg, stmts []sqlclass.Statement) []sqlclass.Statement {
	if m.typ != 'E' {
		return nil
	}
	return stmts
}
