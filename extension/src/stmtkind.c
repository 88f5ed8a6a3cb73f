/*
 * stmtkind.c: which utility statements are DDL, replicated as their text.
 *
 * DDL is replicated as its statement text and run again by every other
 * replica at its position in the global order (Postgres-R(SI) §5.1: "for
 * SQL DDL statements the writeset simply contains the query text"; its
 * footnote 3: some statements run only at the replica they were submitted
 * to, some are disallowed). The rule is default-replicate: a statement
 * type not named below is DDL. A statement PostgreSQL adds later is then
 * replicated, and fails loudly where it cannot run, instead of changing
 * one replica's schema alone.
 *
 * Local (never replicated), because they change nothing the other
 * replicas hold or because what they change reaches them another way:
 *
 *   transaction control, SET/SHOW/RESET/DISCARD, PREPARE/EXECUTE/
 *   DEALLOCATE, cursors     session state
 *   COPY, TRUNCATE          rows: the capture triggers see them
 *   EXPLAIN                 runs its query as a query (see unreplicated.c
 *                           for EXPLAIN ANALYZE CREATE TABLE AS)
 *   LOCK, VACUUM, ANALYZE, CLUSTER, REINDEX, CHECKPOINT, LOAD
 *                           this server's locks, storage and statistics
 *   DO, CALL                their statements are seen one by one: DDL by
 *                           ddl.c, rows by the capture triggers
 *   SET CONSTRAINTS, ALTER SYSTEM, UNLISTEN
 *   databases, tablespaces, subscriptions, parameter privileges
 *                           objects of the server, not of the replicated
 *                           database (each replica is a server)
 *
 * Roles are replicated like DDL (CREATE/ALTER/DROP ROLE, GRANT role):
 * every replica has the same roles.
 *
 * Everything here reads the parse tree only: it runs for every utility
 * statement, BEGIN and COMMIT included, and must not touch the catalog.
 */
#include "tashkent.h"

#include "nodes/nodes.h"

#define OWN_EXTENSION_NAME "tashkent"

/* Objects of the whole server rather than of the replicated database. */
static bool
per_server_object(ObjectType type)
{
	switch (type)
	{
		case OBJECT_DATABASE:
		case OBJECT_TABLESPACE:
		case OBJECT_SUBSCRIPTION:
		case OBJECT_PARAMETER_ACL:
			return true;
		default:
			return false;
	}
}

/* DDL on an object of this type: local, refused, or replicated. */
static TkUtilityKind
kind_by_object(ObjectType type)
{
	if (per_server_object(type))
		return TK_UTILITY_LOCAL;
	if (type == OBJECT_LARGEOBJECT)
		return TK_UTILITY_CHECKED;	/* refused: unreplicated.c */
	return TK_UTILITY_DDL;
}

/* PREPARE name AS SELECT ... INTO: its EXECUTE would create a table. */
static bool
prepares_select_into(PrepareStmt *stmt)
{
	return IsA(stmt->query, SelectStmt) && ((SelectStmt *) stmt->query)->intoClause != NULL;
}

static bool
is_own_extension(const char *name)
{
	return strcmp(name, OWN_EXTENSION_NAME) == 0;
}

TkUtilityKind
tk_utility_kind(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_TransactionStmt:
			/* BEGIN/START TRANSACTION may ask for SERIALIZABLE */
			return ((TransactionStmt *) stmt)->options != NIL ? TK_UTILITY_CHECKED : TK_UTILITY_LOCAL;
		case T_VariableSetStmt:
			return tk_asks_serializable(stmt) || tk_sets_maintenance_on(stmt) ?
				TK_UTILITY_CHECKED : TK_UTILITY_LOCAL;
		case T_PrepareStmt:
			return prepares_select_into((PrepareStmt *) stmt) ? TK_UTILITY_CHECKED : TK_UTILITY_LOCAL;
		case T_CopyStmt:
			/* COPY FROM into a system catalog is refused (guard.c) */
			return ((CopyStmt *) stmt)->is_from && ((CopyStmt *) stmt)->relation != NULL ?
				TK_UTILITY_CHECKED : TK_UTILITY_LOCAL;
		case T_ExplainStmt:
		case T_ListenStmt:
		case T_NotifyStmt:
			return TK_UTILITY_CHECKED;
		case T_VariableShowStmt:
		case T_DiscardStmt:
		case T_ExecuteStmt:
		case T_DeallocateStmt:
		case T_DeclareCursorStmt:
		case T_ClosePortalStmt:
		case T_FetchStmt:
		case T_TruncateStmt:
		case T_LockStmt:
		case T_VacuumStmt:
		case T_ClusterStmt:
		case T_ReindexStmt:
		case T_CheckPointStmt:
		case T_LoadStmt:
		case T_DoStmt:
		case T_CallStmt:
		case T_ConstraintsSetStmt:
		case T_AlterSystemStmt:
		case T_UnlistenStmt:	/* nothing to undo: LISTEN is refused */
		case T_CreatedbStmt:
		case T_DropdbStmt:
		case T_AlterDatabaseStmt:
		case T_AlterDatabaseSetStmt:
		case T_AlterDatabaseRefreshCollStmt:
		case T_CreateTableSpaceStmt:
		case T_DropTableSpaceStmt:
		case T_AlterTableSpaceOptionsStmt:
		case T_AlterTableMoveAllStmt:	/* moves relations between tablespaces */
		case T_CreateSubscriptionStmt:
		case T_AlterSubscriptionStmt:
		case T_DropSubscriptionStmt:
			return TK_UTILITY_LOCAL;
		case T_CreateExtensionStmt:
			return is_own_extension(((CreateExtensionStmt *) stmt)->extname) ?
				TK_UTILITY_OWN_EXTENSION : TK_UTILITY_DDL;
		case T_AlterExtensionStmt:
			return is_own_extension(((AlterExtensionStmt *) stmt)->extname) ?
				TK_UTILITY_OWN_EXTENSION : TK_UTILITY_DDL;
		case T_GrantStmt:
			return kind_by_object(((GrantStmt *) stmt)->objtype);
		case T_CommentStmt:
			return kind_by_object(((CommentStmt *) stmt)->objtype);
		case T_SecLabelStmt:
			return kind_by_object(((SecLabelStmt *) stmt)->objtype);
		case T_AlterOwnerStmt:
			return kind_by_object(((AlterOwnerStmt *) stmt)->objectType);
		case T_RenameStmt:
			return kind_by_object(((RenameStmt *) stmt)->renameType);
		default:
			return TK_UTILITY_DDL;
	}
}

/*
 * tk_utility_is_concurrent: a statement that cannot run in a transaction
 * block because it commits as it goes (CREATE/DROP INDEX CONCURRENTLY,
 * ALTER TABLE ... DETACH PARTITION ... CONCURRENTLY).
 */
bool
tk_utility_is_concurrent(Node *stmt)
{
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_IndexStmt:
			return ((IndexStmt *) stmt)->concurrent;
		case T_DropStmt:
			return ((DropStmt *) stmt)->concurrent;
		case T_AlterTableStmt:
			foreach(lc, ((AlterTableStmt *) stmt)->cmds)
			{
				AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

				if (cmd->subtype == AT_DetachPartition &&
					((PartitionCmd *) cmd->def)->concurrent)
					return true;
			}
			return false;
		default:
			return false;
	}
}

/* tk_utility_clear_concurrent turns such a statement into its blocking form. */
void
tk_utility_clear_concurrent(Node *stmt)
{
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_IndexStmt:
			((IndexStmt *) stmt)->concurrent = false;
			break;
		case T_DropStmt:
			((DropStmt *) stmt)->concurrent = false;
			break;
		case T_AlterTableStmt:
			foreach(lc, ((AlterTableStmt *) stmt)->cmds)
			{
				AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

				if (cmd->subtype == AT_DetachPartition)
					((PartitionCmd *) cmd->def)->concurrent = false;
			}
			break;
		default:
			break;
	}
}
