package sqlclass

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	pgparser "github.com/pganalyze/pg_query_go/v6/parser"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Kind is what a statement does to the transaction it runs in.
type Kind int

// The kinds. Other is the zero value.
const (
	// Other is anything not listed below (LOAD, ALTER SYSTEM, ...).
	Other Kind = iota
	// Begin is BEGIN / START TRANSACTION.
	Begin
	// Commit is COMMIT / END (Chain reports COMMIT AND CHAIN).
	Commit
	// Rollback is ROLLBACK / ABORT (Chain reports ROLLBACK AND CHAIN).
	Rollback
	// Savepoint is SAVEPOINT name.
	Savepoint
	// Release is RELEASE [SAVEPOINT] name.
	Release
	// RollbackTo is ROLLBACK TO [SAVEPOINT] name.
	RollbackTo
	// PrepareTransaction is PREPARE TRANSACTION 'gid' (two-phase commit; the proxy refuses it).
	PrepareTransaction
	// CommitPrepared is COMMIT PREPARED 'gid'.
	CommitPrepared
	// RollbackPrepared is ROLLBACK PREPARED 'gid'.
	RollbackPrepared
	// Read is a statement that does not write: SELECT without locking clause and
	// without data-modifying CTE, VALUES, SHOW, EXPLAIN without ANALYZE, TABLE,
	// DECLARE CURSOR for such a query, FETCH, MOVE, CLOSE. A SELECT calling a
	// volatile function that writes is Read too: that cannot be known from the text.
	Read
	// Write is INSERT, UPDATE, DELETE, MERGE, a SELECT with FOR UPDATE / FOR NO KEY
	// UPDATE / FOR SHARE / FOR KEY SHARE anywhere, a query with a data-modifying CTE,
	// EXPLAIN ANALYZE of any of these, COPY (DML RETURNING) TO.
	Write
	// Truncate is TRUNCATE.
	Truncate
	// DDL is CREATE / ALTER / DROP / COMMENT / GRANT / REVOKE / SECURITY LABEL /
	// REFRESH MATERIALIZED VIEW / CREATE TABLE AS / SELECT INTO / IMPORT FOREIGN
	// SCHEMA / REASSIGN OWNED / DROP OWNED and the like.
	DDL
	// Set is SET / RESET (of any parameter), SET TRANSACTION, SET SESSION
	// CHARACTERISTICS AS TRANSACTION and SET CONSTRAINTS.
	Set
	// CopyTo is COPY ... TO (reads).
	CopyTo
	// CopyFrom is COPY ... FROM (writes).
	CopyFrom
	// Listen is LISTEN channel.
	Listen
	// Notify is NOTIFY channel.
	Notify
	// Unlisten is UNLISTEN channel / UNLISTEN *.
	Unlisten
	// LockTable is LOCK [TABLE].
	LockTable
	// Prepare is the SQL-level PREPARE name AS statement (Inner tells what the
	// prepared statement does).
	Prepare
	// Execute is the SQL-level EXECUTE name.
	Execute
	// Deallocate is the SQL-level DEALLOCATE [ALL].
	Deallocate
	// Discard is DISCARD ALL / PLANS / SEQUENCES / TEMP.
	Discard
	// Vacuum is VACUUM (local maintenance; cannot run inside a transaction block).
	Vacuum
	// Analyze is ANALYZE (local maintenance; may run inside a transaction block).
	Analyze
	// Maintenance is other local maintenance: CLUSTER, REINDEX, CHECKPOINT.
	Maintenance
	// Call is CALL and DO: arbitrary code that may write and, for a procedure, may
	// even commit or roll back the transaction from inside.
	Call

	kindCount // keep last
)

var kindNames = [kindCount]string{
	Other:              "Other",
	Begin:              "Begin",
	Commit:             "Commit",
	Rollback:           "Rollback",
	Savepoint:          "Savepoint",
	Release:            "Release",
	RollbackTo:         "RollbackTo",
	PrepareTransaction: "PrepareTransaction",
	CommitPrepared:     "CommitPrepared",
	RollbackPrepared:   "RollbackPrepared",
	Read:               "Read",
	Write:              "Write",
	Truncate:           "Truncate",
	DDL:                "DDL",
	Set:                "Set",
	CopyTo:             "CopyTo",
	CopyFrom:           "CopyFrom",
	Listen:             "Listen",
	Notify:             "Notify",
	Unlisten:           "Unlisten",
	LockTable:          "LockTable",
	Prepare:            "Prepare",
	Execute:            "Execute",
	Deallocate:         "Deallocate",
	Discard:            "Discard",
	Vacuum:             "Vacuum",
	Analyze:            "Analyze",
	Maintenance:        "Maintenance",
	Call:               "Call",
}

// String returns the constant's name, e.g. "Begin", "Write".
func (k Kind) String() string {
	if k >= 0 && k < kindCount {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds returns every Kind, in declaration order (for tests and metrics labels).
func Kinds() []Kind {
	ks := make([]Kind, kindCount)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// Statement is one top-level statement of a query string.
type Statement struct {
	Kind Kind
	// SQL is the statement's own text, sliced from the input by the parser's
	// locations, without the terminating semicolon and surrounding white space
	// (comments in front of it are kept).
	SQL string
	// Isolation is the isolation level asked for by BEGIN / START TRANSACTION,
	// SET TRANSACTION, SET SESSION CHARACTERISTICS AS TRANSACTION, or
	// SET [default_]transaction_isolation: "serializable", "repeatable read",
	// "read committed", "read uncommitted", or "" when none is named.
	Isolation string
	// ReadOnly is set by BEGIN READ ONLY, SET TRANSACTION READ ONLY,
	// SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY and
	// SET [default_]transaction_read_only = on.
	ReadOnly bool
	// TransactionLocal is set for SET LOCAL, whose setting ends with the
	// transaction.
	TransactionLocal bool
	// TempOnly reports a DDL, Write or Truncate that only touches temporary
	// objects, when that is knowable from the text (CREATE TEMP TABLE, SELECT INTO
	// TEMP, objects qualified with pg_temp).
	TempOnly bool
	// Temp is, for a DDL, the objects it changes and names, for the
	// proxy to tell whether it acts on temporary objects (TempScope): the
	// text alone cannot always tell, since a temporary table shadows a
	// permanent one of the same name.
	Temp *TempScope
	// Tag is the command tag PostgreSQL returns in CommandComplete, without the
	// row count ("BEGIN", "START TRANSACTION", "COMMIT", "INSERT", "CREATE TABLE").
	// It is "" for EXECUTE, whose tag is that of the prepared statement.
	Tag string
	// Chain is set for COMMIT AND CHAIN / ROLLBACK AND CHAIN: a new transaction
	// with the same characteristics starts at once.
	Chain bool
	// Name depends on Kind: the savepoint name (Savepoint, Release, RollbackTo),
	// the global transaction id (PrepareTransaction, CommitPrepared,
	// RollbackPrepared), the prepared statement name (Prepare, Execute,
	// Deallocate; "" for DEALLOCATE ALL), the channel (Listen, Notify, Unlisten;
	// "*" for UNLISTEN *), the lower-case parameter name (Set: e.g.
	// "default_transaction_isolation", "transaction" for SET TRANSACTION,
	// "session characteristics" for SET SESSION CHARACTERISTICS, "" for RESET
	// ALL; SHOW's parameter for a SHOW), the lower-case DISCARD target ("all",
	// "plans", "sequences", "temp"), the cursor name (DECLARE, FETCH, MOVE, CLOSE;
	// "" for CLOSE ALL).
	Name string
	// Unreplicated is the feature the statement uses whose effect would
	// stay on one replica (LISTEN/NOTIFY, large objects, advisory locks;
	// see Feature), Replicated when none is visible in the text.
	Unreplicated Feature
	// Functions are, for a Read or a CopyTo, the functions it calls
	// anywhere in its tree (each once, as written: "name" or
	// "schema.name"): a read that calls a user's function may write
	// (the proxy then runs it as a write; see Proxy docs).
	Functions []string
	// Holdable is set for DECLARE ... WITH HOLD: PostgreSQL runs the
	// cursor's query to its end when the transaction commits (to keep its
	// rows past the commit), so the functions it calls run inside COMMIT.
	Holdable bool
	// Inner is, for Prepare, the kind of the prepared statement; for a DECLARE
	// CURSOR, Read or Write of its query; for EXPLAIN, the kind of the explained
	// statement. Other elsewhere.
	Inner Kind
}

// cursorOptHold is PostgreSQL's CURSOR_OPT_HOLD (parsenodes.h), the WITH
// HOLD bit of DeclareCursorStmt.options.
const cursorOptHold = 0x0020

// ParseError is a syntax error reported by the PostgreSQL parser.
type ParseError struct {
	Message string // the parser's message, e.g. `syntax error at or near "FROM"`
	// Cursor is the 1-based character (not byte) position in the query string at
	// which the error was found, as PostgreSQL reports it in ErrorResponse field
	// 'P'; 0 when unknown.
	Cursor int
}

func (e *ParseError) Error() string {
	if e.Cursor > 0 {
		return fmt.Sprintf("sqlclass: %s (at character %d)", e.Message, e.Cursor)
	}
	return "sqlclass: " + e.Message
}

// Classify splits a query string into its top-level statements and classifies
// each. An empty string (or only comments and semicolons) gives no statement and
// no error. A syntax error gives a *ParseError. The result is cached: the caller
// gets its own copy of the slice and may modify it.
func Classify(sql string) ([]Statement, error) {
	if e, ok := classifyCache.get(sql); ok {
		if e.err != nil {
			return nil, e.err
		}
		return append([]Statement(nil), e.stmts...), nil
	}
	stmts, err := classifyUncached(sql)
	classifyCache.put(sql, cacheEntry{stmts: stmts, err: err})
	if err != nil {
		return nil, err
	}
	return append([]Statement(nil), stmts...), nil
}

func classifyUncached(sql string) ([]Statement, error) {
	// The query string of a Query or Parse message is a C string: it cannot
	// contain a zero byte, and libpg_query would silently stop at one.
	if i := strings.IndexByte(sql, 0); i >= 0 {
		return nil, &ParseError{Message: "query string contains a zero byte", Cursor: len([]rune(sql[:i])) + 1}
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		var pe *pgparser.Error
		if errors.As(err, &pe) {
			return nil, &ParseError{Message: pe.Message, Cursor: pe.Cursorpos}
		}
		return nil, &ParseError{Message: err.Error()}
	}
	out := make([]Statement, 0, len(tree.Stmts))
	for _, raw := range tree.Stmts {
		st := classifyNode(raw.Stmt)
		st.Unreplicated = unreplicatedFeature(raw.Stmt, st.Kind)
		st.Functions = calledFunctions(raw.Stmt, st.Kind)
		st.SQL = sliceStmt(sql, int(raw.StmtLocation), int(raw.StmtLen))
		out = append(out, st)
	}
	return out, nil
}

// sliceStmt cuts a statement out of the query by the parser's byte locations; a
// length of 0 means "to the end of the string".
func sliceStmt(sql string, loc, n int) string {
	if loc < 0 || loc > len(sql) {
		loc = 0
	}
	end := len(sql)
	if n > 0 && loc+n <= len(sql) {
		end = loc + n
	}
	return strings.TrimSpace(sql[loc:end])
}

func classifyNode(n *pg_query.Node) Statement {
	if n == nil {
		return Statement{Kind: Other}
	}
	switch s := n.Node.(type) {
	case *pg_query.Node_TransactionStmt:
		return classifyTransaction(s.TransactionStmt)

	case *pg_query.Node_SelectStmt:
		if s.SelectStmt.IntoClause != nil { // SELECT ... INTO new_table
			return ddlStatement(n, "SELECT")
		}
		return classifyQuery(n, "SELECT")
	case *pg_query.Node_InsertStmt:
		return classifyQuery(n, "INSERT")
	case *pg_query.Node_UpdateStmt:
		return classifyQuery(n, "UPDATE")
	case *pg_query.Node_DeleteStmt:
		return classifyQuery(n, "DELETE")
	case *pg_query.Node_MergeStmt:
		return classifyQuery(n, "MERGE")

	case *pg_query.Node_VariableShowStmt:
		return Statement{Kind: Read, Tag: "SHOW", Name: strings.ToLower(s.VariableShowStmt.Name)}
	case *pg_query.Node_VariableSetStmt:
		return classifySet(s.VariableSetStmt)
	case *pg_query.Node_ConstraintsSetStmt:
		return Statement{Kind: Set, Tag: "SET CONSTRAINTS", Name: "constraints"}

	case *pg_query.Node_ExplainStmt:
		inner := classifyNode(s.ExplainStmt.Query)
		st := Statement{Kind: Read, Tag: "EXPLAIN", Inner: inner.Kind}
		if explainAnalyzes(s.ExplainStmt.Options) {
			// EXPLAIN ANALYZE runs the statement.
			st.Kind = inner.Kind
			st.TempOnly = inner.TempOnly
			st.Temp = inner.Temp
		}
		return st

	case *pg_query.Node_CopyStmt:
		c := s.CopyStmt
		if c.IsFrom {
			return Statement{Kind: CopyFrom, Tag: "COPY", TempOnly: isTempRangeVar(c.Relation)}
		}
		if c.Query != nil {
			if inner := classifyQuery(c.Query, ""); inner.Kind == Write {
				return Statement{Kind: Write, Tag: "COPY", TempOnly: inner.TempOnly}
			}
		}
		return Statement{Kind: CopyTo, Tag: "COPY"}

	case *pg_query.Node_TruncateStmt:
		return Statement{Kind: Truncate, Tag: "TRUNCATE TABLE", TempOnly: allTempRangeVars(s.TruncateStmt.Relations)}
	case *pg_query.Node_LockStmt:
		return Statement{Kind: LockTable, Tag: "LOCK TABLE"}

	case *pg_query.Node_ListenStmt:
		return Statement{Kind: Listen, Tag: "LISTEN", Name: s.ListenStmt.Conditionname}
	case *pg_query.Node_NotifyStmt:
		return Statement{Kind: Notify, Tag: "NOTIFY", Name: s.NotifyStmt.Conditionname}
	case *pg_query.Node_UnlistenStmt:
		name := s.UnlistenStmt.Conditionname
		if name == "" {
			name = "*"
		}
		return Statement{Kind: Unlisten, Tag: "UNLISTEN", Name: name}

	case *pg_query.Node_PrepareStmt:
		inner := classifyNode(s.PrepareStmt.Query)
		return Statement{Kind: Prepare, Tag: "PREPARE", Name: s.PrepareStmt.Name, Inner: inner.Kind}
	case *pg_query.Node_ExecuteStmt:
		return Statement{Kind: Execute, Tag: "", Name: s.ExecuteStmt.Name}
	case *pg_query.Node_DeallocateStmt:
		if s.DeallocateStmt.Isall || s.DeallocateStmt.Name == "" {
			return Statement{Kind: Deallocate, Tag: "DEALLOCATE ALL"}
		}
		return Statement{Kind: Deallocate, Tag: "DEALLOCATE", Name: s.DeallocateStmt.Name}
	case *pg_query.Node_DiscardStmt:
		switch s.DiscardStmt.Target {
		case pg_query.DiscardMode_DISCARD_ALL:
			return Statement{Kind: Discard, Tag: "DISCARD ALL", Name: "all"}
		case pg_query.DiscardMode_DISCARD_PLANS:
			return Statement{Kind: Discard, Tag: "DISCARD PLANS", Name: "plans"}
		case pg_query.DiscardMode_DISCARD_SEQUENCES:
			return Statement{Kind: Discard, Tag: "DISCARD SEQUENCES", Name: "sequences"}
		case pg_query.DiscardMode_DISCARD_TEMP:
			return Statement{Kind: Discard, Tag: "DISCARD TEMP", Name: "temp"}
		}
		return Statement{Kind: Discard, Tag: "DISCARD"}

	case *pg_query.Node_DeclareCursorStmt:
		inner := classifyNode(s.DeclareCursorStmt.Query)
		k := Read
		if inner.Kind != Read {
			k = Write
		}
		return Statement{Kind: k, Tag: "DECLARE CURSOR", Name: s.DeclareCursorStmt.Portalname, Inner: inner.Kind,
			Holdable: s.DeclareCursorStmt.Options&cursorOptHold != 0}
	case *pg_query.Node_FetchStmt:
		if s.FetchStmt.Ismove {
			return Statement{Kind: Read, Tag: "MOVE", Name: s.FetchStmt.Portalname}
		}
		return Statement{Kind: Read, Tag: "FETCH", Name: s.FetchStmt.Portalname}
	case *pg_query.Node_ClosePortalStmt:
		if s.ClosePortalStmt.Portalname == "" {
			return Statement{Kind: Read, Tag: "CLOSE CURSOR ALL"}
		}
		return Statement{Kind: Read, Tag: "CLOSE CURSOR", Name: s.ClosePortalStmt.Portalname}

	case *pg_query.Node_VacuumStmt:
		if s.VacuumStmt.IsVacuumcmd {
			return Statement{Kind: Vacuum, Tag: "VACUUM"}
		}
		return Statement{Kind: Analyze, Tag: "ANALYZE"}
	case *pg_query.Node_ClusterStmt:
		return Statement{Kind: Maintenance, Tag: "CLUSTER"}
	case *pg_query.Node_ReindexStmt:
		return Statement{Kind: Maintenance, Tag: "REINDEX"}
	case *pg_query.Node_CheckPointStmt:
		return Statement{Kind: Maintenance, Tag: "CHECKPOINT"}

	case *pg_query.Node_CallStmt:
		return Statement{Kind: Call, Tag: "CALL"}
	case *pg_query.Node_DoStmt:
		return Statement{Kind: Call, Tag: "DO"}

	case *pg_query.Node_LoadStmt:
		return Statement{Kind: Other, Tag: "LOAD"}
	case *pg_query.Node_AlterSystemStmt:
		return Statement{Kind: Other, Tag: "ALTER SYSTEM"}
	}
	if tag, ok := ddlTag(n); ok {
		return ddlStatement(n, tag)
	}
	return Statement{Kind: Other}
}

// ddlStatement is a DDL statement, TempOnly when its text shows it acts
// on temporary objects only.
func ddlStatement(n *pg_query.Node, tag string) Statement {
	scope := tempScope(n)
	v, known := scope.TextVerdict()
	return Statement{Kind: DDL, Tag: tag, TempOnly: known && v == StayLocal, Temp: scope}
}

func classifyTransaction(t *pg_query.TransactionStmt) Statement {
	switch t.Kind {
	case pg_query.TransactionStmtKind_TRANS_STMT_BEGIN, pg_query.TransactionStmtKind_TRANS_STMT_START:
		st := Statement{Kind: Begin, Tag: "BEGIN"}
		if t.Kind == pg_query.TransactionStmtKind_TRANS_STMT_START {
			st.Tag = "START TRANSACTION"
		}
		st.Isolation, st.ReadOnly = transactionOptions(t.Options)
		return st
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT:
		return Statement{Kind: Commit, Tag: "COMMIT", Chain: t.Chain}
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		return Statement{Kind: Rollback, Tag: "ROLLBACK", Chain: t.Chain}
	case pg_query.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		return Statement{Kind: Savepoint, Tag: "SAVEPOINT", Name: t.SavepointName}
	case pg_query.TransactionStmtKind_TRANS_STMT_RELEASE:
		return Statement{Kind: Release, Tag: "RELEASE", Name: t.SavepointName}
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		return Statement{Kind: RollbackTo, Tag: "ROLLBACK", Name: t.SavepointName}
	case pg_query.TransactionStmtKind_TRANS_STMT_PREPARE:
		return Statement{Kind: PrepareTransaction, Tag: "PREPARE TRANSACTION", Name: t.Gid}
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED:
		return Statement{Kind: CommitPrepared, Tag: "COMMIT PREPARED", Name: t.Gid}
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		return Statement{Kind: RollbackPrepared, Tag: "ROLLBACK PREPARED", Name: t.Gid}
	}
	return Statement{Kind: Other}
}

// transactionOptions reads the transaction_mode_list of BEGIN / START
// TRANSACTION / SET TRANSACTION / SET SESSION CHARACTERISTICS.
func transactionOptions(opts []*pg_query.Node) (isolation string, readOnly bool) {
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil {
			continue
		}
		switch d.Defname {
		case "transaction_isolation":
			isolation = normalizeIsolation(constString(d.Arg))
		case "transaction_read_only":
			if b, ok := constBool(d.Arg); ok {
				readOnly = b
			}
		}
	}
	return isolation, readOnly
}

func classifySet(v *pg_query.VariableSetStmt) Statement {
	st := Statement{Kind: Set, Tag: "SET", Name: strings.ToLower(v.Name), TransactionLocal: v.IsLocal}
	switch v.Kind {
	case pg_query.VariableSetKind_VAR_RESET, pg_query.VariableSetKind_VAR_RESET_ALL:
		st.Tag = "RESET"
		return st
	case pg_query.VariableSetKind_VAR_SET_MULTI:
		// SET TRANSACTION ... / SET SESSION CHARACTERISTICS AS TRANSACTION ...
		// (SET TRANSACTION SNAPSHOT carries a string argument and no DefElem.)
		st.Isolation, st.ReadOnly = transactionOptions(v.Args)
		return st
	case pg_query.VariableSetKind_VAR_SET_VALUE:
		if len(v.Args) == 0 {
			return st
		}
		switch st.Name {
		case "default_transaction_isolation", "transaction_isolation":
			st.Isolation = normalizeIsolation(constString(v.Args[0]))
		case "default_transaction_read_only", "transaction_read_only":
			if b, ok := constBool(v.Args[0]); ok {
				st.ReadOnly = b
			}
		}
	}
	return st
}

func normalizeIsolation(s string) string {
	s = strings.Join(strings.Fields(strings.ToLower(s)), " ")
	switch s {
	case "serializable", "repeatable read", "read committed", "read uncommitted":
		return s
	}
	return ""
}

// constString returns the text of a constant (string, number or boolean).
func constString(n *pg_query.Node) string {
	c := n.GetAConst()
	if c == nil {
		if s := n.GetString_(); s != nil {
			return s.Sval
		}
		return ""
	}
	switch v := c.Val.(type) {
	case *pg_query.A_Const_Sval:
		return v.Sval.GetSval()
	case *pg_query.A_Const_Ival:
		return strconv.Itoa(int(v.Ival.GetIval()))
	case *pg_query.A_Const_Fval:
		return v.Fval.GetFval()
	case *pg_query.A_Const_Boolval:
		if v.Boolval.GetBoolval() {
			return "true"
		}
		return "false"
	}
	return ""
}

// constBool interprets a constant the way PostgreSQL's parse_bool does for the
// common spellings.
func constBool(n *pg_query.Node) (bool, bool) {
	if c := n.GetAConst(); c != nil {
		switch v := c.Val.(type) {
		case *pg_query.A_Const_Ival:
			return v.Ival.GetIval() != 0, true
		case *pg_query.A_Const_Boolval:
			return v.Boolval.GetBoolval(), true
		}
	}
	if b := n.GetBoolean(); b != nil {
		return b.Boolval, true
	}
	if i := n.GetInteger(); i != nil {
		return i.Ival != 0, true
	}
	switch strings.ToLower(strings.TrimSpace(constString(n))) {
	case "on", "true", "yes", "1", "t", "y":
		return true, true
	case "off", "false", "no", "0", "f", "n":
		return false, true
	}
	return false, false
}

// explainAnalyzes reports whether EXPLAIN's options include ANALYZE (true).
func explainAnalyzes(opts []*pg_query.Node) bool {
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil || !strings.EqualFold(d.Defname, "analyze") {
			continue
		}
		if d.Arg == nil {
			return true
		}
		if b, ok := constBool(d.Arg); ok {
			return b
		}
		return true // PostgreSQL rejects other values; assume the worst
	}
	return false
}

// classifyQuery classifies a plannable query (SELECT, VALUES, INSERT, UPDATE,
// DELETE, MERGE) by walking its whole tree: any data-modifying statement (a
// DML CTE) or row-locking clause, at any depth, makes it a Write.
func classifyQuery(n *pg_query.Node, tag string) Statement {
	write := false
	targets, allTemp := 0, true
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		var rel *pg_query.RangeVar
		switch x := m.(type) {
		case *pg_query.LockingClause:
			write = true
			allTemp = false // row locks on tables we cannot name reliably
			return true
		case *pg_query.InsertStmt:
			rel = x.Relation
		case *pg_query.UpdateStmt:
			rel = x.Relation
		case *pg_query.DeleteStmt:
			rel = x.Relation
		case *pg_query.MergeStmt:
			rel = x.Relation
		default:
			return true
		}
		write = true
		targets++
		if !isTempRangeVar(rel) {
			allTemp = false
		}
		return true
	})
	if !write {
		return Statement{Kind: Read, Tag: tag}
	}
	return Statement{Kind: Write, Tag: tag, TempOnly: targets > 0 && allTemp}
}

// walk visits m and every message below it, depth first, while visit returns true
// for the message's children to be visited.
func walk(m protoreflect.Message, visit func(proto.Message) bool) {
	if !m.IsValid() || !visit(m.Interface()) {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), visit)
			}
			return true
		}
		walk(v.Message(), visit)
		return true
	})
}

// isTempRangeVar reports a relation that is temporary by its declaration
// (CREATE TEMP ...) or by its explicit pg_temp qualification.
func isTempRangeVar(r *pg_query.RangeVar) bool {
	if r == nil {
		return false
	}
	return r.Relpersistence == "t" || isTempSchema(r.Schemaname)
}

func isTempSchema(s string) bool {
	return s == "pg_temp" || strings.HasPrefix(s, "pg_temp_")
}

func allTempRangeVars(nodes []*pg_query.Node) bool {
	if len(nodes) == 0 {
		return false
	}
	for _, n := range nodes {
		if !isTempRangeVar(n.GetRangeVar()) {
			return false
		}
	}
	return true
}
