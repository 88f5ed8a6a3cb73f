/*
 * isolation.c: SERIALIZABLE asked for is mapped to REPEATABLE READ.
 *
 * tashkent gives snapshot isolation across replicas (generalized snapshot
 * isolation, BRIEF.md): certification compares writesets, never reads, so
 * PostgreSQL's serializable checks on one replica would protect nothing
 * against a transaction of another. A transaction that asks for
 * SERIALIZABLE runs at REPEATABLE READ, and the session hears so once.
 * READ COMMITTED stays READ COMMITTED: commit.c explains why certifying it
 * from the replica's version at commit gives it the semantics it has on
 * one server.
 *
 * The places a level is asked for by a statement: BEGIN / START
 * TRANSACTION ISOLATION LEVEL, SET TRANSACTION, SET SESSION
 * CHARACTERISTICS AS TRANSACTION, SET [LOCAL|SESSION]
 * [default_]transaction_isolation. Others (set_config, a role's or the
 * database's default, PGOPTIONS) are not rewritten; commit.c runs the
 * serializable check of such a transaction before certifying it.
 */
#include "tashkent.h"

#include "nodes/parsenodes.h"

#define MAPPED_LEVEL "repeatable read"

/* The session has been told (once per session is enough). */
static bool notice_sent = false;

/* A constant that names SERIALIZABLE (the grammar lower-cases keywords). */
static bool
names_serializable(Node *arg)
{
	A_Const    *con;

	if (arg == NULL || !IsA(arg, A_Const))
		return false;
	con = (A_Const *) arg;
	if (con->isnull || !IsA(&con->val, String))
		return false;
	return pg_strcasecmp(strVal(&con->val), "serializable") == 0;
}

/* The transaction_isolation DefElem of a transaction mode list. */
static DefElem *
isolation_option(List *options)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = lfirst_node(DefElem, lc);

		if (strcmp(def->defname, "transaction_isolation") == 0)
			return def;
	}
	return NULL;
}

/* The constant that asks for SERIALIZABLE, or NULL. */
static A_Const *
serializable_constant(Node *stmt)
{
	DefElem    *def = NULL;

	if (IsA(stmt, TransactionStmt))
	{
		TransactionStmt *t = (TransactionStmt *) stmt;

		if (t->kind == TRANS_STMT_BEGIN || t->kind == TRANS_STMT_START)
			def = isolation_option(t->options);
	}
	else if (IsA(stmt, VariableSetStmt))
	{
		VariableSetStmt *v = (VariableSetStmt *) stmt;

		if (v->kind == VAR_SET_MULTI &&
			(strcmp(v->name, "TRANSACTION") == 0 || strcmp(v->name, "SESSION CHARACTERISTICS") == 0))
			def = isolation_option(v->args);
		else if (v->kind == VAR_SET_VALUE && v->args != NIL &&
				 (strcmp(v->name, "transaction_isolation") == 0 ||
				  strcmp(v->name, "default_transaction_isolation") == 0) &&
				 names_serializable(linitial(v->args)))
			return linitial_node(A_Const, v->args);
	}
	if (def != NULL && names_serializable(def->arg))
		return (A_Const *) def->arg;
	return NULL;
}

/* tk_asks_serializable: the statement asks for SERIALIZABLE. */
bool
tk_asks_serializable(Node *stmt)
{
	return serializable_constant(stmt) != NULL;
}

/*
 * tk_map_serializable rewrites such a statement to ask for REPEATABLE
 * READ. The caller gives a tree it may change (a copy, if it was
 * read-only).
 */
void
tk_map_serializable(Node *stmt)
{
	A_Const    *con = serializable_constant(stmt);

	if (con == NULL)
		return;
	con->val.sval.sval = pstrdup(MAPPED_LEVEL);
	if (notice_sent)
		return;
	notice_sent = true;
	ereport(NOTICE,
			(errmsg("tashkent runs every transaction at snapshot isolation across replicas (generalized snapshot isolation); SERIALIZABLE is mapped to REPEATABLE READ"),
			 errdetail("Write skew is possible, as under PostgreSQL's REPEATABLE READ. See docs/GUARANTEES.md.")));
}
