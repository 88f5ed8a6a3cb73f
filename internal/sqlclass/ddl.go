package sqlclass

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// objectTypeNames spells ObjectType the way PostgreSQL's command tags do
// ("DROP TABLE", "ALTER MATERIALIZED VIEW", ...).
var objectTypeNames = map[pg_query.ObjectType]string{
	pg_query.ObjectType_OBJECT_ACCESS_METHOD:         "ACCESS METHOD",
	pg_query.ObjectType_OBJECT_AGGREGATE:             "AGGREGATE",
	pg_query.ObjectType_OBJECT_AMOP:                  "OPERATOR FAMILY",
	pg_query.ObjectType_OBJECT_AMPROC:                "OPERATOR FAMILY",
	pg_query.ObjectType_OBJECT_ATTRIBUTE:             "TYPE",
	pg_query.ObjectType_OBJECT_CAST:                  "CAST",
	pg_query.ObjectType_OBJECT_COLUMN:                "TABLE",
	pg_query.ObjectType_OBJECT_COLLATION:             "COLLATION",
	pg_query.ObjectType_OBJECT_CONVERSION:            "CONVERSION",
	pg_query.ObjectType_OBJECT_DATABASE:              "DATABASE",
	pg_query.ObjectType_OBJECT_DEFAULT:               "TABLE",
	pg_query.ObjectType_OBJECT_DEFACL:                "DEFAULT PRIVILEGES",
	pg_query.ObjectType_OBJECT_DOMAIN:                "DOMAIN",
	pg_query.ObjectType_OBJECT_DOMCONSTRAINT:         "DOMAIN",
	pg_query.ObjectType_OBJECT_EVENT_TRIGGER:         "EVENT TRIGGER",
	pg_query.ObjectType_OBJECT_EXTENSION:             "EXTENSION",
	pg_query.ObjectType_OBJECT_FDW:                   "FOREIGN DATA WRAPPER",
	pg_query.ObjectType_OBJECT_FOREIGN_SERVER:        "SERVER",
	pg_query.ObjectType_OBJECT_FOREIGN_TABLE:         "FOREIGN TABLE",
	pg_query.ObjectType_OBJECT_FUNCTION:              "FUNCTION",
	pg_query.ObjectType_OBJECT_INDEX:                 "INDEX",
	pg_query.ObjectType_OBJECT_LANGUAGE:              "LANGUAGE",
	pg_query.ObjectType_OBJECT_LARGEOBJECT:           "LARGE OBJECT",
	pg_query.ObjectType_OBJECT_MATVIEW:               "MATERIALIZED VIEW",
	pg_query.ObjectType_OBJECT_OPCLASS:               "OPERATOR CLASS",
	pg_query.ObjectType_OBJECT_OPERATOR:              "OPERATOR",
	pg_query.ObjectType_OBJECT_OPFAMILY:              "OPERATOR FAMILY",
	pg_query.ObjectType_OBJECT_PARAMETER_ACL:         "PARAMETER",
	pg_query.ObjectType_OBJECT_POLICY:                "POLICY",
	pg_query.ObjectType_OBJECT_PROCEDURE:             "PROCEDURE",
	pg_query.ObjectType_OBJECT_PUBLICATION:           "PUBLICATION",
	pg_query.ObjectType_OBJECT_PUBLICATION_NAMESPACE: "PUBLICATION",
	pg_query.ObjectType_OBJECT_PUBLICATION_REL:       "PUBLICATION",
	pg_query.ObjectType_OBJECT_ROLE:                  "ROLE",
	pg_query.ObjectType_OBJECT_ROUTINE:               "ROUTINE",
	pg_query.ObjectType_OBJECT_RULE:                  "RULE",
	pg_query.ObjectType_OBJECT_SCHEMA:                "SCHEMA",
	pg_query.ObjectType_OBJECT_SEQUENCE:              "SEQUENCE",
	pg_query.ObjectType_OBJECT_SUBSCRIPTION:          "SUBSCRIPTION",
	pg_query.ObjectType_OBJECT_STATISTIC_EXT:         "STATISTICS",
	pg_query.ObjectType_OBJECT_TABCONSTRAINT:         "TABLE",
	pg_query.ObjectType_OBJECT_TABLE:                 "TABLE",
	pg_query.ObjectType_OBJECT_TABLESPACE:            "TABLESPACE",
	pg_query.ObjectType_OBJECT_TRANSFORM:             "TRANSFORM",
	pg_query.ObjectType_OBJECT_TRIGGER:               "TRIGGER",
	pg_query.ObjectType_OBJECT_TSCONFIGURATION:       "TEXT SEARCH CONFIGURATION",
	pg_query.ObjectType_OBJECT_TSDICTIONARY:          "TEXT SEARCH DICTIONARY",
	pg_query.ObjectType_OBJECT_TSPARSER:              "TEXT SEARCH PARSER",
	pg_query.ObjectType_OBJECT_TSTEMPLATE:            "TEXT SEARCH TEMPLATE",
	pg_query.ObjectType_OBJECT_TYPE:                  "TYPE",
	pg_query.ObjectType_OBJECT_USER_MAPPING:          "USER MAPPING",
	pg_query.ObjectType_OBJECT_VIEW:                  "VIEW",
}

func objName(t pg_query.ObjectType, dflt string) string {
	if s, ok := objectTypeNames[t]; ok {
		return s
	}
	return dflt
}

// ddlTag recognises the DDL statements (anything that changes the schema, the
// catalog or privileges and must be replicated as a statement in total order) and
// returns PostgreSQL's command tag for it, and whether it only touches temporary
// objects (when knowable).
func ddlTag(n *pg_query.Node) (tag string, temp bool, ok bool) {
	switch s := n.Node.(type) {
	case *pg_query.Node_CreateStmt:
		return "CREATE TABLE", isTempRangeVar(s.CreateStmt.Relation), true
	case *pg_query.Node_CreateForeignTableStmt:
		return "CREATE FOREIGN TABLE", false, true
	case *pg_query.Node_CreateTableAsStmt:
		c := s.CreateTableAsStmt
		temp := c.Into != nil && isTempRangeVar(c.Into.Rel)
		skipData := c.Into != nil && c.Into.SkipData
		if c.Objtype == pg_query.ObjectType_OBJECT_MATVIEW {
			if skipData {
				return "CREATE MATERIALIZED VIEW", false, true
			}
			return "SELECT", false, true
		}
		if skipData {
			return "CREATE TABLE AS", temp, true
		}
		return "SELECT", temp, true // PostgreSQL reports "SELECT n"
	case *pg_query.Node_ViewStmt:
		return "CREATE VIEW", isTempRangeVar(s.ViewStmt.View), true
	case *pg_query.Node_CreateSeqStmt:
		return "CREATE SEQUENCE", isTempRangeVar(s.CreateSeqStmt.Sequence), true
	case *pg_query.Node_AlterSeqStmt:
		return "ALTER SEQUENCE", isTempRangeVar(s.AlterSeqStmt.Sequence), true
	case *pg_query.Node_IndexStmt:
		return "CREATE INDEX", isTempRangeVar(s.IndexStmt.Relation), true
	case *pg_query.Node_AlterTableStmt:
		return "ALTER " + objName(s.AlterTableStmt.Objtype, "TABLE"), isTempRangeVar(s.AlterTableStmt.Relation), true
	case *pg_query.Node_AlterTableMoveAllStmt:
		return "ALTER " + objName(s.AlterTableMoveAllStmt.Objtype, "TABLE"), false, true
	case *pg_query.Node_DropStmt:
		d := s.DropStmt
		temp := false
		switch d.RemoveType {
		case pg_query.ObjectType_OBJECT_TABLE, pg_query.ObjectType_OBJECT_VIEW,
			pg_query.ObjectType_OBJECT_SEQUENCE, pg_query.ObjectType_OBJECT_INDEX:
			temp = allTempQualified(d.Objects)
		}
		return "DROP " + objName(d.RemoveType, "OBJECT"), temp, true
	case *pg_query.Node_RenameStmt:
		r := s.RenameStmt
		switch r.RenameType {
		case pg_query.ObjectType_OBJECT_COLUMN, pg_query.ObjectType_OBJECT_ATTRIBUTE:
			return "ALTER " + objName(r.RelationType, "TABLE"), isTempRangeVar(r.Relation), true
		}
		return "ALTER " + objName(r.RenameType, "OBJECT"), isTempRangeVar(r.Relation), true
	case *pg_query.Node_AlterObjectDependsStmt:
		return "ALTER " + objName(s.AlterObjectDependsStmt.ObjectType, "OBJECT"), false, true
	case *pg_query.Node_AlterObjectSchemaStmt:
		return "ALTER " + objName(s.AlterObjectSchemaStmt.ObjectType, "OBJECT"), false, true
	case *pg_query.Node_AlterOwnerStmt:
		return "ALTER " + objName(s.AlterOwnerStmt.ObjectType, "OBJECT"), false, true
	case *pg_query.Node_AlterFunctionStmt:
		return "ALTER " + objName(s.AlterFunctionStmt.Objtype, "FUNCTION"), false, true
	case *pg_query.Node_CreateFunctionStmt:
		if s.CreateFunctionStmt.IsProcedure {
			return "CREATE PROCEDURE", false, true
		}
		return "CREATE FUNCTION", false, true
	case *pg_query.Node_DefineStmt:
		return "CREATE " + objName(s.DefineStmt.Kind, "TYPE"), false, true
	case *pg_query.Node_CreateSchemaStmt:
		return "CREATE SCHEMA", false, true
	case *pg_query.Node_AlterDomainStmt:
		return "ALTER DOMAIN", false, true
	case *pg_query.Node_CreateDomainStmt:
		return "CREATE DOMAIN", false, true
	case *pg_query.Node_GrantStmt:
		if s.GrantStmt.IsGrant {
			return "GRANT", false, true
		}
		return "REVOKE", false, true
	case *pg_query.Node_GrantRoleStmt:
		if s.GrantRoleStmt.IsGrant {
			return "GRANT ROLE", false, true
		}
		return "REVOKE ROLE", false, true
	case *pg_query.Node_AlterDefaultPrivilegesStmt:
		return "ALTER DEFAULT PRIVILEGES", false, true
	case *pg_query.Node_CommentStmt:
		schema, _, ok := commentedRelation(s.CommentStmt)
		return "COMMENT", ok && isTempSchema(schema), true
	case *pg_query.Node_SecLabelStmt:
		return "SECURITY LABEL", false, true
	case *pg_query.Node_CreateTableSpaceStmt:
		return "CREATE TABLESPACE", false, true
	case *pg_query.Node_DropTableSpaceStmt:
		return "DROP TABLESPACE", false, true
	case *pg_query.Node_AlterTableSpaceOptionsStmt:
		return "ALTER TABLESPACE", false, true
	case *pg_query.Node_CreateExtensionStmt:
		return "CREATE EXTENSION", false, true
	case *pg_query.Node_AlterExtensionStmt, *pg_query.Node_AlterExtensionContentsStmt:
		return "ALTER EXTENSION", false, true
	case *pg_query.Node_CreateFdwStmt:
		return "CREATE FOREIGN DATA WRAPPER", false, true
	case *pg_query.Node_AlterFdwStmt:
		return "ALTER FOREIGN DATA WRAPPER", false, true
	case *pg_query.Node_CreateForeignServerStmt:
		return "CREATE SERVER", false, true
	case *pg_query.Node_AlterForeignServerStmt:
		return "ALTER SERVER", false, true
	case *pg_query.Node_CreateUserMappingStmt:
		return "CREATE USER MAPPING", false, true
	case *pg_query.Node_AlterUserMappingStmt:
		return "ALTER USER MAPPING", false, true
	case *pg_query.Node_DropUserMappingStmt:
		return "DROP USER MAPPING", false, true
	case *pg_query.Node_ImportForeignSchemaStmt:
		return "IMPORT FOREIGN SCHEMA", false, true
	case *pg_query.Node_CreatePolicyStmt:
		return "CREATE POLICY", isTempRangeVar(s.CreatePolicyStmt.Table), true
	case *pg_query.Node_AlterPolicyStmt:
		return "ALTER POLICY", isTempRangeVar(s.AlterPolicyStmt.Table), true
	case *pg_query.Node_CreateAmStmt:
		return "CREATE ACCESS METHOD", false, true
	case *pg_query.Node_CreateTrigStmt:
		return "CREATE TRIGGER", isTempRangeVar(s.CreateTrigStmt.Relation), true
	case *pg_query.Node_CreateEventTrigStmt:
		return "CREATE EVENT TRIGGER", false, true
	case *pg_query.Node_AlterEventTrigStmt:
		return "ALTER EVENT TRIGGER", false, true
	case *pg_query.Node_CreatePlangStmt:
		return "CREATE LANGUAGE", false, true
	case *pg_query.Node_CreateRoleStmt:
		return "CREATE ROLE", false, true
	case *pg_query.Node_AlterRoleStmt, *pg_query.Node_AlterRoleSetStmt:
		return "ALTER ROLE", false, true
	case *pg_query.Node_DropRoleStmt:
		return "DROP ROLE", false, true
	case *pg_query.Node_CreateOpClassStmt:
		return "CREATE OPERATOR CLASS", false, true
	case *pg_query.Node_CreateOpFamilyStmt:
		return "CREATE OPERATOR FAMILY", false, true
	case *pg_query.Node_AlterOpFamilyStmt:
		return "ALTER OPERATOR FAMILY", false, true
	case *pg_query.Node_CreateStatsStmt:
		return "CREATE STATISTICS", false, true
	case *pg_query.Node_AlterStatsStmt:
		return "ALTER STATISTICS", false, true
	case *pg_query.Node_AlterOperatorStmt:
		return "ALTER OPERATOR", false, true
	case *pg_query.Node_AlterTypeStmt:
		return "ALTER TYPE", false, true
	case *pg_query.Node_RuleStmt:
		return "CREATE RULE", isTempRangeVar(s.RuleStmt.Relation), true
	case *pg_query.Node_CompositeTypeStmt, *pg_query.Node_CreateEnumStmt, *pg_query.Node_CreateRangeStmt:
		return "CREATE TYPE", false, true
	case *pg_query.Node_AlterEnumStmt:
		return "ALTER TYPE", false, true
	case *pg_query.Node_AlterCollationStmt:
		return "ALTER COLLATION", false, true
	case *pg_query.Node_CreatedbStmt:
		return "CREATE DATABASE", false, true
	case *pg_query.Node_AlterDatabaseStmt, *pg_query.Node_AlterDatabaseSetStmt, *pg_query.Node_AlterDatabaseRefreshCollStmt:
		return "ALTER DATABASE", false, true
	case *pg_query.Node_DropdbStmt:
		return "DROP DATABASE", false, true
	case *pg_query.Node_CreateConversionStmt:
		return "CREATE CONVERSION", false, true
	case *pg_query.Node_CreateCastStmt:
		return "CREATE CAST", false, true
	case *pg_query.Node_CreateTransformStmt:
		return "CREATE TRANSFORM", false, true
	case *pg_query.Node_DropOwnedStmt:
		return "DROP OWNED", false, true
	case *pg_query.Node_ReassignOwnedStmt:
		return "REASSIGN OWNED", false, true
	case *pg_query.Node_AlterTsdictionaryStmt:
		return "ALTER TEXT SEARCH DICTIONARY", false, true
	case *pg_query.Node_AlterTsconfigurationStmt:
		return "ALTER TEXT SEARCH CONFIGURATION", false, true
	case *pg_query.Node_CreatePublicationStmt:
		return "CREATE PUBLICATION", false, true
	case *pg_query.Node_AlterPublicationStmt:
		return "ALTER PUBLICATION", false, true
	case *pg_query.Node_CreateSubscriptionStmt:
		return "CREATE SUBSCRIPTION", false, true
	case *pg_query.Node_AlterSubscriptionStmt:
		return "ALTER SUBSCRIPTION", false, true
	case *pg_query.Node_DropSubscriptionStmt:
		return "DROP SUBSCRIPTION", false, true
	case *pg_query.Node_RefreshMatViewStmt:
		return "REFRESH MATERIALIZED VIEW", false, true
	}
	return "", false, false
}

// commentedRelation is the schema ("" when not given) and name of the
// relation a COMMENT ON names, itself or one of its columns; ok is false
// for other objects. COMMENT ON a temporary table, replicated, stopped the
// other replicas' appliers (review h33, finding 5).
func commentedRelation(c *pg_query.CommentStmt) (schema, name string, ok bool) {
	l := c.Object.GetList()
	if l == nil {
		return "", "", false
	}
	items := l.Items
	switch c.Objtype {
	case pg_query.ObjectType_OBJECT_TABLE, pg_query.ObjectType_OBJECT_VIEW, pg_query.ObjectType_OBJECT_MATVIEW,
		pg_query.ObjectType_OBJECT_SEQUENCE, pg_query.ObjectType_OBJECT_INDEX, pg_query.ObjectType_OBJECT_FOREIGN_TABLE:
	case pg_query.ObjectType_OBJECT_COLUMN:
		items = items[:len(items)-1] // the column's own name
	default:
		return "", "", false
	}
	switch len(items) {
	case 1:
		return "", items[0].GetString_().GetSval(), true
	case 2:
		return items[0].GetString_().GetSval(), items[1].GetString_().GetSval(), true
	}
	return "", "", false
}
