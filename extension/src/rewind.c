/*
 * rewind.c: the replica goes back to an earlier version of the global
 * order.
 *
 * Under eventual durability (Kashi, "Eventual Durability", §2.2) a
 * transaction is visible at its commit point and durable later; one whose
 * durability never comes fails, and a failed transaction stops being
 * visible (§2.2.1, property 3). What survives is the committed projection
 * of the history (Def. 2.2.1), so a replica must keep nothing of a failed
 * one, nor of any transaction that read from it (Def. 2.2.2: those fail
 * too, §2.2.1 property 4). Versions fail as a suffix: the certifier loses
 * every version after the last durable one, and reuses their numbers. A
 * replica that committed the failed versions (C, v] goes back to a version
 * k <= C and replays (k, C] from the log.
 *
 * The agent undoes the rows (internal/replica/undo.go): it reads the
 * rows of every key that (k, v] wrote through a snapshot it kept pinned at
 * k, and writes them back in one transaction of its applier:
 *
 *   BEGIN
 *   SELECT tashkent.rewind_begin(k, v)    -- the barrier; inserts the marker
 *   DELETE / INSERT rows as they were at k
 *   DELETE FROM tashkent.history WHERE first_version > k
 *   COMMIT                                -- synchronous_commit = on
 *   SELECT tashkent.rewind_finish(k)
 *
 * That transaction records no version (it is no apply transaction), and
 * the applier's writes are never captured (capture.c), so it is not
 * certified either. rewind_begin checks that nothing else is in the commit
 * order (the barrier) and closes the turn: from then until rewind_finish,
 * a transaction that reaches its turn waits (tk_rewind_holds_turn), and
 * apply_versions is refused. The marker (a row of tashkent.rewind) commits
 * with the undo.
 *
 * rewind_finish then moves what says which versions this replica holds
 * back to k: the progress of the replication origin (PostgreSQL's commit
 * path only moves it forward, so it is set back as
 * pg_replication_origin_advance does, WAL-logged, which crash recovery
 * replays in order with the commits around it), and in shared memory the
 * committed version, the floor (versions up to k are visible to every
 * snapshot taken from now on) and the ring of recent versions. It deletes
 * the marker; the turn opens when its transaction commits. A crash between the undo's commit and
 * rewind_finish leaves the marker: the agent calls rewind_finish again at
 * start, which does the same again (it is idempotent). Until it does, the
 * first apply_versions after the restart finds the marker and closes the
 * turn again (tk_rewind_refuse_pending_marker).
 *
 * From rewind_begin to the finish's commit, the replica counts its version
 * as at most the target (tk_committed_locked): a session that waits for a
 * version above it waits for the versions applied again after the
 * rewind, and tashkent.snapshot_version() is refused.
 */
#include "tashkent.h"

#include "access/xact.h"
#include "catalog/pg_replication_origin.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(tashkent_rewind_begin);
PG_FUNCTION_INFO_V1(tashkent_rewind_finish);

/* The current transaction called rewind_begin. */
static bool rewind_in_xact = false;

/* The current transaction called rewind_finish: its commit opens the turn. */
static bool finish_in_xact = false;

static const char *
slot_state_name(TkSlotState state)
{
	switch (state)
	{
		case TK_SLOT_IDLE:
			return "idle";
		case TK_SLOT_CERTIFYING:
			return "waiting for its certification";
		case TK_SLOT_HOLDING:
			return "waiting for its commit turn";
		case TK_SLOT_COMMITTING:
			return "committing";
		case TK_SLOT_APPLYING:
			return "applying versions";
	}
	return "in the commit order";
}

/*
 * refuse_unless_barrier raises 55006 if a backend other than this one is
 * in the commit order: certifying (it would hold a version next), holding
 * a version, committing one, or applying. Called with tk_shared->lock
 * held; releases it before raising.
 */
static void
refuse_unless_barrier(const char *what)
{
	for (int i = 0; i < tk_shared->nslots; i++)
	{
		TkSlot	   *slot = &tk_shared->slots[i];

		if (slot->pid != 0 && slot->pid != MyProcPid && slot->state != TK_SLOT_IDLE)
		{
			int			pid = slot->pid;
			TkSlotState state = slot->state;
			uint64		version = slot->version;

			LWLockRelease(tk_shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot %s: backend %d is %s (version %llu)",
							what, pid, slot_state_name(state), (unsigned long long) version),
					 errdetail("A rewind runs only while no transaction is in the replica's commit order."),
					 errhint("End the transactions that hold or wait for a version first (the tashkent agent does before it rewinds).")));
		}
	}
}

/*
 * lock_committed takes tk_shared->lock and returns the replica's version
 * (read from the origin's progress first, after a restart).
 */
static uint64
lock_committed(void)
{
	(void) tk_committed();
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	return tk_shared->committed;
}

/* close_turn closes the turn for a rewind to target; releases the lock. */
static void
close_turn(uint64 target)
{
	tk_shared->rewinding = true;
	tk_shared->rewind_target = target;
	LWLockRelease(tk_shared->lock);
}

/* wake_turn_waiters wakes every backend that waits in the commit order. */
static void
wake_turn_waiters(void)
{
	for (int i = 0; i < tk_shared->nslots; i++)
	{
		TkSlot	   *slot = &tk_shared->slots[i];

		if (slot->pid != 0 && slot->waiting_for != 0)
			SetLatch(slot->latch);
	}
}

/*
 * tk_rewind_holds_turn: a rewind has begun and not finished, so no version
 * may take its turn. Called with tk_shared->lock held.
 */
bool
tk_rewind_holds_turn(void)
{
	return tk_shared->rewinding;
}

/* tk_rewind_in_xact: the current transaction is a rewind's undo. */
bool
tk_rewind_in_xact(void)
{
	return rewind_in_xact;
}

/*
 * tk_rewind_or_finish_in_xact: the current transaction is a rewind's undo
 * or its finish (neither may be prepared: the turn opens or stays closed
 * at the transaction's end, which a prepared transaction postpones).
 */
bool
tk_rewind_or_finish_in_xact(void)
{
	return rewind_in_xact || finish_in_xact;
}

/*
 * tk_rewind_xact_end: the transaction ends. The turn opens again when a
 * rewind's undo aborts (it committed nothing, and no marker) and when a
 * rewind's finish commits (its marker is gone). It stays closed when an
 * undo commits (until the finish), and when a finish aborts: its marker
 * is back, versions committed now could be taken away by the next finish.
 */
void
tk_rewind_xact_end(bool committed)
{
	bool		open = (rewind_in_xact && !committed) || (finish_in_xact && committed);

	rewind_in_xact = finish_in_xact = false;
	if (!open)
		return;
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	tk_shared->rewinding = false;
	tk_shared->rewind_target = 0;
	wake_turn_waiters();
	LWLockRelease(tk_shared->lock);
}

/*
 * refuse_in_subtransaction: rewind_begin and rewind_finish change shared
 * state that no rollback takes back (the turn closed; the origin and the
 * version set back), so they run at the top level, where the transaction's
 * end alone says whether their marker change committed.
 */
static void
refuse_in_subtransaction(const char *what)
{
	if (GetCurrentTransactionNestLevel() > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s cannot run in a subtransaction (a savepoint, or a PL/pgSQL block with EXCEPTION)", what),
				 errdetail("What it changes outside the transaction would outlive a rollback to the savepoint.")));
}

/* pending_rewind reads the marker: false if there is none. Within SPI. */
static bool
pending_rewind(uint64 *target, uint64 *from)
{
	bool		isnull;

	if (SPI_execute("SELECT r.target_version, r.from_version FROM tashkent.rewind AS r", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "tashkent: could not read tashkent.rewind");
	if (SPI_processed == 0)
		return false;
	*target = (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*from = (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

static void
check_versions(int64 target, int64 from)
{
	if (target < 0 || from < target)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid rewind from version %lld to version %lld", (long long) from, (long long) target)));
}

/* refuse_pending refuses a new rewind while a marker is left. Within SPI. */
static void
refuse_pending(void)
{
	uint64		pending_target,
				pending_from;

	if (pending_rewind(&pending_target, &pending_from))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a rewind from version %llu to version %llu is pending: its undo committed, its finish did not",
						(unsigned long long) pending_from, (unsigned long long) pending_target),
				 errhint("Finish it first: SELECT tashkent.rewind_finish(%llu).", (unsigned long long) pending_target)));
}

/* insert_marker records the rewind in tashkent.rewind. Within SPI. */
static void
insert_marker(uint64 target, uint64 from)
{
	Oid			types[2] = {INT8OID, INT8OID};
	Datum		values[2] = {Int64GetDatum((int64) target), Int64GetDatum((int64) from)};

	if (SPI_execute_with_args("INSERT INTO tashkent.rewind (target_version, from_version) VALUES ($1, $2)",
							  2, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "tashkent: could not insert into tashkent.rewind");
}

/* begin_barrier checks the barrier and closes the turn. */
static void
begin_barrier(uint64 target, uint64 from)
{
	uint64		committed = lock_committed();

	if (tk_shared->rewinding)
	{
		uint64		pending = tk_shared->rewind_target;

		LWLockRelease(tk_shared->lock);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a rewind to version %llu is under way on this replica", (unsigned long long) pending),
				 errhint("%s", TK_REWIND_UNDER_WAY_HINT)));
	}
	if (committed != from)
	{
		LWLockRelease(tk_shared->lock);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot rewind from version %llu: the replica's version is %llu",
						(unsigned long long) from, (unsigned long long) committed)));
	}
	refuse_unless_barrier("begin a rewind");
	close_turn(target);
}

/*
 * tashkent.rewind_begin(target, from): the current transaction of the
 * agent's applier undoes versions target+1..from, the replica's version
 * being `from`. It must be the transaction's first step in the commit
 * order: not an apply transaction, not in a subtransaction (a savepoint
 * rolled back would take the marker and leave the turn closed).
 */
Datum
tashkent_rewind_begin(PG_FUNCTION_ARGS)
{
	int64		target = PG_GETARG_INT64(0);
	int64		from = PG_GETARG_INT64(1);

	if (!tk_backend_is_applier)
		ereport(ERROR,
				(errcode(ERRCODE_TK_NOT_APPLIER),
				 errmsg("only the tashkent agent's applier rewinds the replica")));
	check_versions(target, from);
	if (!IsTransactionBlock())
		ereport(ERROR,
				(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				 errmsg("tashkent.rewind_begin can only be used in transaction blocks"),
				 errdetail("The undo and the marker that rewind_begin inserts must commit together.")));
	refuse_in_subtransaction("tashkent.rewind_begin");
	if (tk_apply_first != 0 || rewind_in_xact)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this transaction already %s", rewind_in_xact ? "rewinds the replica" : "applies versions")));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "tashkent: SPI_connect failed");
	refuse_pending();
	begin_barrier((uint64) target, (uint64) from);
	rewind_in_xact = true;		/* from here, an abort opens the turn again */
	insert_marker((uint64) target, (uint64) from);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * finish_barrier checks, for a rewind to `target` from `from`, that the
 * replica's version is one of them and that the barrier holds, and closes
 * the turn (after a server restart it is open again). `from` if nothing
 * moved since the undo; `target` if a finish set the origin back, WAL-
 * logged, and the server stopped before its commit. Any other version
 * means versions committed on top of the undone rows.
 */
static void
finish_barrier(uint64 target, uint64 from)
{
	uint64		committed = lock_committed();

	if (committed != target && committed != from)
	{
		LWLockRelease(tk_shared->lock);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot finish the rewind from version %llu to version %llu: the replica's version is %llu",
						(unsigned long long) from, (unsigned long long) target, (unsigned long long) committed),
				 errdetail("Versions were committed on top of the undone rows; the replica's data no longer matches any version."),
				 errhint("Rebuild the replica from a peer (state transfer).")));
	}
	refuse_unless_barrier("finish a rewind");
	close_turn(target);
}

/* set_origin_back sets the origin's progress to `target`, backwards. */
static void
set_origin_back(uint64 target)
{
	/* pg_replication_origin_advance's lock: the origin cannot vanish */
	LockRelationOid(ReplicationOriginRelationId, RowExclusiveLock);
	replorigin_advance(tk_shared->origin, (XLogRecPtr) target, InvalidXLogRecPtr,
					   true /* go backward */ , true /* WAL log */ );
	UnlockRelationOid(ReplicationOriginRelationId, RowExclusiveLock);
}

/*
 * set_shared_back makes shared memory say the replica holds `target`:
 * committed and floor, the last DDL version (never above it), and no ring
 * entry above it. The turn stays closed until the transaction commits
 * (tk_rewind_xact_end).
 */
static void
set_shared_back(uint64 target)
{
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	tk_shared->committed = target;
	tk_shared->floor = target;
	tk_shared->last_ddl_version = Min(tk_shared->last_ddl_version, target);
	for (int i = 0; i < TK_RING_SIZE; i++)
	{
		if (tk_shared->ring[i].version > target)
		{
			tk_shared->ring[i].version = 0;
			tk_shared->ring[i].xid = InvalidTransactionId;
		}
	}
	LWLockRelease(tk_shared->lock);
}

/*
 * tashkent.rewind_finish(target): completes the rewind whose undo
 * committed (its marker names `target`): the replica's version becomes
 * `target`. Returns the version it went back from. Superusers only (no
 * grant). Idempotent: after a crash it is simply called again.
 */
Datum
tashkent_rewind_finish(PG_FUNCTION_ARGS)
{
	int64		target = PG_GETARG_INT64(0);
	uint64		pending_target,
				pending_from;

	if (rewind_in_xact)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a rewind finishes after its undo committed, in another transaction")));
	refuse_in_subtransaction("tashkent.rewind_finish");
	check_versions(target, target);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "tashkent: SPI_connect failed");
	if (!pending_rewind(&pending_target, &pending_from))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("no rewind is pending on this replica"),
				 errdetail("tashkent.rewind holds no row: no undo committed, or its rewind finished already.")));
	if (pending_target != (uint64) target)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the pending rewind goes to version %llu, not %lld",
						(unsigned long long) pending_target, (long long) target)));
	if (SPI_execute("DELETE FROM tashkent.rewind", false, 0) != SPI_OK_DELETE)
		elog(ERROR, "tashkent: could not delete from tashkent.rewind");
	SPI_finish();
	finish_barrier(pending_target, pending_from);
	finish_in_xact = true;
	set_origin_back(pending_target);
	set_shared_back(pending_target);
	ereport(LOG,
			(errmsg("tashkent: the replica went back from version %llu to version %llu",
					(unsigned long long) pending_from, (unsigned long long) pending_target)));
	PG_RETURN_INT64((int64) pending_from);
}

/*
 * tk_rewind_refuse_pending_marker closes the turn and raises 55000 if a
 * marker is left (the server stopped between a rewind's undo and its
 * finish): versions applied now would be taken away again by the finish.
 * The table is read once per server life; from then on rewind_begin
 * closes the turn itself. For apply_versions, in its transaction.
 */
void
tk_rewind_refuse_pending_marker(void)
{
	bool		checked;
	bool		found;
	uint64		target = 0,
				from = 0;

	LWLockAcquire(tk_shared->lock, LW_SHARED);
	checked = tk_shared->rewind_marker_checked;
	LWLockRelease(tk_shared->lock);
	if (checked)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "tashkent: SPI_connect failed");
	found = pending_rewind(&target, &from);
	SPI_finish();
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	if (found && !tk_shared->rewinding)
	{
		tk_shared->rewinding = true;
		tk_shared->rewind_target = target;
	}
	tk_shared->rewind_marker_checked = !found;
	LWLockRelease(tk_shared->lock);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a rewind from version %llu to version %llu is pending: its undo committed, its finish did not",
						(unsigned long long) from, (unsigned long long) target),
				 errhint("Finish it first: SELECT tashkent.rewind_finish(%llu) (the tashkent agent does at start).",
						 (unsigned long long) target)));
}
