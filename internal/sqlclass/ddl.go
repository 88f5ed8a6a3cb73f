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
// returns PostgreSQL's command tag for it. Whether it acts on temporary
// objects is the TempScope's to say (tempscope.go).
func ddlTag(n *pg_query.Node) (tag string, ok bool) {
	switch s := n.Node.(type) {
	case *pg_query.Node_CreateStmt:
		return "CREATE TABLE", true
	case *pg_query.Node_CreateForeignTableStmt:
		return "CREATE FOREIGN TABLE", true
	case *pg_query.Node_CreateTableAsStmt:
		c := s.CreateTableAsStmt
		skipData := c.Into != nil && c.Into.SkipData
		if c.Objtype == pg_query.ObjectType_OBJECT_MATVIEW {
			if skipData {
				return "CREATE MATERIALIZED VIEW", true
			}
			return "SELECT", true
		}
		if skipData {
			return "CREATE TABLE AS", true
		}
		return "SELECT", true // PostgreSQL reports "SELECT n"
	case *pg_query.Node_ViewStmt:
		return "CREATE VIEW", true
	case *pg_query.Node_CreateSeqStmt:
		return "CREATE SEQUENCE", true
	case *pg_query.Node_AlterSeqStmt:
		return "ALTER SEQUENCE", true
	case *pg_query.Node_IndexStmt:
		return "CREATE INDEX", true
	case *pg_query.Node_AlterTableStmt:
		return "ALTER " + objName(s.AlterTableStmt.Objtype, "TABLE"), true
	case *pg_query.Node_AlterTableMoveAllStmt:
		return "ALTER " + objName(s.AlterTableMoveAllStmt.Objtype, "TABLE"), true
	case *pg_query.Node_DropStmt:
		return "DROP " + objName(s.DropStmt.RemoveType, "OBJECT"), true
	case *pg_query.Node_RenameStmt:
		r := s.RenameStmt
		switch r.RenameType {
		case pg_query.ObjectType_OBJECT_COLUMN, pg_query.ObjectType_OBJECT_ATTRIBUTE:
			return "ALTER " + objName(r.RelationType, "TABLE"), true
		}
		return "ALTER " + objName(r.RenameType, "OBJECT"), true
	case *pg_query.Node_AlterObjectDependsStmt:
		return "ALTER " + objName(s.AlterObjectDependsStmt.ObjectType, "OBJECT"), true
	case *pg_query.Node_AlterObjectSchemaStmt:
		return "ALTER " + objName(s.AlterObjectSchemaStmt.ObjectType, "OBJECT"), true
	case *pg_query.Node_AlterOwnerStmt:
		return "ALTER " + objName(s.AlterOwnerStmt.ObjectType, "OBJECT"), true
	case *pg_query.Node_AlterFunctionStmt:
		return "ALTER " + objName(s.AlterFunctionStmt.Objtype, "FUNCTION"), true
	case *pg_query.Node_CreateFunctionStmt:
		if s.CreateFunctionStmt.IsProcedure {
			return "CREATE PROCEDURE", true
		}
		return "CREATE FUNCTION", true
	case *pg_query.Node_DefineStmt:
		return "CREATE " + objName(s.DefineStmt.Kind, "TYPE"), true
	case *pg_query.Node_CreateSchemaStmt:
		return "CREATE SCHEMA", true
	case *pg_query.Node_AlterDomainStmt:
		return "ALTER DOMAIN", true
	case *pg_query.Node_CreateDomainStmt:
		return "CREATE DOMAIN", true
	case *pg_query.Node_GrantStmt:
		if s.GrantStmt.IsGrant {
			return "GRANT", true
		}
		return "REVOKE", true
	case *pg_query.Node_GrantRoleStmt:
		if s.GrantRoleStmt.IsGrant {
			return "GRANT ROLE", true
		}
		return "REVOKE ROLE", true
	case *pg_query.Node_AlterDefaultPrivilegesStmt:
		return "ALTER DEFAULT PRIVILEGES", true
	case *pg_query.Node_CommentStmt:
		return "COMMENT", true
	case *pg_query.Node_SecLabelStmt:
		return "SECURITY LABEL", true
	case *pg_query.Node_CreateTableSpaceStmt:
		return "CREATE TABLESPACE", true
	case *pg_query.Node_DropTableSpaceStmt:
		return "DROP TABLESPACE", true
	case *pg_query.Node_AlterTableSpaceOptionsStmt:
		return "ALTER TABLESPACE", true
	case *pg_query.Node_CreateExtensionStmt:
		return "CREATE EXTENSION", true
	case *pg_query.Node_AlterExtensionStmt, *pg_query.Node_AlterExtensionContentsStmt:
		return "ALTER EXTENSION", true
	case *pg_query.Node_CreateFdwStmt:
		return "CREATE FOREIGN DATA WRAPPER", true
	case *pg_query.Node_AlterFdwStmt:
		return "ALTER FOREIGN DATA WRAPPER", true
	case *pg_query.Node_CreateForeignServerStmt:
		return "CREATE SERVER", true
	case *pg_query.Node_AlterForeignServerStmt:
		return "ALTER SERVER", true
	case *pg_query.Node_CreateUserMappingStmt:
		return "CREATE USER MAPPING", true
	case *pg_query.Node_AlterUserMappingStmt:
		return "ALTER USER MAPPING", true
	case *pg_query.Node_DropUserMappingStmt:
		return "DROP USER MAPPING", true
	case *pg_query.Node_ImportForeignSchemaStmt:
		return "IMPORT FOREIGN SCHEMA", true
	case *pg_query.Node_CreatePolicyStmt:
		return "CREATE POLICY", true
	case *pg_query.Node_AlterPolicyStmt:
		return "ALTER POLICY", true
	case *pg_query.Node_CreateAmStmt:
		return "CREATE ACCESS METHOD", true
	case *pg_query.Node_CreateTrigStmt:
		return "CREATE TRIGGER", true
	case *pg_query.Node_CreateEventTrigStmt:
		return "CREATE EVENT TRIGGER", true
	case *pg_query.Node_AlterEventTrigStmt:
		return "ALTER EVENT TRIGGER", true
	case *pg_query.Node_CreatePlangStmt:
		return "CREATE LANGUAGE", true
	case *pg_query.Node_CreateRoleStmt:
		return "CREATE ROLE", true
	case *pg_query.Node_AlterRoleStmt, *pg_query.Node_AlterRoleSetStmt:
		return "ALTER ROLE", true
	case *pg_query.Node_DropRoleStmt:
		return "DROP ROLE", true
	case *pg_query.Node_CreateOpClassStmt:
		return "CREATE OPERATOR CLASS", true
	case *pg_query.Node_CreateOpFamilyStmt:
		return "CREATE OPERATOR FAMILY", true
	case *pg_query.Node_AlterOpFamilyStmt:
		return "ALTER OPERATOR FAMILY", true
	case *pg_query.Node_CreateStatsStmt:
		return "CREATE STATISTICS", true
	case *pg_query.Node_AlterStatsStmt:
		return "ALTER STATISTICS", true
	case *pg_query.Node_AlterOperatorStmt:
		return "ALTER OPERATOR", true
	case *pg_query.Node_AlterTypeStmt:
		return "ALTER TYPE", true
	case *pg_query.Node_RuleStmt:
		return "CREATE RULE", true
	case *pg_query.Node_CompositeTypeStmt, *pg_query.Node_CreateEnumStmt, *pg_query.Node_CreateRangeStmt:
		return "CREATE TYPE", true
	case *pg_query.Node_AlterEnumStmt:
		return "ALTER TYPE", true
	case *pg_query.Node_AlterCollationStmt:
		return "ALTER COLLATION", true
	case *pg_query.Node_CreatedbStmt:
		return "CREATE DATABASE", true
	case *pg_query.Node_AlterDatabaseStmt, *pg_query.Node_AlterDatabaseSetStmt, *pg_query.Node_AlterDatabaseRefreshCollStmt:
		return "ALTER DATABASE", true
	case *pg_query.Node_DropdbStmt:
		return "DROP DATABASE", true
	case *pg_query.Node_CreateConversionStmt:
		return "CREATE CONVERSION", true
	case *pg_query.Node_CreateCastStmt:
		return "CREATE CAST", true
	case *pg_query.Node_CreateTransformStmt:
		return "CREATE TRANSFORM", true
	case *pg_query.Node_DropOwnedStmt:
		return "DROP OWNED", true
	case *pg_query.Node_ReassignOwnedStmt:
		return "REASSIGN OWNED", true
	case *pg_query.Node_AlterTsdictionaryStmt:
		return "ALTER TEXT SEARCH DICTIONARY", true
	case *pg_query.Node_AlterTsconfigurationStmt:
		return "ALTER TEXT SEARCH CONFIGURATION", true
	case *pg_query.Node_CreatePublicationStmt:
		return "CREATE PUBLICATION", true
	case *pg_query.Node_AlterPublicationStmt:
		return "ALTER PUBLICATION", true
	case *pg_query.Node_CreateSubscriptionStmt:
		return "CREATE SUBSCRIPTION", true
	case *pg_query.Node_AlterSubscriptionStmt:
		return "ALTER SUBSCRIPTION", true
	case *pg_query.Node_DropSubscriptionStmt:
		return "DROP SUBSCRIPTION", true
	case *pg_query.Node_RefreshMatViewStmt:
		return "REFRESH MATERIALIZED VIEW", true
	}
	return "", false
}
