/*
 * hold.c: a replica's commits held after one version, so that a snapshot
 * taken meanwhile holds exactly that version.
 *
 * `tashkent verify` compares the replicas' contents at one common version
 * while the cluster keeps writing. Commits become visible in version order
 * (turn.c), so a snapshot holds every version up to some v and none after;
 * to make that v the same on every replica, each one's agent holds its
 * commits after a version (tashkent.hold_commits): its applier stops there
 * and local transactions certified after it wait for their decision. The
 * caller takes its snapshot, checks it with tashkent.snapshot_version(),
 * and ends the hold (tashkent.release_commits). The agent ends a hold by
 * itself when its time is up or its session's connection closes, so a
 * caller that dies does not stop the replica.
 */
#include "tashkent.h"

#include "access/xact.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(tashkent_hold_commits);
PG_FUNCTION_INFO_V1(tashkent_release_commits);
PG_FUNCTION_INFO_V1(tashkent_snapshot_version);

/* The longest hold one call may ask for: ten minutes. */
#define HOLD_MS_MAX (10 * 60 * 1000)

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
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), hold_ms);
	after = tk_channel_hold((uint64) version, (uint32) hold_ms, deadline);
	PG_TRY();
	{
		tk_wait_committed(after, deadline, psprintf("hold_ms (%lld ms)", (long long) hold_ms));
	}
	PG_CATCH();
	{
		tk_channel_release();
		PG_RE_THROW();
	}
	PG_END_TRY();
	PG_RETURN_INT64((int64) after);
}

/* tashkent.release_commits(): ends this session's hold, if any. */
Datum
tashkent_release_commits(PG_FUNCTION_ARGS)
{
	tk_channel_release();
	PG_RETURN_VOID();
}

/*
 * tashkent.snapshot_version(): the newest version the current snapshot
 * holds: the transaction's under REPEATABLE READ and SERIALIZABLE (taken
 * now if the transaction has none yet), the statement's under READ
 * COMMITTED.
 */
Datum
tashkent_snapshot_version(PG_FUNCTION_ARGS)
{
	Snapshot	snapshot;

	if (IsolationUsesXactSnapshot() || !ActiveSnapshotSet())
		snapshot = GetTransactionSnapshot();
	else
		snapshot = GetActiveSnapshot();
	PG_RETURN_INT64((int64) tk_snapshot_version(snapshot));
}
