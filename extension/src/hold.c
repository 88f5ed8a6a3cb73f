/*
 * hold.c: a replica's commits held after one version, so that a snapshot
 * taken meanwhile holds exactly that version.
 *
 * `tashkent verify` compares the replicas' contents at one common version
 * while the cluster keeps writing. Commits become visible in version order
 * (turn.c), so a snapshot holds every version up to some v and none after;
 * to make that v the same on every replica, each one's commits are held
 * after a version (tashkent.hold_commits): the agent's applier stops there
 * (its runs are cut at the hold), and local transactions certified after
 * it get their decision and then wait for their turn in shared memory
 * (tk_turn_wait), where the lock watch sees them as it sees any local
 * transaction waiting for its turn, and makes them give way if they hold
 * a lock a version before the hold needs. The caller takes its snapshot,
 * checks it with tashkent.snapshot_version(), and ends the hold
 * (tashkent.release_commits). A hold ends by itself when its time is up
 * or its backend exits (the agent's side when the session's connection
 * closes), so a caller that dies does not stop the replica for long.
 */
#include "tashkent.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(tashkent_hold_commits);
PG_FUNCTION_INFO_V1(tashkent_release_commits);
PG_FUNCTION_INFO_V1(tashkent_snapshot_version);

/* The longest hold one call may ask for: ten minutes. */
#define HOLD_MS_MAX (10 * 60 * 1000)

/* This backend releases its hold when it exits. */
static bool exit_callback_set = false;

/*
 * tk_hold_keeps reports whether the hold keeps a local commit whose last
 * version is `last` waiting. Called with tk_shared->lock held.
 */
bool
tk_hold_keeps(uint64 last)
{
	return tk_shared->hold_after != 0 && last > tk_shared->hold_after &&
		GetCurrentTimestamp() < tk_shared->hold_until;
}

/*
 * hold_local holds local commits after `at_least`, or after the highest
 * version already past its turn (committing, or an applier's run in
 * progress) if that is later, until `until`, and returns the version they
 * are held after. A local transaction takes its turn under the lock this
 * reads under (tk_turn_wait), so none passes unseen.
 */
static uint64
hold_local(uint64 at_least, TimestampTz until)
{
	uint64		after = at_least;

	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	after = Max(after, tk_shared->committed);
	for (int i = 0; i < tk_shared->nslots; i++)
	{
		TkSlot	   *slot = &tk_shared->slots[i];

		if (slot->pid != 0 && (slot->state == TK_SLOT_COMMITTING || slot->state == TK_SLOT_APPLYING))
			after = Max(after, slot->version);
	}
	if (tk_shared->hold_pid == MyProcPid)
		after = Max(after, tk_shared->hold_after);	/* a hold only moves on */
	tk_shared->hold_after = after;
	tk_shared->hold_pid = MyProcPid;
	tk_shared->hold_until = until;
	LWLockRelease(tk_shared->lock);
	return after;
}

/* release_local ends this backend's hold, if it has it, and wakes the waiters. */
static void
release_local(void)
{
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	if (tk_shared->hold_pid == MyProcPid)
	{
		tk_shared->hold_after = 0;
		tk_shared->hold_pid = 0;
		for (int i = 0; i < tk_shared->nslots; i++)
		{
			TkSlot	   *slot = &tk_shared->slots[i];

			if (slot->pid != 0 && slot->waiting_for != 0)
				SetLatch(slot->latch);
		}
	}
	LWLockRelease(tk_shared->lock);
}

static void
release_at_exit(int code, Datum arg)
{
	if (tk_shared != NULL)
		release_local();
}

/* release ends this session's hold on both sides. */
static void
release(void)
{
	release_local();
	tk_channel_release();
}

/*
 * tashkent.hold_commits(version, hold_ms): holds this replica's commits
 * after `version`, or after the last version already under way here if
 * that is later, for at most hold_ms; waits until every version up to it
 * is committed and returns it. Called again by the same session, it moves
 * the hold forward. One session holds a replica at a time (55006 for a
 * second one).
 */
Datum
tashkent_hold_commits(PG_FUNCTION_ARGS)
{
	int64		version = PG_GETARG_INT64(0);
	int64		hold_ms = PG_GETARG_INT64(1);
	TimestampTz deadline;
	uint64		after;

	if (version < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version %lld is not a version: versions start at 1 (0: the replica's own)", (long long) version)));
	if (hold_ms < 1 || hold_ms > HOLD_MS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("hold_ms must be between 1 and %d milliseconds, not %lld", HOLD_MS_MAX, (long long) hold_ms)));
	if (!exit_callback_set)
	{
		before_shmem_exit(release_at_exit, (Datum) 0);
		exit_callback_set = true;
	}
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), hold_ms);
	after = tk_channel_hold((uint64) version, (uint32) hold_ms, deadline);
	PG_TRY();
	{
		after = hold_local(after, deadline);
		tk_wait_committed(after, deadline, psprintf("hold_ms (%lld ms)", (long long) hold_ms));
	}
	PG_CATCH();
	{
		release();
		PG_RE_THROW();
	}
	PG_END_TRY();
	PG_RETURN_INT64((int64) after);
}

/* tashkent.release_commits(): ends this session's hold, if any. */
Datum
tashkent_release_commits(PG_FUNCTION_ARGS)
{
	release();
	PG_RETURN_VOID();
}

/*
 * tashkent.snapshot_version(): the newest version the current snapshot
 * holds: the transaction's under REPEATABLE READ and SERIALIZABLE (taken
 * now if the transaction has none yet), the statement's under READ
 * COMMITTED. Refused (55000) while a rewind runs: the rows may be at the
 * rewind's target or at the version it goes back from, and the answer
 * (the versions above the floor that the snapshot sees) cannot tell.
 */
Datum
tashkent_snapshot_version(PG_FUNCTION_ARGS)
{
	Snapshot	snapshot;
	bool		rewinding;

	LWLockAcquire(tk_shared->lock, LW_SHARED);
	rewinding = tk_shared->rewinding;
	LWLockRelease(tk_shared->lock);
	if (rewinding)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the replica is being rewound: the version of a snapshot taken now is unknown"),
				 errhint("%s", TK_REWIND_UNDER_WAY_HINT)));

	if (IsolationUsesXactSnapshot() || !ActiveSnapshotSet())
		snapshot = GetTransactionSnapshot();
	else
		snapshot = GetActiveSnapshot();
	PG_RETURN_INT64((int64) tk_snapshot_version(snapshot));
}
