package proxy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// DDL on a session's temporary objects stays on its replica, like the
// objects: the other replicas have none of them (their appliers would
// fail on the statement for good), or have a permanent one of the same
// name that the statement must not touch. DDL that would change temporary
// and permanent objects at once, or make a permanent object refer to a
// temporary one, is refused (0A000): it can be neither replicated nor
// kept local. The text tells for CREATE TEMP and names qualified with
// pg_temp; for the rest (sqlclass.TempScope.CatalogNames) the proxy asks
// the database, just before the statement runs, what the names resolve
// to in the session.

// tempCheckStatement is the name of the proxy's statement that resolves
// names: a named statement, so that the client's unnamed one survives.
const tempCheckStatement = "tashkent_temp_check"

// localDDL marks st TempOnly when it acts on the session's temporary
// objects only, and returns the refusal for DDL that mixes temporary and
// permanent objects (nil otherwise). needed reports whether the answer
// came from the catalog.
func (s *session) localDDL(st sqlclass.Statement) (_ sqlclass.Statement, refusal *pgproto3.ErrorResponse, needed bool, err error) {
	if st.Kind != sqlclass.DDL || st.TempOnly || st.Temp == nil || s.status == 'E' {
		return st, nil, false, nil
	}
	names := st.Temp.CatalogNames()
	temporary := map[sqlclass.ObjectName]bool{}
	if len(names) > 0 {
		if temporary, err = s.resolveTemporary(names); err != nil {
			return st, nil, true, err
		}
	}
	verdict := st.Temp.Verdict(func(o sqlclass.ObjectName) bool {
		if temp, known := o.TextTemp(); known {
			return temp
		}
		return temporary[o]
	})
	switch verdict {
	case sqlclass.StayLocal:
		st.TempOnly = true
	case sqlclass.RefuseMixed, sqlclass.RefuseTempReference:
		return st, tempDDLRefusal(verdict, st), len(names) > 0, nil
	}
	return st, nil, len(names) > 0, nil
}

// tempDDLRefusal is the error for DDL that tashkent can neither replicate
// nor keep on this replica.
func tempDDLRefusal(v sqlclass.Verdict, st sqlclass.Statement) *pgproto3.ErrorResponse {
	if v == sqlclass.RefuseMixed {
		return errorResponse(codeFeatureNotSupported,
			"tashkent cannot run this DDL: "+statementTag(st.SQL)+" acts on temporary and permanent objects at once",
			"Temporary objects exist on this replica only, so DDL on them is not replicated; DDL on permanent objects must reach every replica.",
			"Run it as two statements: one for the temporary objects (qualified with pg_temp), one for the permanent ones.")
	}
	return errorResponse(codeFeatureNotSupported,
		"tashkent cannot run this DDL: "+statementTag(st.SQL)+" makes a permanent object that names a temporary one",
		"tashkent replicates DDL as its text, and the other replicas do not have this session's temporary objects.",
		"Make the new object temporary too (CREATE TEMP ...), or create it from permanent objects: to copy rows of a temporary table, CREATE TABLE first, then INSERT ... SELECT (rows are replicated).")
}

// resolveTemporary asks the session's catalog which of the names are of
// temporary objects: a relation or type by the search path (which
// searches the temporary schema first), a relation named in a string as
// regclass input reads it, a statistics object by its table, a created
// object by the schema the session creates in.
func (s *session) resolveTemporary(names []sqlclass.ObjectName) (map[sqlclass.ObjectName]bool, error) {
	var classes, schemas, objects, created []string
	for _, o := range names {
		classes = append(classes, strconv.Itoa(int(o.Class)))
		schemas = append(schemas, o.Schema)
		objects = append(objects, o.Name)
		created = append(created, strconv.FormatBool(o.Created))
	}
	if err := s.openDeferredBegin(); err != nil {
		return nil, err
	}
	s.w.Server.Send(&pgproto3.Parse{Name: tempCheckStatement, Query: resolveTemporarySQL})
	s.w.Server.Send(&pgproto3.Bind{PreparedStatement: tempCheckStatement, Parameters: [][]byte{
		textArray(classes), textArray(schemas), textArray(objects), textArray(created)}})
	s.w.Server.Send(&pgproto3.Execute{})
	s.w.Server.Send(&pgproto3.Close{ObjectType: 'S', Name: tempCheckStatement})
	s.w.Server.Send(&pgproto3.Sync{})
	if err := s.w.Server.Flush(); err != nil {
		return nil, errBackendGone
	}
	rows, res, err := s.readRows()
	if err != nil {
		return nil, err
	}
	if res.failed() || len(rows) != len(names) {
		return nil, fmt.Errorf("proxy: resolve the objects of a DDL statement: %v", res.err)
	}
	temporary := make(map[sqlclass.ObjectName]bool, len(names))
	for i, row := range rows {
		temporary[names[i]] = len(row) == 1 && string(row[0]) == "t"
	}
	return temporary, nil
}

// textArray is a PostgreSQL array literal of the strings, each quoted.
func textArray(items []string) []byte {
	quoted := make([]string, len(items))
	for i, it := range items {
		quoted[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(it) + `"`
	}
	return []byte("{" + strings.Join(quoted, ",") + "}")
}

// resolveTemporarySQL answers, per name in order, whether it is of a
// temporary object ($1 class as sqlclass.NameClass, $2 schema or "", $3
// name, $4 created). The creation schema is current_schema() when it
// exists; a session whose temporary schema does not exist yet creates in
// it when its search_path starts with pg_temp.
const resolveTemporarySQL = `SELECT coalesce(CASE
	WHEN o.created THEN
		pg_catalog.to_regnamespace(pg_catalog.quote_ident(pg_catalog.current_schema())) OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()
		OR (pg_catalog.pg_my_temp_schema() OPERATOR(pg_catalog.=) 0 AND pg_catalog.btrim(pg_catalog.split_part(pg_catalog.current_setting('search_path'), ',', 1), ' "') OPERATOR(pg_catalog.=) 'pg_temp')
	WHEN o.class OPERATOR(pg_catalog.=) 1 THEN (SELECT c.relpersistence OPERATOR(pg_catalog.=) 't' FROM pg_catalog.pg_class AS c
		WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.quote_ident(o.name)))
	WHEN o.class OPERATOR(pg_catalog.=) 2 THEN (SELECT t.typnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema() FROM pg_catalog.pg_type AS t
		WHERE t.oid OPERATOR(pg_catalog.=) pg_catalog.to_regtype(pg_catalog.quote_ident(o.name)))
	WHEN o.class OPERATOR(pg_catalog.=) 4 THEN (SELECT c.relpersistence OPERATOR(pg_catalog.=) 't' FROM pg_catalog.pg_class AS c
		WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(o.name))
	WHEN o.class OPERATOR(pg_catalog.=) 3 THEN (SELECT c.relpersistence OPERATOR(pg_catalog.=) 't'
		FROM pg_catalog.pg_statistic_ext AS x
		JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) x.stxnamespace
		JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) x.stxrelid
		WHERE x.stxname OPERATOR(pg_catalog.=) o.name AND (n.nspname OPERATOR(pg_catalog.=) o.schema
			OR (o.schema OPERATOR(pg_catalog.=) '' AND n.oid OPERATOR(pg_catalog.<>) pg_catalog.pg_my_temp_schema()
				AND n.nspname OPERATOR(pg_catalog.=) ANY (pg_catalog.current_schemas(false))))
		ORDER BY pg_catalog.array_position(pg_catalog.current_schemas(false), n.nspname) LIMIT 1)
	END, false)
FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int4[]), pg_catalog.unnest($2::pg_catalog.text[]),
		pg_catalog.unnest($3::pg_catalog.text[]), pg_catalog.unnest($4::pg_catalog.bool[]))
	WITH ORDINALITY AS o(class, schema, name, created, i)
ORDER BY o.i`

// markLocalDDL applies localDDL to every statement the unit executes. It
// runs before anything of the unit reaches the database, so an object the
// same unit creates or drops is not known yet, and a name may resolve to
// another object once an earlier statement ran: with a temporary "owned"
// shadowing public.owned, DROP TABLE owned twice in one pipeline dropped
// public.owned on this replica only, judged temporary; CREATE TEMP TABLE t
// and CREATE INDEX ON t in one pipeline replicated the index (t did not
// exist yet). So DDL whose answer comes from the catalog is refused
// (localDDLRefusal) when it is judged temporary after an earlier
// statement of the unit, or follows DDL of the unit on temporary objects.
func (s *session) markLocalDDL(u *unit, stmts [][]sqlclass.Statement) (*pgproto3.ErrorResponse, error) {
	earlier, earlierTempDDL := false, false
	for i, m := range u.msgs {
		if m.typ != 'E' {
			continue
		}
		if len(stmts[i]) == 1 {
			st, refusal, needed, err := s.localDDL(stmts[i][0])
			switch {
			case err != nil:
				return nil, err
			case refusal != nil:
				return refusal, nil
			case needed && (earlierTempDDL || (earlier && st.TempOnly)):
				return localDDLRefusal(st), nil
			}
			stmts[i] = []sqlclass.Statement{st}
			earlierTempDDL = earlierTempDDL || (st.Kind == sqlclass.DDL && st.TempOnly)
		}
		earlier = true
	}
	return nil, nil
}

// localDDLRefusal is the error for DDL on an object named without a
// schema after other statements of the same pipeline, which may have
// changed what the name resolves to.
func localDDLRefusal(st sqlclass.Statement) *pgproto3.ErrorResponse {
	return errorResponse(codeFeatureNotSupported,
		"tashkent cannot tell whether this DDL acts on a temporary object: "+statementTag(st.SQL)+" follows other statements of the same pipeline",
		"Earlier statements of the pipeline may drop or create the temporary object the name resolves to now; DDL on a permanent object must reach every replica.",
		"Qualify the temporary object with pg_temp (pg_temp.name), or send the statement after a Sync.")
}

// refusalSQL is a statement that fails with the refusal, for a statement
// the simple query protocol has to refuse in the middle of its run: the
// database reports the error, and the transaction block fails as it would.
func refusalSQL(e *pgproto3.ErrorResponse) string {
	lit := func(s string) string { // no $: the client's words must not end the dollar quote
		return "'" + strings.NewReplacer("'", "''", "$", "").Replace(s) + "'"
	}
	return "DO $tashkent$BEGIN RAISE EXCEPTION USING ERRCODE = " + lit(e.Code) + ", MESSAGE = " + lit(e.Message) +
		", DETAIL = " + lit(e.Detail) + ", HINT = " + lit(e.Hint) + "; END$tashkent$"
}

// statementTag is the first words of a statement, for a message.
func statementTag(sql string) string {
	words := strings.Fields(sql)
	if len(words) > 3 {
		words = words[:3]
	}
	return strings.Join(words, " ")
}
