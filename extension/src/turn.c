/*
 * turn.c: the replica's commit order.
 *
 * Every version of the global order commits on this replica strictly after
 * the one before it, and becomes visible before the next one may commit:
 * visibility follows the certifier's order, so that read-only transactions
 * on different replicas never see a Long Fork (BRIEF.md; Tashkent §6.2
 * steps C4 and C5, serialized as in Base and Tashkent-MW). A backend that
 * holds version v (or the agent's applier, versions first..last) waits in
 * tk_turn_wait until v - 1 is committed, records its versions with its
 * commit (tk_turn_record), and passes the turn on in the commit callback,
 * which PostgreSQL runs after the commit became visible (tk_turn_pass).
 *
 * The version a database holds is the progress of the replication origin
 * "tashkent": the commit record of each such transaction carries it
 * (replorigin_session_origin_lsn), so PostgreSQL's own crash recovery
 * restores it exactly with the commits it kept, synchronous_commit=off
 * included (Tashkent §7.1, case 2). No table is written for it.
 *
 * A ring in shared memory remembers, for the last TK_RING_SIZE versions,
 * which transaction committed each: tk_snapshot_version finds the newest
 * version a snapshot sees, which DDL is certified from (commit.c).
 */
#include "tashkent.h"

#include "access/transam.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* This backend set up the origin session for its commit. */
static bool origin_session_set = false;

/* The replica's version after a server (re)start: the origin's progress. */
static void
ensure_loaded(void)
{
	RepOriginId origin;
	XLogRecPtr	progress;

	if (tk_shared->loaded)
		return;
	origin = replorigin_by_name(TK_ORIGIN_NAME, true);
	if (origin == InvalidRepOriginId)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tashkent is not installed in this server: the replication origin \"%s\" does not exist",
						TK_ORIGIN_NAME),
				 errhint("The tashkent agent installs it (CREATE EXTENSION tashkent).")));
	progress = replorigin_get_progress(origin, false);
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	if (!tk_shared->loaded)
	{
		tk_shared->origin = origin;
		tk_shared->committed = progress;
		tk_shared->floor = progress;
		tk_shared->loaded = true;
	}
	LWLockRelease(tk_shared->lock);
}

/* tk_committed: the replica's version, every version up to it visible. */
uint64
tk_last_ddl_version(void)
{
	uint64		v;

	LWLockAcquire(tk_shared->lock, LW_SHARED);
	v = tk_shared->last_ddl_version;
	LWLockRelease(tk_shared->lock);
	return v;
}

uint64
tk_committed(void)
{
	uint64		committed;

	ensure_loaded();
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	committed = tk_committed_locked();
	LWLockRelease(tk_shared->lock);
	return committed;
}

/*
 * tk_committed_locked: the replica's version as sessions count it, with
 * tk_shared->lock held. While a rewind runs (rewind.c) it is at most the
 * rewind's target: the rows are, or are about to be, at the target, and
 * the versions above it apply again only after the finish. A wait for one
 * of them waits for that; committed_version() does not report them.
 */
uint64
tk_committed_locked(void)
{
	if (tk_shared->rewinding)
		return Min(tk_shared->committed, tk_shared->rewind_target);
	return tk_shared->committed;
}

/*
 * A cancel (a client's, statement_timeout) cannot end a certified local
 * transaction's wait: the cluster committed it, and rolling it back here
 * would tell the client the opposite. It is dropped with a warning, as
 * PostgreSQL's synchronous replication does; termination still ends the
 * backend, and the agent then applies the version (commit.c).
 */
static void
absorb_cancel(bool *warned)
{
	if (!QueryCancelPending)
		return;
	QueryCancelPending = false;
	if (!*warned)
		ereport(WARNING,
				(errmsg("canceling the wait for the commit turn is not possible"),
				 errdetail("The cluster has committed this transaction; it becomes visible here once the versions before it are.")));
	*warned = true;
}

/*
 * tk_turn_wait waits until every version before `first` is committed.
 * cancellable: a cancel ends the wait with an error (the agent's applier,
 * which applies the versions again); otherwise it is absorbed. A local
 * commit (not cancellable) also waits while a hold keeps its version
 * (hold.c); the applier's runs never pass a hold, the agent cuts them.
 * Every commit waits while a rewind is under way (rewind.c). A local
 * commit whose version (of `epoch`) failed (safe.c) ends with 40001: it
 * committed nothing; it is checked before the turn is taken, so a version
 * known failed is never committed, even when its turn has come.
 */
void
tk_turn_wait(uint64 first, uint64 epoch, bool cancellable)
{
	TkSlot	   *slot = tk_my_slot();
	uint64		predecessor = first - 1;
	bool		warned = false;

	ensure_loaded();
	for (;;)
	{
		uint64		committed;

		bool		held;

		ResetLatch(MyLatch);
		/* a streamed commit's span failed if its last version did */
		if (!cancellable && tk_version_failed(Max(first, slot->version), epoch))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("the certifier failed before making this transaction durable; nothing was committed"),
					 errdetail("Its version %llu (epoch %llu) was decided, and the certifier lost every version after %llu.",
							   (unsigned long long) Max(first, slot->version), (unsigned long long) epoch,
							   (unsigned long long) tk_failed_after()),
					 errhint("The transaction might succeed if retried.")));
		LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
		committed = tk_shared->committed;
		/* a streamed commit's slot holds its span: held if any of it is */
		held = (!cancellable && tk_hold_keeps(Max(first, slot->version))) || tk_rewind_holds_turn();
		slot->waiting_for = committed < predecessor || held ? predecessor : 0;
		if (committed == predecessor && !held && !cancellable)
			slot->state = TK_SLOT_COMMITTING;	/* past any hold set from now */
		LWLockRelease(tk_shared->lock);
		if (committed == predecessor && !held)
			return;
		if (committed > predecessor)
			ereport(ERROR,
					(errcode(ERRCODE_TK_ALREADY_COMMITTED),
					 errmsg("version %llu is already committed on this replica (its version is %llu)",
							(unsigned long long) first, (unsigned long long) committed)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		if (!cancellable)
			absorb_cancel(&warned);
		CHECK_FOR_INTERRUPTS();
		tk_doom_check();
	}
}

/*
 * tk_turn_record makes this transaction's commit carry its versions
 * first..last: the last one as the origin's progress, each one in the ring
 * with this transaction's id. Called with the turn.
 */
void
tk_turn_record(uint64 first, uint64 last)
{
	TkSlot	   *slot = tk_my_slot();
	TransactionId xid = GetTopTransactionId();	/* a commit record, always */
	uint64		from = last - first >= TK_RING_SIZE ? last - TK_RING_SIZE + 1 : first;

	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	for (uint64 v = from; v <= last; v++)
	{
		tk_shared->ring[v % TK_RING_SIZE].version = v;
		tk_shared->ring[v % TK_RING_SIZE].xid = xid;
	}
	slot->state = TK_SLOT_COMMITTING;
	slot->first = first;
	slot->version = last;
	slot->waiting_for = 0;
	LWLockRelease(tk_shared->lock);

	replorigin_session_setup(tk_shared->origin);
	origin_session_set = true;
	replorigin_session_origin = tk_shared->origin;
	replorigin_session_origin_lsn = (XLogRecPtr) last;
	replorigin_session_origin_timestamp = GetCurrentTimestamp();
}

static void
reset_origin_session(void)
{
	if (!origin_session_set)
		return;
	replorigin_session_reset();
	origin_session_set = false;
	replorigin_session_origin = InvalidRepOriginId;
	replorigin_session_origin_lsn = InvalidXLogRecPtr;
	replorigin_session_origin_timestamp = 0;
}

/*
 * tk_turn_pass: `last` is committed and visible; the backend that waits for
 * it may go, and so may the backends that wait for a version up to it
 * (causal.c; a run of versions the applier commits ends at `last`). The origin session is released first: the next holder sets
 * up its own, which PostgreSQL 15 allows one backend at a time. ran_ddl:
 * the transaction ran DDL (commit.c's start version needs to know).
 */
void
tk_turn_pass(uint64 last, bool ran_ddl)
{
	TkSlot	   *slot = tk_my_slot();

	reset_origin_session();
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	tk_shared->committed = last;
	if (ran_ddl)
		tk_shared->last_ddl_version = last;
	slot->state = TK_SLOT_IDLE;
	slot->first = slot->version = slot->waiting_for = 0;
	for (int i = 0; i < tk_shared->nslots; i++)
	{
		TkSlot	   *other = &tk_shared->slots[i];

		if (other->pid != 0 && other->waiting_for != 0 && other->waiting_for <= last)
			SetLatch(other->latch);
	}
	LWLockRelease(tk_shared->lock);
}

/* tk_turn_release: the transaction aborted; it commits nothing. */
void
tk_turn_release(void)
{
	TkSlot	   *slot = tk_my_slot();

	reset_origin_session();
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	slot->state = TK_SLOT_IDLE;
	slot->first = slot->version = slot->waiting_for = 0;
	LWLockRelease(tk_shared->lock);
}

/*
 * tk_snapshot_version: the newest version whose commit snapshot sees.
 * Versions become visible in order, so it is the first one down from the
 * replica's version whose transaction the snapshot does not count as in
 * progress. Versions up to the floor (the version when the server started)
 * are visible to every snapshot; past the ring's reach, the floor is the
 * answer, which is never newer than the snapshot (an older one only makes
 * certification stricter).
 */
uint64
tk_snapshot_version(Snapshot snapshot)
{
	uint64		committed;
	uint64		floor;
	uint64		v;

	ensure_loaded();
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	committed = tk_shared->committed;
	floor = tk_shared->floor;
	for (v = committed; v > floor && committed - v < TK_RING_SIZE; v--)
	{
		TkRingEntry *e = &tk_shared->ring[v % TK_RING_SIZE];

		if (e->version != v)
			break;
		if (!XidInMVCCSnapshot(e->xid, snapshot))
		{
			LWLockRelease(tk_shared->lock);
			return v;
		}
	}
	LWLockRelease(tk_shared->lock);
	return floor;
}
