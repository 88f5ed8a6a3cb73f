package sqlclass

import pg_query "github.com/pganalyze/pg_query_go/v6"

// unqualifiedRelations lists the existing relations a DDL statement acts
// on that it names without a schema: the proxy asks the database whether
// they are temporary (a session's temporary table shadows a permanent one
// of the same name), since the text cannot tell. Relations the statement
// creates are not listed: their persistence is in the text (TempOnly).
func unqualifiedRelations(n *pg_query.Node) []string {
	var names []string
	add := func(r *pg_query.RangeVar) {
		if r != nil && r.Schemaname == "" && r.Relpersistence != "t" {
			names = append(names, r.Relname)
		}
	}
	switch s := n.Node.(type) {
	case *pg_query.Node_IndexStmt:
		add(s.IndexStmt.Relation)
	case *pg_query.Node_AlterTableStmt:
		add(s.AlterTableStmt.Relation)
	case *pg_query.Node_AlterSeqStmt:
		add(s.AlterSeqStmt.Sequence)
	case *pg_query.Node_RenameStmt:
		add(s.RenameStmt.Relation)
	case *pg_query.Node_CreateTrigStmt:
		add(s.CreateTrigStmt.Relation)
	case *pg_query.Node_RuleStmt:
		add(s.RuleStmt.Relation)
	case *pg_query.Node_CommentStmt:
		if schema, name, ok := commentedRelation(s.CommentStmt); ok && schema == "" {
			names = append(names, name)
		}
	case *pg_query.Node_DropStmt:
		switch s.DropStmt.RemoveType {
		case pg_query.ObjectType_OBJECT_TABLE, pg_query.ObjectType_OBJECT_VIEW, pg_query.ObjectType_OBJECT_SEQUENCE,
			pg_query.ObjectType_OBJECT_INDEX, pg_query.ObjectType_OBJECT_MATVIEW:
			for _, o := range s.DropStmt.Objects {
				l := o.GetList()
				switch {
				case l == nil:
				case len(l.Items) == 1:
					names = append(names, l.Items[0].GetString_().GetSval())
				case l.Items[0].GetString_().GetSval() != "pg_temp":
					// It also drops a relation named with another schema:
					// a permanent one, whatever the other names resolve
					// to, so it must not stay on this replica (DROP TABLE
					// tmp, public.t dropped public.t on one replica only).
					// Listing none keeps the statement replicated.
					return nil
				}
			}
		}
	}
	return names
}
