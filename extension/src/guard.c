/*
 * guard.c: functions whose effect stays on one replica, and writes to the
 * system catalogs, refused.
 *
 * Functions. pg_notify, the server-side large object functions, advisory
 * locks and setval change nothing that tashkent replicates (a
 * notification, pg_largeobject, a lock in this server's memory, one
 * replica's sequence, which would also break its per-replica offset). In
 * a replicated database they are refused (0A000, with what to do
 * instead) for every session but the agent's applier and maintenance.
 * PostgreSQL calls object_access_hook with OAT_FUNCTION_EXECUTE whenever
 * the executor prepares a call (ExecInitFunc for function and operator
 * calls, in SQL and in PL/pgSQL expressions alike; aggregates, window
 * functions, functions in FROM, CALL; the fast-path protocol), built-ins
 * included, so a call hidden in a function, a view or a DO block is seen
 * too. The planner never pre-evaluates these: they are volatile. The
 * guarded functions are found once per backend, by name in pg_catalog;
 * the hook then costs a binary search per prepared call.
 *
 * Catalog writes. The capture triggers see writes to user tables; a
 * superuser's INSERT, UPDATE, DELETE or MERGE on a system catalog (UPDATE
 * pg_trigger SET tgenabled = 'D', which disables capture) changes this
 * replica alone. The ExecutorStart hook refuses them (42501) unless
 * tashkent.maintenance is on. A plain SELECT has no result relations:
 * the check is a test of an empty list, with no catalog access.
 *
 * The same hook calls tk_doom_check, so a doomed transaction fails at its
 * next query (ddl.c does so for utility statements).
 */
#include "tashkent.h"

#include "catalog/catalog.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "catalog/objectaccess.h"
#include "parser/parsetree.h"
#include "utils/catcache.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

typedef struct GuardedName
{
	const char *name;
	TkFeature	feature;
} GuardedName;

/* PostgreSQL 15's functions of those features (pg_proc.dat). */
static const GuardedName guarded_names[] = {
	{"pg_notify", TK_FEATURE_NOTIFICATIONS},
	{"lo_open", TK_FEATURE_LARGE_OBJECTS},
	{"lo_close", TK_FEATURE_LARGE_OBJECTS},
	{"loread", TK_FEATURE_LARGE_OBJECTS},
	{"lowrite", TK_FEATURE_LARGE_OBJECTS},
	{"lo_lseek", TK_FEATURE_LARGE_OBJECTS},
	{"lo_lseek64", TK_FEATURE_LARGE_OBJECTS},
	{"lo_tell", TK_FEATURE_LARGE_OBJECTS},
	{"lo_tell64", TK_FEATURE_LARGE_OBJECTS},
	{"lo_truncate", TK_FEATURE_LARGE_OBJECTS},
	{"lo_truncate64", TK_FEATURE_LARGE_OBJECTS},
	{"lo_creat", TK_FEATURE_LARGE_OBJECTS},
	{"lo_create", TK_FEATURE_LARGE_OBJECTS},
	{"lo_unlink", TK_FEATURE_LARGE_OBJECTS},
	{"lo_import", TK_FEATURE_LARGE_OBJECTS},
	{"lo_export", TK_FEATURE_LARGE_OBJECTS},
	{"lo_from_bytea", TK_FEATURE_LARGE_OBJECTS},
	{"lo_get", TK_FEATURE_LARGE_OBJECTS},
	{"lo_put", TK_FEATURE_LARGE_OBJECTS},
	{"pg_advisory_lock", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_advisory_lock_shared", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_advisory_unlock", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_advisory_unlock_shared", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_advisory_unlock_all", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_advisory_xact_lock", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_advisory_xact_lock_shared", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_try_advisory_lock", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_try_advisory_lock_shared", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_try_advisory_xact_lock", TK_FEATURE_ADVISORY_LOCKS},
	{"pg_try_advisory_xact_lock_shared", TK_FEATURE_ADVISORY_LOCKS},
	{"setval", TK_FEATURE_SETVAL},
	{"pg_replication_origin_session_setup", TK_FEATURE_REPLICATION_ORIGINS},
	{"pg_replication_origin_session_reset", TK_FEATURE_REPLICATION_ORIGINS},
	{"pg_replication_origin_xact_setup", TK_FEATURE_REPLICATION_ORIGINS},
	{"pg_replication_origin_xact_reset", TK_FEATURE_REPLICATION_ORIGINS},
	{"pg_replication_origin_advance", TK_FEATURE_REPLICATION_ORIGINS},
	{"pg_replication_origin_drop", TK_FEATURE_REPLICATION_ORIGINS},
};

/*
 * The most overloads of all those names: PostgreSQL 15 has 55 (two per
 * advisory lock function, three of setval, two of lo_import and of
 * lo_create's family). Room for a few more in later catalogs.
 */
#define GUARDED_FUNCTIONS_MAX 128

typedef struct GuardedFunction
{
	Oid			oid;
	TkFeature	feature;
} GuardedFunction;

static GuardedFunction guarded[GUARDED_FUNCTIONS_MAX];
static int	nguarded = 0;
static bool guarded_loaded = false;

static object_access_hook_type prev_object_access_hook = NULL;
static ExecutorStart_hook_type prev_executor_start = NULL;

static int
compare_guarded(const void *a, const void *b)
{
	Oid			x = ((const GuardedFunction *) a)->oid;
	Oid			y = ((const GuardedFunction *) b)->oid;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* Finds the guarded functions' OIDs, every overload, in pg_catalog. */
static void
load_guarded(void)
{
	nguarded = 0;				/* an earlier attempt may have failed midway */
	for (int i = 0; i < lengthof(guarded_names); i++)
	{
		CatCList   *list = SearchSysCacheList1(PROCNAMEARGSNSP, CStringGetDatum(guarded_names[i].name));

		for (int j = 0; j < list->n_members; j++)
		{
			Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(&list->members[j]->tuple);

			if (proc->pronamespace != PG_CATALOG_NAMESPACE)
				continue;
			if (nguarded >= GUARDED_FUNCTIONS_MAX)
				elog(ERROR, "tashkent: more than %d guarded functions in pg_catalog", GUARDED_FUNCTIONS_MAX);
			guarded[nguarded].oid = proc->oid;
			guarded[nguarded].feature = guarded_names[i].feature;
			nguarded++;
		}
		ReleaseSysCacheList(list);
	}
	qsort(guarded, nguarded, sizeof(GuardedFunction), compare_guarded);
	guarded_loaded = true;
}

static const GuardedFunction *
find_guarded(Oid funcid)
{
	GuardedFunction key = {.oid = funcid};

	if (!guarded_loaded)
		load_guarded();
	return bsearch(&key, guarded, nguarded, sizeof(GuardedFunction), compare_guarded);
}

/* Sessions whose effects are not replicated anyway, or replicated already. */
static bool
exempt(void)
{
	return tk_backend_is_applier || tk_maintenance;
}

static void
object_access(ObjectAccessType access, Oid classId, Oid objectId, int subId, void *arg)
{
	const GuardedFunction *g;

	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access != OAT_FUNCTION_EXECUTE)
		return;
	g = find_guarded(objectId);
	if (g == NULL || exempt() || !tk_database_replicated())
		return;
	tk_refuse_feature(g->feature);
}

/*
 * tk_guard_catalog_write refuses a write to relid if it is a system
 * catalog of a replicated database (also asked for COPY FROM, which does
 * not go through ExecutorStart). An extension's script may write its
 * catalogs: CREATE EXTENSION is replicated, and runs the script on every
 * replica.
 */
void
tk_guard_catalog_write(Oid relid)
{
	if (!IsCatalogRelationOid(relid) || exempt() || creating_extension || !tk_database_replicated())
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("cannot write to system catalog \"%s\": tashkent would not replicate the change", get_rel_name(relid)),
			 errdetail("Changes of the system catalogs reach the other replicas only as DDL statements; this one would change this replica alone, and may switch its replication off."),
			 errhint("Use the DDL statement that makes the change. For a repair on this replica only, a superuser can SET tashkent.maintenance = on (logged).")));
}

static void
executor_start(QueryDesc *queryDesc, int eflags)
{
	PlannedStmt *plan = queryDesc->plannedstmt;
	ListCell   *lc;

	tk_doom_check();
	if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0)
	{
		/* a data-modifying WITH of a SELECT has result relations too */
		foreach(lc, plan->resultRelations)
			tk_guard_catalog_write(rt_fetch(lfirst_int(lc), plan->rtable)->relid);
	}
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

void
tk_guard_init(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = object_access;
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = executor_start;
}
