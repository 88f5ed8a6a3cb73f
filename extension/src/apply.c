/*
 * apply.c: the SQL functions of the extension (sql/tashkent--1.0.sql
 * declares them and grants who may call them).
 *
 *   tashkent.committed_version()       the replica's version, any role
 *   tashkent.register_applier()        the agent's apply session says who
 *                                      it is (channel.c); returns the new
 *                                      agent generation
 *   tashkent.apply_versions(f, l)      the current transaction of the
 *                                      applier commits versions f..l
 *   tashkent.backends()                every backend's slot (shmem.c)
 *   tashkent.set_admitting(b, reason)  the admission gate (admit.c)
 *   tashkent.set_catch_up_target(v)    clients wait for v first (causal.c)
 *   tashkent.set_write_refusal(why)    clients' writes refused while the
 *                                      replica cannot apply (causal.c)
 *   tashkent.status()                  the shared state, one row
 */
#include "tashkent.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

bool		tk_backend_is_applier = false;
uint64		tk_apply_first = 0;
uint64		tk_apply_last = 0;

PG_FUNCTION_INFO_V1(tashkent_committed_version);
PG_FUNCTION_INFO_V1(tashkent_register_applier);
PG_FUNCTION_INFO_V1(tashkent_apply_versions);
PG_FUNCTION_INFO_V1(tashkent_backends);
PG_FUNCTION_INFO_V1(tashkent_set_admitting);
PG_FUNCTION_INFO_V1(tashkent_set_catch_up_target);
PG_FUNCTION_INFO_V1(tashkent_set_write_refusal);
PG_FUNCTION_INFO_V1(tashkent_status);

Datum
tashkent_committed_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64((int64) tk_committed());
}

Datum
tashkent_register_applier(PG_FUNCTION_ARGS)
{
	uint64		generation;

	tk_channel_register_applier();
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	generation = ++tk_shared->agent_generation;
	tk_shared->applier_pid = MyProcPid;
	LWLockRelease(tk_shared->lock);
	tk_backend_is_applier = true;
	PG_RETURN_INT64((int64) generation);
}

/*
 * Versions are applied neither in a rewind's undo nor between its
 * rewind_begin and its finish (rewind.c), nor while a marker left by a
 * stop between the two says a finish is due: they would commit on rows
 * that are being taken back to another version.
 */
static void
refuse_during_rewind(void)
{
	bool		rewinding;
	uint64		target;

	if (tk_rewind_in_xact())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this transaction rewinds the replica; it applies no versions")));
	tk_rewind_refuse_pending_marker();
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	rewinding = tk_shared->rewinding;
	target = tk_shared->rewind_target;
	LWLockRelease(tk_shared->lock);
	if (rewinding)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the replica is being rewound to version %llu; no version applies until the rewind finishes",
						(unsigned long long) target),
				 errhint("%s", TK_REWIND_UNDER_WAY_HINT)));
}

Datum
tashkent_apply_versions(PG_FUNCTION_ARGS)
{
	int64		first = PG_GETARG_INT64(0);
	int64		last = PG_GETARG_INT64(1);
	uint64		committed;

	if (!tk_backend_is_applier)
		ereport(ERROR,
				(errcode(ERRCODE_TK_NOT_APPLIER),
				 errmsg("only the tashkent agent's applier applies versions"),
				 errhint("Writes to replicated tables are certified at commit; no one else records versions.")));
	if (first < 1 || last < first)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid version range %lld..%lld", (long long) first, (long long) last)));
	if (tk_apply_first != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this transaction already applies versions %llu..%llu",
						(unsigned long long) tk_apply_first, (unsigned long long) tk_apply_last)));
	refuse_during_rewind();
	committed = tk_committed();
	if ((uint64) first <= committed)
		ereport(ERROR,
				(errcode(ERRCODE_TK_ALREADY_COMMITTED),
				 errmsg("version %lld is already committed on this replica (its version is %llu)",
						(long long) first, (unsigned long long) committed)));
	(void) GetTopTransactionId();	/* the commit must write its record */
	tk_apply_first = (uint64) first;
	tk_apply_last = (uint64) last;
	PG_RETURN_VOID();
}

static const char *
state_name(TkSlotState state)
{
	switch (state)
	{
		case TK_SLOT_IDLE:
			return "idle";
		case TK_SLOT_CERTIFYING:
			return "certifying";
		case TK_SLOT_HOLDING:
			return "holding";
		case TK_SLOT_COMMITTING:
			return "committing";
		case TK_SLOT_APPLYING:
			return "applying";
	}
	return "unknown";
}

static const char *
doom_name(TkDoomReason reason)
{
	switch (reason)
	{
		case TK_DOOM_NONE:
			return NULL;
		case TK_DOOM_BLOCKER:
			return "blocker";
		case TK_DOOM_WAITER:
			return "waiter";
		case TK_DOOM_DISPLACED:
			return "displaced";
	}
	return "unknown";
}

/*
 * backends: pid, state, first, version, waiting_for, agent_generation,
 * doomed. A copy under the lock, so that every row is one moment's.
 */
Datum
tashkent_backends(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TkSlot	   *copy;
	int			n = 0;

	InitMaterializedSRF(fcinfo, 0);
	copy = palloc(sizeof(TkSlot) * tk_shared->nslots);
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	for (int i = 0; i < tk_shared->nslots; i++)
		if (tk_shared->slots[i].pid != 0)
			copy[n++] = tk_shared->slots[i];
	LWLockRelease(tk_shared->lock);

	for (int i = 0; i < n; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {false};
		const char *doomed = doom_name(copy[i].doom_reason);

		values[0] = Int32GetDatum(copy[i].pid);
		values[1] = CStringGetTextDatum(state_name(copy[i].state));
		values[2] = Int64GetDatum((int64) copy[i].first);
		values[3] = Int64GetDatum((int64) copy[i].version);
		values[4] = Int64GetDatum((int64) copy[i].waiting_for);
		values[5] = Int64GetDatum((int64) copy[i].agent_generation);
		if (doomed != NULL)
			values[6] = CStringGetTextDatum(doomed);
		else
			nulls[6] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

Datum
tashkent_set_admitting(PG_FUNCTION_ARGS)
{
	bool		admitting = PG_GETARG_BOOL(0);
	char	   *reason = PG_ARGISNULL(1) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(1));

	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	tk_shared->admitting = admitting;
	strlcpy(tk_shared->admit_reason, reason, sizeof(tk_shared->admit_reason));
	LWLockRelease(tk_shared->lock);
	PG_RETURN_VOID();
}

Datum
tashkent_set_catch_up_target(PG_FUNCTION_ARGS)
{
	int64		version = PG_GETARG_INT64(0);

	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	tk_shared->catch_up_target = version > 0 ? (uint64) version : 0;
	LWLockRelease(tk_shared->lock);
	PG_RETURN_VOID();
}

/* set_write_refusal(why): why clients' writes are refused; '' lifts it. */
Datum
tashkent_set_write_refusal(PG_FUNCTION_ARGS)
{
	char	   *why = text_to_cstring(PG_GETARG_TEXT_PP(0));

	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	strlcpy(tk_shared->write_refusal, why, sizeof(tk_shared->write_refusal));
	LWLockRelease(tk_shared->lock);
	PG_RETURN_VOID();
}

/*
 * status: committed, floor, agent_generation, applier_pid, admitting,
 * reason, incarnation (of the shared memory: the agent tells a crash
 * restart, which keeps the postmaster and its start time, by it).
 */
Datum
tashkent_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[7];
	bool		nulls[7] = {false};
	uint64		committed = tk_committed();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "tashkent.status: return type must be a row type");
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	values[0] = Int64GetDatum((int64) committed);
	values[1] = Int64GetDatum((int64) tk_shared->floor);
	values[2] = Int64GetDatum((int64) tk_shared->agent_generation);
	values[3] = Int32GetDatum(tk_shared->applier_pid);
	values[4] = BoolGetDatum(tk_shared->admitting);
	values[5] = CStringGetTextDatum(tk_shared->admit_reason);
	values[6] = Int64GetDatum((int64) tk_shared->incarnation);
	LWLockRelease(tk_shared->lock);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
