package proxy

import "github.com/tashkent-db/tashkent/internal/sqlclass"

// The DDL a transaction replicates is the DDL it still holds when it
// commits: ROLLBACK TO SAVEPOINT undoes the DDL run since the savepoint,
// and that DDL must not reach the other replicas (they would create a table
// the originating replica does not have). Savepoints are tracked with the
// length of the DDL list when each was set.

// savepoint is a SAVEPOINT of the open transaction.
type savepoint struct {
	name string
	ddl  int // len(session.ddl) when it was set
}

// resetTransaction forgets the DDL and savepoints of the transaction that
// ended.
func (s *session) resetTransaction() {
	s.ddl = s.ddl[:0]
	s.savepoints = s.savepoints[:0]
	s.sessionState = false
}

// noteSavepoint follows a SAVEPOINT, RELEASE or ROLLBACK TO that completed,
// as PostgreSQL does: names may repeat and refer to the latest; RELEASE
// removes the savepoint and every later one; ROLLBACK TO keeps the
// savepoint, removes the later ones and undoes their DDL.
func (s *session) noteSavepoint(st sqlclass.Statement) {
	switch st.Kind {
	case sqlclass.Savepoint:
		s.savepoints = append(s.savepoints, savepoint{name: st.Name, ddl: len(s.ddl)})
	case sqlclass.Release, sqlclass.RollbackTo:
		i := s.latestSavepoint(st.Name)
		if i < 0 {
			return // PostgreSQL reported the error; nothing changed
		}
		if st.Kind == sqlclass.Release {
			s.savepoints = s.savepoints[:i]
			return
		}
		s.ddl = s.ddl[:s.savepoints[i].ddl]
		s.savepoints = s.savepoints[:i+1]
	}
}

func (s *session) latestSavepoint(name string) int {
	for i := len(s.savepoints) - 1; i >= 0; i-- {
		if s.savepoints[i].name == name {
			return i
		}
	}
	return -1
}
