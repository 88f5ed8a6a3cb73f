/*
 * unreplicated.c: utility statements whose effect would stay on one
 * replica, refused.
 *
 * tashkent replicates rows of tables (capture triggers) and DDL (its
 * text); these are neither, and on a cluster they would silently mean
 * something else than on one PostgreSQL (docs/GUARANTEES.md, "Refused,
 * with SQLSTATE"). They are refused with SQLSTATE 0A000 and what to do
 * instead; tk_refuse_feature has every such message, those of the
 * functions that guard.c refuses (pg_notify, lo_*, advisory locks,
 * setval) included.
 *
 *   LISTEN, NOTIFY             a notification would reach only sessions on
 *                              this replica (UNLISTEN is harmless: local)
 *   ALTER / COMMENT ON / GRANT / SECURITY LABEL ON LARGE OBJECT
 *                              pg_largeobject is not replicated
 *   CREATE TABLE AS EXECUTE    the prepared statement exists in this
 *                              session only; its text fails elsewhere
 *   PREPARE ... SELECT INTO    its EXECUTE would create the table with the
 *                              PREPARE's text as the statement
 *   EXPLAIN ANALYZE CREATE TABLE AS
 *                              creates the table without running the
 *                              statement as DDL: nothing would replicate it
 *
 * each of the last three only for a table that is not temporary.
 */
#include "tashkent.h"

#include "commands/defrem.h"
#include "catalog/namespace.h"

/* tk_refuse_feature raises the refusal of a feature, with what to do instead. */
void
tk_refuse_feature(TkFeature feature)
{
	switch (feature)
	{
		case TK_FEATURE_NOTIFICATIONS:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("LISTEN, NOTIFY and pg_notify() are not supported by tashkent: notifications would reach only sessions on the same replica"),
					 errdetail("tashkent replicates table rows, not notifications."),
					 errhint("Poll a table for changes instead (rows are replicated), or send notifications through a PostgreSQL outside the cluster.")));
			break;
		case TK_FEATURE_LARGE_OBJECTS:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("large objects are not supported by tashkent: pg_largeobject is not replicated"),
					 errdetail("tashkent replicates rows of tables with a primary key; large objects live outside them."),
					 errhint("Store the data in a bytea column of a table with a primary key.")));
			break;
		case TK_FEATURE_ADVISORY_LOCKS:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("advisory locks are not supported by tashkent: they would exclude only sessions on the same replica"),
					 errdetail("An advisory lock is held in one replica's memory; the other replicas do not see it."),
					 errhint("Update a row of a lock table instead: tashkent certifies concurrent writes of one row across replicas, and one of two such transactions fails with 40001.")));
			break;
		case TK_FEATURE_SETVAL:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("setval() is not supported by tashkent: it would move the sequence on this replica only"),
					 errdetail("Each replica's sequences hand out their own values (a per-replica offset); setval would break that on one replica."),
					 errhint("Use ALTER SEQUENCE name RESTART WITH n: it is replicated, and every replica moves the sequence to its own next value at or past n and past the values already in the sequence's column.")));
			break;
		case TK_FEATURE_CTAS_EXECUTE:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("CREATE TABLE AS EXECUTE is not supported by tashkent: the other replicas do not have the prepared statement it runs"),
					 errdetail("tashkent replicates DDL as its text; a prepared statement exists only in the session that prepared it."),
					 errhint("Write the query out: CREATE TABLE name AS SELECT ...")));
			break;
		case TK_FEATURE_PREPARED_SELECT_INTO:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("SELECT INTO in a prepared statement is not supported by tashkent: the table it creates would exist on this replica only"),
					 errdetail("tashkent replicates DDL as its text; EXECUTE of a prepared statement does not say what it creates."),
					 errhint("Use CREATE TABLE name AS SELECT ..., which is replicated.")));
			break;
		case TK_FEATURE_EXPLAIN_ANALYZE_CTAS:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("EXPLAIN ANALYZE of CREATE TABLE AS is not supported by tashkent: the table it creates would exist on this replica only"),
					 errdetail("EXPLAIN ANALYZE creates the table as it runs the query, not as a DDL statement that tashkent replicates."),
					 errhint("Run the CREATE TABLE AS itself, or EXPLAIN ANALYZE it into a temporary table (CREATE TEMP TABLE ... AS).")));
			break;
		case TK_FEATURE_REPLICATION_ORIGINS:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("replication origin sessions are not supported in a database tashkent replicates"),
					 errdetail("Each commit of the replica's order records its version as the progress of replication origin \"tashkent\", one backend at a time; a session of its own, or an advance or a drop, would break that."),
					 errhint("Use them in another database of the server.")));
			break;
	}
	pg_unreachable();
}

static bool
explain_analyzes(ExplainStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->options)
	{
		DefElem    *opt = lfirst_node(DefElem, lc);

		if (strcmp(opt->defname, "analyze") == 0)
			return defGetBoolean(opt);
	}
	return false;
}

/* The CREATE TABLE AS that an analysed EXPLAIN or CREATE TABLE AS wraps. */
static Node *
utility_of(Node *query)
{
	if (query != NULL && IsA(query, Query) && ((Query *) query)->commandType == CMD_UTILITY)
		return ((Query *) query)->utilityStmt;
	return NULL;
}

static bool
is_large_object(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_GrantStmt:
			return ((GrantStmt *) stmt)->objtype == OBJECT_LARGEOBJECT;
		case T_CommentStmt:
			return ((CommentStmt *) stmt)->objtype == OBJECT_LARGEOBJECT;
		case T_SecLabelStmt:
			return ((SecLabelStmt *) stmt)->objtype == OBJECT_LARGEOBJECT;
		case T_AlterOwnerStmt:
			return ((AlterOwnerStmt *) stmt)->objectType == OBJECT_LARGEOBJECT;
		default:
			return false;
	}
}

/* COPY FROM into a system catalog: a write that no trigger sees. */
static void
check_copy_from(CopyStmt *stmt)
{
	Oid			relid;

	if (!stmt->is_from || stmt->relation == NULL)
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (OidIsValid(relid))
		tk_guard_catalog_write(relid);
}

/*
 * tk_refuse_unreplicated raises the refusal for a statement of a replicated
 * database that would not be replicated, and returns for any other.
 */
void
tk_refuse_unreplicated(Node *stmt)
{
	Node	   *inner;

	if (IsA(stmt, ListenStmt) || IsA(stmt, NotifyStmt))
		tk_refuse_feature(TK_FEATURE_NOTIFICATIONS);
	if (is_large_object(stmt))
		tk_refuse_feature(TK_FEATURE_LARGE_OBJECTS);
	if (IsA(stmt, CopyStmt))
		check_copy_from((CopyStmt *) stmt);
	if (IsA(stmt, CreateTableAsStmt))
	{
		CreateTableAsStmt *ctas = (CreateTableAsStmt *) stmt;

		inner = utility_of(ctas->query);
		if (inner != NULL && IsA(inner, ExecuteStmt) && !tk_creates_temporary(ctas->into->rel))
			tk_refuse_feature(TK_FEATURE_CTAS_EXECUTE);
	}
	if (IsA(stmt, PrepareStmt))
	{
		PrepareStmt *prepare = (PrepareStmt *) stmt;

		if (IsA(prepare->query, SelectStmt) && ((SelectStmt *) prepare->query)->intoClause != NULL &&
			!tk_creates_temporary(((SelectStmt *) prepare->query)->intoClause->rel))
			tk_refuse_feature(TK_FEATURE_PREPARED_SELECT_INTO);
	}
	if (IsA(stmt, ExplainStmt) && explain_analyzes((ExplainStmt *) stmt))
	{
		inner = utility_of(((ExplainStmt *) stmt)->query);
		if (inner != NULL && IsA(inner, CreateTableAsStmt) &&
			!tk_creates_temporary(((CreateTableAsStmt *) inner)->into->rel))
			tk_refuse_feature(TK_FEATURE_EXPLAIN_ANALYZE_CTAS);
	}
}
