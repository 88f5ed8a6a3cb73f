package proxy

import (
	"context"
	"fmt"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// A read outside a transaction block runs in PostgreSQL's own implicit
// transaction, which commits without the proxy's collect: what it wrote
// would stay on this replica, never certified, and the replicas would
// diverge. A plain SELECT writes nothing, but one that calls a user's
// function may (SELECT create_account(...), a function that runs DDL), so
// the proxy runs such a read as it runs a write (Tashkent §6.2: every
// update transaction is certified): wrapped in a transaction block whose
// writeset it collects and certifies; with an empty writeset it commits
// locally (C2), at the cost of two round trips to the replica. PostgreSQL's
// built-in functions (pg_catalog, information_schema) write no table, so
// reads that call only those are not wrapped.
//
// A name is taken as built-in if pg_catalog has a function of that name;
// a user's function that shadows a built-in name with other argument
// types is then not seen (docs/GUARANTEES.md).

// builtinFunctionsSQL lists the names of the database's built-in
// functions: unqualified for pg_catalog (always on the search path),
// qualified for both schemas.
const builtinFunctionsSQL = `SELECT p.proname, n.nspname
	FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
	WHERE n.nspname IN ('pg_catalog', 'information_schema')`

// loadBuiltinFunctions reads the built-in functions' names.
func (r *replication) loadBuiltinFunctions(ctx context.Context) error {
	rows, err := r.applyConn.Query(ctx, builtinFunctionsSQL)
	if err != nil {
		return fmt.Errorf("read the built-in functions' names: %w", err)
	}
	defer rows.Close()
	names := map[string]bool{}
	for rows.Next() {
		var name, schema string
		if err := rows.Scan(&name, &schema); err != nil {
			return fmt.Errorf("read the built-in functions' names: %w", err)
		}
		names[schema+"."+name] = true
		if schema == "pg_catalog" {
			names[name] = true
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the built-in functions' names: %w", err)
	}
	r.builtinFunctions = names
	return nil
}

// runsUserCode reports a read that calls a function that is not built in.
// The names are compared as the parser gives them: it folds unquoted
// names to lower case already, and a quoted "Lower" is not lower.
func (r *replication) runsUserCode(st sqlclass.Statement) bool {
	if r == nil {
		return false
	}
	for _, f := range st.Functions {
		if !r.builtinFunctions[f] {
			return true
		}
	}
	return false
}

// classify is sqlclass.Classify, with a read that calls a user's function
// classified as what it may be: user code (sqlclass.Call), which the
// proxy runs as a write. A holdable cursor over such a read is refused
// (sqlclass.HoldableCursorCode): its query runs to its end inside COMMIT,
// after the collect, so neither wrapping nor a block would see what the
// function writes.
func (s *session) classify(sql string) ([]sqlclass.Statement, error) {
	stmts, err := sqlclass.Classify(sql)
	for i := range stmts {
		if s.p.rep.runsUserCode(stmts[i]) {
			stmts[i].Kind = sqlclass.Call
			if stmts[i].Holdable && stmts[i].Unreplicated == sqlclass.Replicated {
				stmts[i].Unreplicated = sqlclass.HoldableCursorCode
			}
		}
	}
	return stmts, err
}
