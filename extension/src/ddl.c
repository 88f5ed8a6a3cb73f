/*
 * ddl.c: DDL replicated as its statement text, in the global order.
 *
 * The ProcessUtility_hook sees every utility statement of every backend:
 * the client's, and those that DO blocks, functions, procedures, event
 * triggers and extension scripts run. In a database that has the
 * extension (tk_database_replicated), for a backend that is neither the
 * agent's applier nor in maintenance:
 *
 *   1. tk_doom_check: a doomed transaction fails at its next statement
 *      (doom.c). At COMMIT, once PostgreSQL has marked the block as
 *      ending: the error then rolls the whole transaction back, as any
 *      failed commit does, rather than leaving an aborted block for the
 *      client to roll back. Never at ROLLBACK, which must always work.
 *   2. What the statement is (stmtkind.c): local, checked then local
 *      (refusals of unreplicated.c, SERIALIZABLE mapped by isolation.c),
 *      or DDL. Reading the parse tree only: BEGIN, COMMIT, SET and the
 *      other local statements cost no catalog access.
 *   3. DDL at the outermost level is captured (tk_capture_ddl) as its own
 *      text (one statement of a multi-statement string, by the parse
 *      tree's location and length), with the version its snapshot saw,
 *      taken before it runs: it is certified from that version (commit.c),
 *      so any version it did not see is a conflict. DDL that runs inside a
 *      captured statement (event triggers' work, CREATE SCHEMA's
 *      subcommands, tashkent's own trigger installation, an extension's
 *      script) is not captured again: the other replicas run it when they
 *      run the outer text. DDL inside DO blocks, functions and procedures
 *      has no DDL around it, so it is captured; the DO or CALL itself is
 *      not (Postgres-R(SI) §5.1: the writeset carries DDL as its text).
 *
 * Temporary objects. Whether a statement touched permanent or temporary
 * objects is decided after it ran, from what PostgreSQL's event triggers
 * report: tashkent.ddl_command_end and tashkent.ddl_sql_drop (enabled
 * ALWAYS, in the extension's script) count the objects by what the
 * catalog says of them and report the counts through
 * tashkent.note_ddl_objects. So every statement is judged by the objects
 * it actually touched (a table name that a temporary table shadows, a
 * view PostgreSQL made temporary because it reads one, a statistics
 * object of a temporary table in a permanent schema), not by its text.
 * Then: only temporary objects: local; both: refused (0A000), since
 * neither running it here alone nor everywhere is right; permanent ones,
 * or none reported (roles, which fire no event trigger; an IF EXISTS that
 * found nothing) unless the text declares a temporary relation:
 * replicated. tempddl.c covers what event triggers do not report (GRANT's
 * objects, a dropped statistics object's table) and permanent objects
 * that name temporary ones.
 *
 * CONCURRENTLY. CREATE/DROP INDEX CONCURRENTLY and DETACH PARTITION ...
 * CONCURRENTLY commit transactions of their own as they go; the statement
 * is captured after it ran, into the last of them, which certifies it.
 * The applier runs the text inside its apply transaction, where
 * CONCURRENTLY is not allowed: for it the parse tree is rewritten to the
 * blocking form. So the origin builds the index concurrently, the other
 * replicas with a lock that blocks writes to the table meanwhile. Its
 * label is taken before the build, so under a write load a long build
 * fails certification (40001); as any failed CREATE INDEX CONCURRENTLY,
 * it leaves an invalid index behind on the origin, which DROP INDEX
 * removes (replicated, with IF EXISTS harmless elsewhere).
 */
#include "tashkent.h"

#include "catalog/namespace.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "catalog/pg_namespace.h"
#include "miscadmin.h"
#include "utils/syscache.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "parser/scansup.h"
#include "tcop/utility.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(tashkent_note_ddl_objects);

static ProcessUtility_hook_type prev_process_utility = NULL;

/* DDL statements in progress in this backend; 0 outside any. */
static int	ddl_depth = 0;

/*
 * The transaction ran DDL, replicated or not (the applier's included): its
 * commit tells the commit order (tk_turn_pass), since DDL need not wait
 * for the locks of the transactions it affects (commit.c).
 */
static bool ddl_ran = false;

bool
tk_ddl_ran(void)
{
	return ddl_ran;
}

void
tk_ddl_xact_end(void)
{
	ddl_ran = false;
}

/* Objects the event triggers reported for the outermost one. */
static int	noted_temporary = 0;
static int	noted_permanent = 0;

static void
run_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
}

/* Runs a DDL statement; DDL it runs in turn is nested in it. */
static void
run_ddl(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
		ProcessUtilityContext context, ParamListInfo params,
		QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	ddl_depth++;
	PG_TRY();
	{
		run_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		ddl_depth--;
	}
	PG_END_TRY();
}

/* The newest version the statement's snapshot sees. */
static uint64
statement_version(void)
{
	return tk_snapshot_version(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
}

/*
 * The statement's own text: its part of a multi-statement string, without
 * the white space around it (comments before it are kept).
 */
static const char *
statement_text(PlannedStmt *pstmt, const char *queryString, int *len)
{
	const char *text = queryString;
	int			n;

	if (pstmt->stmt_location > 0)
		text += pstmt->stmt_location;
	n = pstmt->stmt_len > 0 ? pstmt->stmt_len : (int) strlen(text);
	while (n > 0 && scanner_isspace(*text))
	{
		text++;
		n--;
	}
	while (n > 0 && scanner_isspace(text[n - 1]))
		n--;
	*len = n;
	return text;
}

static void
refuse_mixed(Node *stmt)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("tashkent cannot run this DDL: %s acts on temporary and permanent objects at once",
					CreateCommandName(stmt)),
			 errdetail("Temporary objects exist on this replica only, so DDL on them is not replicated; DDL on permanent objects must reach every replica."),
			 errhint("Run it as two statements: one for the temporary objects (qualified with pg_temp), one for the permanent ones.")));
}

/*
 * The schemas the statement resolves its names in: the session's
 * search_path as it stands (a role's "$user" resolved), each schema quoted,
 * without this session's temporary schema, which the other replicas do not
 * have. The applier runs the text under the same path: the same unqualified
 * name creates or finds the same object there.
 */
static char *
effective_search_path(void)
{
	StringInfoData buf;
	List	   *schemas = fetch_search_path(false);
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, schemas)
	{
		Oid			schema = lfirst_oid(lc);
		char	   *name;

		if (isAnyTempNamespace(schema) || (name = get_namespace_name(schema)) == NULL)
			continue;
		if (buf.len > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, quote_identifier(name));
	}
	list_free(schemas);
	return buf.data;
}

/*
 * TRUNCATE ... RESTART IDENTITY restarts the tables' sequences at their
 * start, here only (the other replicas apply a TRUNCATE): this replica's
 * offset among the replicas would be lost, and its values would collide
 * with theirs. The sequences are aligned again at once, as after any DDL
 * that restarts one.
 */
static bool
restarts_identity(Node *stmt)
{
	return IsA(stmt, TruncateStmt) && ((TruncateStmt *) stmt)->restart_seqs &&
		!tk_backend_is_applier && !tk_maintenance && tk_database_replicated();
}

static void
realign_sequences(void)
{
	Oid			saved_user;
	int			saved_context;
	HeapTuple	schema = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(get_namespace_oid("tashkent", false)));
	Oid			owner;

	if (!HeapTupleIsValid(schema))
		elog(ERROR, "tashkent: schema tashkent not found");
	owner = ((Form_pg_namespace) GETSTRUCT(schema))->nspowner;
	ReleaseSysCache(schema);

	/* as tashkent's owner: the role that truncated may not call it */
	GetUserIdAndSecContext(&saved_user, &saved_context);
	SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	SPI_connect();
	if (SPI_execute("SELECT tashkent.align_all_sequences()", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "tashkent: could not align the sequences after TRUNCATE ... RESTART IDENTITY");
	SPI_finish();
	SetUserIdAndSecContext(saved_user, saved_context);
}

/* Runs an outermost DDL statement and captures it unless it stays local. */
static void
replicate_ddl(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			  ProcessUtilityContext context, ParamListInfo params,
			  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	bool		concurrent = tk_utility_is_concurrent(stmt);
	int			temporary = 0;
	int			permanent = 0;
	uint64		label;
	const char *text;
	int			len;
	char	   *search_path;
	char	   *role;

	tk_protect_replication(stmt);
	tk_refuse_unreplicated(stmt);
	tk_refuse_temporary_sources(stmt);
	tk_count_unreported_targets(stmt, &temporary, &permanent);
	if (concurrent && !tk_concurrent_target_is_temporary(stmt))
		tk_ddl_guard_check(stmt);	/* it commits as it goes: judge it first */
	label = statement_version();
	search_path = effective_search_path();
	role = GetUserNameFromId(GetUserId(), false);

	noted_temporary = temporary;
	noted_permanent = permanent;
	run_ddl(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);

	if (noted_temporary > 0 && noted_permanent > 0)
		refuse_mixed(stmt);
	if (noted_permanent == 0 && (noted_temporary > 0 || tk_declared_temporary(stmt)))
		return;
	if (!concurrent)
		tk_ddl_guard_check(stmt);
	text = statement_text(pstmt, queryString, &len);
	tk_capture_ddl(text, len, search_path, role, label);
}

/* The applier runs a CONCURRENTLY statement in its blocking form. */
static PlannedStmt *
blocking_form(PlannedStmt *pstmt, bool *readOnlyTree)
{
	if (!tk_utility_is_concurrent(pstmt->utilityStmt))
		return pstmt;
	if (*readOnlyTree)
	{
		pstmt = copyObject(pstmt);
		*readOnlyTree = false;
	}
	tk_utility_clear_concurrent(pstmt->utilityStmt);
	return pstmt;
}

/* A statement that stays local once checked: refused, or rewritten. */
static PlannedStmt *
checked_local(PlannedStmt *pstmt, bool *readOnlyTree)
{
	tk_refuse_unreplicated(pstmt->utilityStmt);
	if (!tk_asks_serializable(pstmt->utilityStmt))
		return pstmt;
	if (*readOnlyTree)
	{
		pstmt = copyObject(pstmt);
		*readOnlyTree = false;
	}
	tk_map_serializable(pstmt->utilityStmt);
	return pstmt;
}

/* Where a doomed transaction fails, for this statement (see above). */
typedef enum DoomCheck
{
	DOOM_CHECK_BEFORE,
	DOOM_CHECK_AFTER,
	DOOM_CHECK_NEVER
} DoomCheck;

static DoomCheck
doom_check_point(Node *stmt)
{
	if (!IsA(stmt, TransactionStmt))
		return DOOM_CHECK_BEFORE;
	switch (((TransactionStmt *) stmt)->kind)
	{
		case TRANS_STMT_COMMIT:
		case TRANS_STMT_PREPARE:
			return DOOM_CHECK_AFTER;
		case TRANS_STMT_ROLLBACK:
		case TRANS_STMT_ROLLBACK_PREPARED:
			return DOOM_CHECK_NEVER;
		default:
			return DOOM_CHECK_BEFORE;
	}
}

static void
process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				ProcessUtilityContext context, ParamListInfo params,
				QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	DoomCheck	doom = doom_check_point(pstmt->utilityStmt);
	TkUtilityKind kind;

	if (doom == DOOM_CHECK_BEFORE)
		tk_doom_check();
	kind = tk_utility_kind(pstmt->utilityStmt);
	if (kind == TK_UTILITY_DDL)
		ddl_ran = true;
	if (kind == TK_UTILITY_LOCAL)
	{
		run_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		if (doom == DOOM_CHECK_AFTER)
			tk_doom_check();
		if (restarts_identity(pstmt->utilityStmt))
			realign_sequences();
		return;
	}

	/*
	 * Nested DDL, and the extension's own script (whose statements find the
	 * extension installed before the script has made it so).
	 */
	if (kind == TK_UTILITY_OWN_EXTENSION ||
		(kind == TK_UTILITY_DDL && (ddl_depth > 0 || creating_extension)))
	{
		run_ddl(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		return;
	}
	if (tk_backend_is_applier)
	{
		if (kind == TK_UTILITY_DDL)
			pstmt = blocking_form(pstmt, &readOnlyTree);
		run_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		return;
	}
	if (tk_sets_maintenance_on(pstmt->utilityStmt))
	{
		run_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		if (tk_maintenance && tk_database_replicated())
			tk_log_maintenance_on();
		return;
	}
	if (tk_maintenance || !tk_database_replicated())
	{
		run_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		return;
	}
	if (kind == TK_UTILITY_CHECKED)
	{
		pstmt = checked_local(pstmt, &readOnlyTree);
		run_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		return;
	}
	replicate_ddl(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
}

/*
 * tashkent.note_ddl_objects(temporary, permanent): the event triggers'
 * report of the objects a DDL command touched (see above). Only they call
 * it (no grant to PUBLIC); outside an outermost DDL statement the counts
 * are reset before they are read.
 */
Datum
tashkent_note_ddl_objects(PG_FUNCTION_ARGS)
{
	noted_temporary += PG_GETARG_INT32(0);
	noted_permanent += PG_GETARG_INT32(1);
	if (PG_GETARG_INT32(2) > 0)
		tk_protect_own_objects();
	PG_RETURN_VOID();
}

void
tk_ddl_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = process_utility;
}
