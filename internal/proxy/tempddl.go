package proxy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// DDL on a session's temporary tables stays on its replica, like the
// tables: the other replicas have no such table (their appliers would fail
// on the statement for good), or have a permanent one of the same name
// that the statement must not touch. The text tells only for CREATE TEMP
// and names qualified with pg_temp; for a name without a schema, the
// proxy asks the database, just before the statement runs, what the name
// resolves to in the session (sqlclass.Statement.Relations).

// tempCheckStatement is the name of the proxy's statement that resolves
// names: a named statement, so that the client's unnamed one survives.
const tempCheckStatement = "tashkent_temp_check"

// localDDL marks st TempOnly when every relation it names without a
// schema is one of the session's temporary relations. A statement that
// mixes temporary and permanent relations is replicated as it is (the
// other replicas then fail on it): docs/COMPATIBILITY.md.
func (s *session) localDDL(st sqlclass.Statement) (sqlclass.Statement, error) {
	if st.Kind != sqlclass.DDL || st.TempOnly || len(st.Relations) == 0 || s.status == 'E' {
		return st, nil
	}
	temporary, err := s.countTemporary(st.Relations)
	if err != nil {
		return st, err
	}
	switch {
	case temporary == len(st.Relations):
		st.TempOnly = true
	case temporary > 0:
		s.log.Warn("a DDL statement acts on temporary and permanent relations at once; it is replicated as it is",
			"statement", st.SQL)
	}
	return st, nil
}

// countTemporary reports how many of the names resolve, in the session's
// search path, to temporary relations.
func (s *session) countTemporary(names []string) (int, error) {
	params := make([]string, len(names))
	values := make([][]byte, len(names))
	for i, n := range names {
		params[i] = "$" + strconv.Itoa(i+1)
		values[i] = []byte(n)
	}
	if err := s.openDeferredBegin(); err != nil {
		return 0, err
	}
	sql := `SELECT count(*) FROM pg_catalog.unnest(ARRAY[` + strings.Join(params, ",") + `]::text[]) AS n
		JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident(n))
		WHERE c.relpersistence = 't'`
	s.w.Server.Send(&pgproto3.Parse{Name: tempCheckStatement, Query: sql})
	s.w.Server.Send(&pgproto3.Bind{PreparedStatement: tempCheckStatement, Parameters: values})
	s.w.Server.Send(&pgproto3.Execute{})
	s.w.Server.Send(&pgproto3.Close{ObjectType: 'S', Name: tempCheckStatement})
	s.w.Server.Send(&pgproto3.Sync{})
	if err := s.w.Server.Flush(); err != nil {
		return 0, errBackendGone
	}
	rows, res, err := s.readRows()
	if err != nil {
		return 0, err
	}
	if res.failed() || len(rows) != 1 || len(rows[0]) != 1 {
		return 0, fmt.Errorf("proxy: resolve the relations of a DDL statement: %v", res.err)
	}
	return strconv.Atoi(string(rows[0][0]))
}

// markLocalDDL applies localDDL to every statement the unit executes. It
// runs before anything of the unit reaches the database, so a relation the
// same unit creates is not known yet: its DDL is replicated. Nor is a
// relation an earlier statement of the unit drops: with a temporary
// "owned" shadowing public.owned, DROP TABLE owned twice in one pipeline
// dropped public.owned on this replica only, judged temporary. So DDL found
// to act on temporary relations only is refused (localDDLRefusal) when an
// earlier statement of the unit runs before it.
func (s *session) markLocalDDL(u *unit, stmts [][]sqlclass.Statement) (*pgproto3.ErrorResponse, error) {
	earlier := false
	for i, m := range u.msgs {
		if m.typ != 'E' {
			continue
		}
		if len(stmts[i]) == 1 {
			st, err := s.localDDL(stmts[i][0])
			if err != nil {
				return nil, err
			}
			if st.TempOnly != stmts[i][0].TempOnly {
				if earlier {
					return localDDLRefusal(st), nil
				}
				stmts[i] = []sqlclass.Statement{st}
			}
		}
		earlier = true
	}
	return nil, nil
}

// localDDLRefusal is the error for DDL on a temporary relation named
// without a schema after other statements of the same pipeline, which may
// have changed what the name resolves to.
func localDDLRefusal(st sqlclass.Statement) *pgproto3.ErrorResponse {
	return errorResponse(codeFeatureNotSupported,
		"tashkent cannot tell whether this DDL acts on a temporary table: "+statementTag(st.SQL)+" follows other statements of the same pipeline",
		"Earlier statements of the pipeline may drop or create the temporary table the name resolves to now; DDL on a permanent table must reach every replica.",
		"Qualify the temporary table with pg_temp (pg_temp.name), or send the statement after a Sync.")
}

// statementTag is the first words of a statement, for a message.
func statementTag(sql string) string {
	words := strings.Fields(sql)
	if len(words) > 3 {
		words = words[:3]
	}
	return strings.Join(words, " ")
}
