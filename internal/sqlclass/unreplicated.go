package sqlclass

import (
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Feature names a PostgreSQL feature whose effect stays on the one replica
// that runs it: tashkent replicates row changes of tables (by capture
// triggers) and DDL (by its text), and these are neither. A proxy refuses
// a statement that uses one, because on a cluster it would silently mean
// something else than on one PostgreSQL (docs/COMPATIBILITY.md).
type Feature int

const (
	// Replicated is the zero value: nothing known to be local.
	Replicated Feature = iota
	// Notifications are LISTEN, NOTIFY and pg_notify(): a notification
	// reaches only listeners on the same replica.
	Notifications
	// LargeObjects are the lo_* server functions and ALTER / COMMENT ON /
	// GRANT ON LARGE OBJECT: pg_largeobject has no capture triggers.
	LargeObjects
	// AdvisoryLocks are pg_advisory_* and pg_try_advisory_*: they exclude
	// only sessions of the same replica.
	AdvisoryLocks
	// SequenceSet is setval(): it would move the sequence of one replica
	// only, and break its per-replica offset (replica/sequences.go).
	SequenceSet
	// PreparedQueryDDL is CREATE TABLE AS EXECUTE name of a table that is
	// not temporary: DDL is replicated as its text, and the prepared
	// statement it names exists in this session only, so every other
	// replica would fail on it for good.
	PreparedQueryDDL
	// DDLInPreparedStatement is PREPARE name AS SELECT ... INTO a table that
	// is not temporary: its EXECUTE creates the table, and an EXECUTE is not
	// DDL to the proxy, so the table would exist on this replica only.
	DDLInPreparedStatement
	// HoldableCursorCode is DECLARE ... WITH HOLD over a query that calls
	// a user's function. PostgreSQL runs such a query to its end inside
	// COMMIT, after the proxy collected the writeset and the DDL guard's
	// notes: what the function writes there commits on this replica only.
	// Which functions are the user's is the caller's to tell (the proxy
	// knows the database's built-ins), so Classify never sets it.
	HoldableCursorCode
)

// String returns the feature's name as the docs spell it.
func (f Feature) String() string {
	switch f {
	case Notifications:
		return "LISTEN/NOTIFY"
	case LargeObjects:
		return "large objects"
	case AdvisoryLocks:
		return "advisory locks"
	case SequenceSet:
		return "setval"
	case PreparedQueryDDL:
		return "CREATE TABLE AS EXECUTE"
	case DDLInPreparedStatement:
		return "PREPARE ... SELECT INTO"
	case HoldableCursorCode:
		return "DECLARE ... WITH HOLD calling a function"
	}
	return "replicated"
}

// largeObjectFunctions are PostgreSQL 15's server-side large object
// functions (be-fsstubs.c; pg_proc.dat).
var largeObjectFunctions = map[string]bool{
	"lo_open": true, "lo_close": true, "loread": true, "lowrite": true, "lo_lseek": true, "lo_lseek64": true,
	"lo_tell": true, "lo_tell64": true, "lo_truncate": true, "lo_truncate64": true, "lo_creat": true,
	"lo_create": true, "lo_unlink": true, "lo_import": true, "lo_export": true, "lo_from_bytea": true,
	"lo_get": true, "lo_put": true,
}

// unreplicatedFeature reports the first feature a statement uses that
// would stay local, from its kind and, for anything else, the functions
// it calls anywhere in its tree (a call hidden inside a user function or a
// DO block cannot be seen).
func unreplicatedFeature(n *pg_query.Node, k Kind) Feature {
	switch k {
	case Listen, Notify:
		return Notifications
	case Unlisten: // harmless: nothing can be listened to through the proxy
		return Replicated
	}
	if n == nil {
		return Replicated
	}
	if largeObjectDDL(n) {
		return LargeObjects
	}
	if p := n.GetPrepareStmt(); k == Prepare && p != nil {
		if inner := classifyNode(p.Query); inner.Kind == DDL && !inner.TempOnly {
			return DDLInPreparedStatement
		}
	}
	if ctas := n.GetCreateTableAsStmt(); k == DDL && ctas != nil && ctas.Query.GetExecuteStmt() != nil &&
		!(ctas.Into != nil && isTempRangeVar(ctas.Into.Rel)) {
		return PreparedQueryDDL
	}
	if !executesExpressions(n, k) {
		return Replicated
	}
	found := Replicated
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if found != Replicated {
			return false
		}
		if fc, ok := m.(*pg_query.FuncCall); ok {
			found = functionFeature(fc)
		}
		return true
	})
	return found
}

// calledFunctions returns the functions a Read or CopyTo statement calls
// (Statement.Functions), nil for other kinds, which the proxy runs as
// writes anyway.
func calledFunctions(n *pg_query.Node, k Kind) []string {
	if n == nil || (k != Read && k != CopyTo) {
		return nil
	}
	if e := n.GetExplainStmt(); e != nil && !explainAnalyzes(e.Options) {
		return nil // plans the query without running it
	}
	var names []string
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		fc, ok := m.(*pg_query.FuncCall)
		if !ok {
			return true
		}
		parts := make([]string, 0, len(fc.Funcname))
		for _, p := range fc.Funcname {
			parts = append(parts, p.GetString_().GetSval())
		}
		if name := strings.Join(parts, "."); name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
		return true
	})
	return names
}

// functionFeature classifies a call by its name, qualified or not: only
// pg_catalog's functions have these names unless a user shadows them.
func functionFeature(fc *pg_query.FuncCall) Feature {
	if len(fc.Funcname) == 0 {
		return Replicated
	}
	name := strings.ToLower(fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval())
	if len(fc.Funcname) == 2 && fc.Funcname[0].GetString_().GetSval() != "pg_catalog" {
		return Replicated
	}
	switch {
	case name == "pg_notify":
		return Notifications
	case largeObjectFunctions[name]:
		return LargeObjects
	case strings.HasPrefix(name, "pg_advisory_") || strings.HasPrefix(name, "pg_try_advisory_"):
		return AdvisoryLocks
	case name == "setval":
		return SequenceSet
	}
	return Replicated
}

// executesExpressions reports statements that evaluate expressions when
// they run. Other DDL only defines objects (a view or a function that
// calls pg_notify is not a notification until it is used; its use is
// unseen anyway), and the transaction-control and SET statements call
// nothing.
func executesExpressions(n *pg_query.Node, k Kind) bool {
	switch k {
	case Read, Write, Prepare, CopyTo, CopyFrom, Call, Other:
		return true
	case DDL:
		switch n.Node.(type) {
		case *pg_query.Node_CreateTableAsStmt, *pg_query.Node_SelectStmt:
			return true // CREATE TABLE AS / SELECT INTO run their query
		}
	}
	return false
}

func largeObjectDDL(n *pg_query.Node) bool {
	switch s := n.Node.(type) {
	case *pg_query.Node_GrantStmt:
		return s.GrantStmt.Objtype == pg_query.ObjectType_OBJECT_LARGEOBJECT
	case *pg_query.Node_CommentStmt:
		return s.CommentStmt.Objtype == pg_query.ObjectType_OBJECT_LARGEOBJECT
	case *pg_query.Node_AlterOwnerStmt:
		return s.AlterOwnerStmt.ObjectType == pg_query.ObjectType_OBJECT_LARGEOBJECT
	}
	return false
}
