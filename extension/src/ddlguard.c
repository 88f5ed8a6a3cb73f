/*
 * ddlguard.c: replicated DDL only from superusers, unless roles are
 * trusted.
 *
 * The other replicas run replicated DDL in their appliers as the role
 * that ran it (the DDL change carries it; internal/replica), but what it
 * leaves for the appliers runs there in the applier's superuser session
 * at every later apply: a column default, a CHECK constraint, an index
 * expression, a trigger set ENABLE ALWAYS. DDL by a role that is not a
 * superuser would let that role run code as a superuser on every other
 * replica, so it is refused with 42501 unless the agent recorded that
 * every role is trusted (tashkent.ddl_trust, read through
 * tashkent.role_may_replicate_ddl()).
 *
 * The check is made where ddl.c decides to replicate a statement, so it
 * covers exactly what is replicated: DDL inside DO blocks, functions and
 * procedures, and the statements no event trigger sees (roles, REASSIGN
 * OWNED). DDL on temporary objects is not replicated and not refused.
 * The role is the current user: inside a SECURITY DEFINER function, its
 * owner, as PostgreSQL's own privilege checks have it.
 */
#include "tashkent.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "tcop/utility.h"
#include "utils/acl.h"

/* tashkent.role_may_replicate_ddl(): a superuser, or roles are trusted. */
static bool
role_may_replicate_ddl(void)
{
	List	   *name = list_make2(makeString("tashkent"), makeString("role_may_replicate_ddl"));
	Oid			fn = LookupFuncName(name, 0, NULL, false);

	return DatumGetBool(OidFunctionCall0(fn));
}

/*
 * tk_ddl_guard_check raises 42501 if the current role may not replicate
 * stmt. Superusers pass without a catalog lookup.
 */
void
tk_ddl_guard_check(Node *stmt)
{
	if (superuser() || role_may_replicate_ddl())
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("tashkent replicates DDL only from superusers: role \"%s\" is not one",
					GetUserNameFromId(GetUserId(), false)),
			 errdetail("%s would be replicated. The other replicas run replicated DDL as a superuser, so code it reaches (a default, a constraint, an index expression, a trigger) would run there with superuser rights.",
					   CreateCommandName(stmt)),
			 errhint("Run DDL as a superuser, or have the agent trust every role (tashkent.ddl_trust) if every role that can run DDL is trusted as a superuser. DDL on temporary objects is allowed.")));
}
