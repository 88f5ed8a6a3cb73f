/*
 * tempddl.c: what a DDL statement's parse tree and the catalog say of
 * temporary objects.
 *
 * Temporary objects exist in one session of one replica. DDL on them is
 * not replicated, and DDL that would make a permanent object out of, or
 * depending on, a temporary one is refused: the other replicas would run
 * its text without the temporary object, fail, and a failed replay stops
 * that replica's applier for good.
 *
 * Most of the judgement is made after the statement ran, from what the
 * event triggers report (ddl.c, and tashkent.ddl_command_end in the
 * extension's script, which also refuses permanent objects that depend on
 * temporary ones). This file covers what they cannot see:
 *
 *   - GRANT and REVOKE, whose objects event triggers do not report, and
 *     DROP STATISTICS, whose dropped object no longer says its table;
 *   - a permanent table filled from, or shaped like, a temporary one
 *     (CREATE TABLE AS / SELECT INTO from a temporary table, LIKE a
 *     temporary table): the new table does not depend on it, but its text
 *     names it;
 *   - statements that report no object at all (CREATE TEMP TABLE IF NOT
 *     EXISTS of an existing table), by what their text declares;
 *   - the target of a CONCURRENTLY statement, whose guard must run before
 *     it commits its first transaction.
 *
 * Temporary-ness comes from the catalog (relpersistence, the object's
 * namespace), never from a name's text, except for a schema named pg_temp.
 */
#include "tashkent.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_statistic_ext.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "parser/parse_func.h"
#include "parser/parse_type.h"
#include "tcop/utility.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

static bool
is_pg_temp(const char *schema)
{
	return schema != NULL && strcmp(schema, "pg_temp") == 0;
}

/* The parse tree declares the relation temporary (TEMP, or pg_temp.name). */
static bool
declared_temporary(RangeVar *rel)
{
	return rel != NULL && (rel->relpersistence == RELPERSISTENCE_TEMP || is_pg_temp(rel->schemaname));
}

/*
 * tk_creates_temporary: the relation that a statement would create is
 * temporary: declared so, or created without a schema by a session whose
 * search_path starts with pg_temp.
 */
bool
tk_creates_temporary(RangeVar *rel)
{
	if (declared_temporary(rel))
		return true;
	if (rel->schemaname != NULL)
		return false;
	return isTempNamespace(RangeVarGetCreationNamespace(rel));
}

/*
 * tk_declared_temporary: the statement's text declares that it creates a
 * temporary relation. Asked only when the event triggers reported nothing.
 */
bool
tk_declared_temporary(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_CreateStmt:
			return declared_temporary(((CreateStmt *) stmt)->relation);
		case T_CreateTableAsStmt:
			return declared_temporary(((CreateTableAsStmt *) stmt)->into->rel);
		case T_ViewStmt:
			return declared_temporary(((ViewStmt *) stmt)->view);
		case T_CreateSeqStmt:
			return declared_temporary(((CreateSeqStmt *) stmt)->sequence);
		default:
			return false;
	}
}

static bool
relation_is_temporary(RangeVar *rel)
{
	Oid			relid = RangeVarGetRelid(rel, NoLock, true);

	return OidIsValid(relid) && get_rel_persistence(relid) == RELPERSISTENCE_TEMP;
}

static bool
namespace_is_temporary(Oid nspid)
{
	return OidIsValid(nspid) && isAnyTempNamespace(nspid);
}

static bool
type_is_temporary(TypeName *name)
{
	Oid			typid = LookupTypeNameOid(NULL, name, true);
	HeapTuple	tup;
	bool		temporary = false;

	if (!OidIsValid(typid))
		return false;
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (HeapTupleIsValid(tup))
	{
		temporary = namespace_is_temporary(((Form_pg_type) GETSTRUCT(tup))->typnamespace);
		ReleaseSysCache(tup);
	}
	return temporary;
}

static bool
schema_is_temporary(const char *name)
{
	return is_pg_temp(name) || namespace_is_temporary(get_namespace_oid(name, true));
}

/* Whether one object of a GRANT is temporary (a missing one is not). */
static bool
grant_object_is_temporary(GrantStmt *stmt, Node *object)
{
	if (stmt->targtype == ACL_TARGET_ALL_IN_SCHEMA)
		return schema_is_temporary(strVal(object));
	switch (stmt->objtype)
	{
		case OBJECT_TABLE:
		case OBJECT_SEQUENCE:
		case OBJECT_FOREIGN_TABLE:
			return relation_is_temporary((RangeVar *) object);
		case OBJECT_FUNCTION:
		case OBJECT_PROCEDURE:
		case OBJECT_ROUTINE:
			{
				Oid			funcid = LookupFuncWithArgs(stmt->objtype, (ObjectWithArgs *) object, true);

				return OidIsValid(funcid) && namespace_is_temporary(get_func_namespace(funcid));
			}
		case OBJECT_TYPE:
		case OBJECT_DOMAIN:
			return type_is_temporary(makeTypeNameFromNameList((List *) object));
		case OBJECT_SCHEMA:
			return schema_is_temporary(strVal(object));
		default:
			return false;		/* languages, servers, ...: never temporary */
	}
}

/* Whether a statistics object (named as DROP names it) is of a temporary table. */
static bool
statistics_is_temporary(List *names)
{
	Oid			statid = get_statistics_object_oid(names, true);
	HeapTuple	tup;
	bool		temporary = false;

	if (!OidIsValid(statid))
		return false;
	tup = SearchSysCache1(STATEXTOID, ObjectIdGetDatum(statid));
	if (HeapTupleIsValid(tup))
	{
		Form_pg_statistic_ext stat = (Form_pg_statistic_ext) GETSTRUCT(tup);

		temporary = get_rel_persistence(stat->stxrelid) == RELPERSISTENCE_TEMP ||
			namespace_is_temporary(stat->stxnamespace);
		ReleaseSysCache(tup);
	}
	return temporary;
}

/*
 * tk_count_unreported_targets counts the temporary and permanent objects
 * of the statements whose objects the event triggers cannot judge: GRANT
 * and REVOKE (event triggers report the command, not its objects), and
 * DROP STATISTICS (a statistics object of a temporary table may sit in a
 * permanent schema, and once dropped nothing says which table it was on;
 * tashkent.ddl_sql_drop leaves statistics objects to this function).
 * Leaves the counts alone for any other statement.
 */
void
tk_count_unreported_targets(Node *stmt, int *temporary, int *permanent)
{
	ListCell   *lc;

	if (IsA(stmt, GrantStmt))
	{
		GrantStmt  *grant = (GrantStmt *) stmt;

		if (grant->targtype == ACL_TARGET_DEFAULTS)
			return;
		foreach(lc, grant->objects)
		{
			if (grant_object_is_temporary(grant, lfirst(lc)))
				(*temporary)++;
			else
				(*permanent)++;
		}
	}
	else if (IsA(stmt, DropStmt) && ((DropStmt *) stmt)->removeType == OBJECT_STATISTIC_EXT)
	{
		foreach(lc, ((DropStmt *) stmt)->objects)
		{
			if (statistics_is_temporary((List *) lfirst(lc)))
				(*temporary)++;
			else
				(*permanent)++;
		}
	}
}

static bool
names_temporary_relation(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		return rte->rtekind == RTE_RELATION && get_rel_persistence(rte->relid) == RELPERSISTENCE_TEMP;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, names_temporary_relation, context, QTW_EXAMINE_RTES_BEFORE);
	return expression_tree_walker(node, names_temporary_relation, context);
}

static void
refuse_temporary_source(Node *stmt, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("tashkent cannot run this DDL: %s makes a permanent object that names a temporary one (%s)",
					CreateCommandName(stmt), what),
			 errdetail("tashkent replicates DDL as its text, and the other replicas do not have this session's temporary objects."),
			 errhint("Make the new object temporary too (CREATE TEMP ...), or create it from permanent objects: to copy rows of a temporary table, CREATE TABLE first, then INSERT ... SELECT (rows are replicated).")));
}

/*
 * tk_refuse_temporary_sources refuses a permanent table whose text names
 * a temporary one: CREATE TABLE AS / SELECT INTO reading it, CREATE TABLE
 * (LIKE it). The query of CREATE TABLE AS is analysed already, so its
 * relations are resolved as PostgreSQL resolved them.
 */
void
tk_refuse_temporary_sources(Node *stmt)
{
	if (IsA(stmt, CreateTableAsStmt))
	{
		CreateTableAsStmt *ctas = (CreateTableAsStmt *) stmt;

		if (!tk_creates_temporary(ctas->into->rel) && names_temporary_relation(ctas->query, NULL))
			refuse_temporary_source(stmt, "its query reads a temporary relation");
	}
	else if (IsA(stmt, CreateStmt))
	{
		CreateStmt *create = (CreateStmt *) stmt;
		ListCell   *lc;

		if (tk_creates_temporary(create->relation))
			return;
		foreach(lc, create->tableElts)
		{
			Node	   *elt = lfirst(lc);

			if (IsA(elt, TableLikeClause) && relation_is_temporary(((TableLikeClause *) elt)->relation))
				refuse_temporary_source(stmt, "LIKE a temporary table");
		}
	}
}

/*
 * tk_concurrent_target_is_temporary: the relation a CONCURRENTLY statement
 * works on is temporary (PostgreSQL then runs it without CONCURRENTLY).
 */
bool
tk_concurrent_target_is_temporary(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_IndexStmt:
			return relation_is_temporary(((IndexStmt *) stmt)->relation);
		case T_AlterTableStmt:
			return relation_is_temporary(((AlterTableStmt *) stmt)->relation);
		case T_DropStmt:
			{
				DropStmt   *drop = (DropStmt *) stmt;

				return list_length(drop->objects) == 1 &&
					relation_is_temporary(makeRangeVarFromNameList(linitial(drop->objects)));
			}
		default:
			return false;
	}
}
