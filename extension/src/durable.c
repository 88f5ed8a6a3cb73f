/*
 * durable.c: the certifier's durable version in shared memory, and the
 * backends that wait for a version to become durable.
 *
 * Durability is a prefix of the one global order: once version v is
 * durable, so is every version below it, and nothing durable is ever
 * lost (Kashi §2.2.1, property 2: committed -> durable is final). The
 * replica learns the certifier's durable version from its agent, through
 * the durability feed (feed.c), one word per advance; a backend that asks
 * the agent for a transaction's state brings the agent's value too
 * (state.c, ask_state). Both only raise it: tk_durable_advance keeps the
 * maximum. The agent passes on only the durable version of a certifier
 * stream that admitted the replica's history; while the replica must be
 * rewound or rebuilt it passes on nothing, and the value here, which
 * never goes down, says nothing meaningful about the replica until it
 * serves again (the agent's txn_state does not answer meanwhile).
 *
 * A backend waits for durability on its own latch, as PostgreSQL's
 * SyncRepWaitForLSN does for a standby (Kashi §3.8 waits there), without
 * its queue: it writes the version it waits for into its entry of
 * durable_waits, then reads the durable version (tk_durable_reached); an
 * advance raises the durable version, then reads every entry and sets the
 * latch of each backend whose version it reached. Both sides pass a full
 * barrier between their write and their read (an atomic exchange, a
 * compare-and-exchange), so an advance either is seen by the waiter's
 * read or sees the waiter's entry: no wake-up is lost. The waiter must
 * read the durable version itself: durable_known is written after the
 * compare-and-exchange, with no barrier before the advance's reads of the
 * entries, so a waiter that read it could miss the first advance.
 *
 * Past tk_durable_wait_prepare, nothing here allocates, takes a lock or
 * raises an error, so that a wait that must not fail can use it: the safe
 * commit's wait after its locks are released, which runs with interrupts
 * held and where an error would abort a committed transaction (a PANIC).
 * Such a wait calls tk_durable_wait_prepare() earlier, where an error is
 * still allowed (PRE_COMMIT). Each turn of its loop resets its latch;
 * then checks ProcDiePending (interrupts are held, so CHECK_FOR_INTERRUPTS
 * does not act: a die must leave the loop) and the durable version
 * (tk_durable_wait_begin(v), then tk_durable_reached(v)); and only then
 * waits on its latch, with WL_POSTMASTER_DEATH (never WL_EXIT_ON_PM_DEATH,
 * whose proc_exit would abort). A check before the reset could miss a
 * die or an advance whose SetLatch the reset then clears. It calls
 * tk_durable_wait_end() when done.
 */
#include "tashkent.h"

#include "storage/ipc.h"
#include "storage/proc.h"

/* This backend clears its wait entry when it exits. */
static bool exit_callback_set = false;

/* tk_durable_init: nothing heard yet, nobody waiting. */
void
tk_durable_init(void)
{
	pg_atomic_init_u64(&tk_shared->durable, 0);
	pg_atomic_init_u32(&tk_shared->durable_known, 0);
	for (int i = 0; i < tk_shared->nslots; i++)
		pg_atomic_init_u64(&tk_shared->durable_waits[i], 0);
}

/* Sets the latch of every backend that waits for a version up to v. */
static void
wake_waiters(uint64 v)
{
	for (int i = 0; i < tk_shared->nslots; i++)
	{
		uint64		waits = pg_atomic_read_u64(&tk_shared->durable_waits[i]);

		if (waits != 0 && waits <= v)
			SetLatch(&GetPGProcByNumber(i)->procLatch);
	}
}

/*
 * tk_durable_advance records that the certifier's durable version is at
 * least `version` and wakes the backends waiting for it.
 */
void
tk_durable_advance(uint64 version)
{
	uint64		old = pg_atomic_read_u64(&tk_shared->durable);
	bool		advanced = false;

	while (old < version)
	{
		if (pg_atomic_compare_exchange_u64(&tk_shared->durable, &old, version))
		{
			advanced = true;
			break;
		}
	}
	/*
	 * After the value: a reader that sees known sees the value too. Only
	 * tashkent.durable_version() reads it; a waiter reads the value
	 * (tk_durable_reached), since nothing orders this write before the
	 * reads of the waits below.
	 */
	if (pg_atomic_read_u32(&tk_shared->durable_known) == 0)
		pg_atomic_write_u32(&tk_shared->durable_known, 1);
	if (advanced)
		wake_waiters(version);
}

/*
 * tk_durable_get: the certifier's durable version as last heard; false
 * if nothing was heard since the server started.
 */
bool
tk_durable_get(uint64 *version)
{
	if (pg_atomic_read_u32(&tk_shared->durable_known) == 0)
		return false;
	pg_read_barrier();
	*version = pg_atomic_read_u64(&tk_shared->durable);
	return true;
}

/*
 * tk_durable_reached: whether this replica heard that `version` (1 or
 * more) is durable. It reads the value itself, after a waiter's entry
 * (see the header).
 */
bool
tk_durable_reached(uint64 version)
{
	Assert(version >= 1);
	return pg_atomic_read_u64(&tk_shared->durable) >= version;
}

static void
clear_wait(int code, Datum arg)
{
	if (MyProc != NULL && MyProc->pgprocno >= 0 && MyProc->pgprocno < tk_shared->nslots)
		pg_atomic_write_u64(&tk_shared->durable_waits[MyProc->pgprocno], 0);
}

/*
 * tk_durable_wait_prepare makes sure that a backend which exits in a wait
 * leaves no entry behind (the next process in its slot would be woken at
 * every advance). It may fail (on_shmem_exit's slots are few): call it
 * before a wait that must not.
 */
void
tk_durable_wait_prepare(void)
{
	if (exit_callback_set)
		return;
	on_shmem_exit(clear_wait, 0);
	exit_callback_set = true;
}

/*
 * tk_durable_wait_begin: this backend waits until `version` is durable;
 * the next advance that reaches it sets its latch. Reset the latch
 * before this, and ask tk_durable_reached after it.
 */
void
tk_durable_wait_begin(uint64 version)
{
	Assert(exit_callback_set);
	(void) pg_atomic_exchange_u64(&tk_shared->durable_waits[MyProc->pgprocno], version);
}

/* tk_durable_wait_end: this backend waits no more. */
void
tk_durable_wait_end(void)
{
	clear_wait(0, 0);
}
