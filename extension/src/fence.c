/*
 * fence.c: while the agent rewinds the replica, clients' transactions are
 * refused.
 *
 * Before a rewind (rewind.c) the agent ends every client transaction that
 * may have read a version that failed, and every backend in the commit
 * order, which rewind_begin refuses to run beside. A client that begins a
 * transaction meanwhile may read a failed version, or certify and take a
 * turn; clients that reconnect and retry at once keep the set of
 * transactions to end from ever emptying. So the agent raises a fence
 * (tashkent.raise_rewind_fence) before it lists the transactions to end,
 * and lowers it once the rewind finished or was given up
 * (tashkent.lower_rewind_fence). While it stands, in the client backends
 * of its database, BEGIN and every statement that takes a snapshot
 * (plannable statements at executor start, utility statements that need
 * one: causal.c's hooks ask tk_fence_check) fail with 57P03. Statements that read nothing (SET, SHOW, COMMIT,
 * ROLLBACK) go on, so a session can end its transaction.
 *
 * The agent's sessions pass: they connect with tashkent.agent_session on,
 * which only a superuser may set, and only at connection start, so a
 * client of the same role that merely names itself like the agent does not.
 * So do sessions with tashkent.maintenance on (superusers): the way out
 * while no agent runs. A fence outlives the agent that raised it, as the
 * admission gate does: the next agent lowers it as it starts, before it
 * rewinds again if it must.
 *
 * The check costs a memory barrier and an atomic read per statement. The
 * barrier orders it after the backend's report of its transaction's start
 * (pg_stat_activity's xact_start, set before the first statement runs),
 * and raise_rewind_fence has one after its write: a backend that sees no
 * fence is in a transaction that the agent's listing, which follows the
 * raise, sees.
 */
#include "tashkent.h"

#include "miscadmin.h"

PG_FUNCTION_INFO_V1(tashkent_raise_rewind_fence);
PG_FUNCTION_INFO_V1(tashkent_lower_rewind_fence);

/* Sessions the fence lets through. */
static bool
passes_fence(void)
{
	return tk_agent_session || tk_backend_is_applier || tk_maintenance || MyBackendType != B_BACKEND;
}

/*
 * tk_fence_check refuses the statement if the fence stands in this
 * database and the session does not pass it. Called by causal.c's hooks
 * for BEGIN, utility statements that need a snapshot and executor starts.
 */
void
tk_fence_check(void)
{
	uint64		target;

	if (tk_shared == NULL)
		return;
	pg_memory_barrier();
	if (pg_atomic_read_u32(&tk_shared->fence_raised) == 0 || passes_fence())
		return;
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	if (pg_atomic_read_u32(&tk_shared->fence_raised) == 0 || tk_shared->fence_database != MyDatabaseId)
	{
		LWLockRelease(tk_shared->lock);
		return;
	}
	target = tk_shared->fence_target;
	LWLockRelease(tk_shared->lock);
	ereport(ERROR,
			(errcode(ERRCODE_CANNOT_CONNECT_NOW),
			 errmsg("this replica is rewinding versions that failed: it goes back to version %llu or below",
					(unsigned long long) target),
			 errdetail("A transaction that began now could read a version that failed; its tashkent agent refuses them until the rewind finishes."),
			 errhint("Retry in a moment (a rewind takes milliseconds to seconds), or connect to another replica.")));
}

/*
 * tashkent.raise_rewind_fence(target): clients' transactions in this
 * database are refused, the rewind going to version target or below.
 * Superusers only (no grant).
 */
Datum
tashkent_raise_rewind_fence(PG_FUNCTION_ARGS)
{
	int64		target = PG_GETARG_INT64(0);

	if (target < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid rewind target version %lld", (long long) target)));
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	tk_shared->fence_database = MyDatabaseId;
	tk_shared->fence_target = (uint64) target;
	pg_atomic_write_u32(&tk_shared->fence_raised, 1);
	LWLockRelease(tk_shared->lock);
	pg_memory_barrier();
	PG_RETURN_VOID();
}

/* tashkent.lower_rewind_fence(): clients' transactions go on. */
Datum
tashkent_lower_rewind_fence(PG_FUNCTION_ARGS)
{
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	pg_atomic_write_u32(&tk_shared->fence_raised, 0);
	tk_shared->fence_database = InvalidOid;
	tk_shared->fence_target = 0;
	LWLockRelease(tk_shared->lock);
	PG_RETURN_VOID();
}
