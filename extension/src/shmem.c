/*
 * shmem.c: the state the backends of a replica share.
 *
 * One struct (TkShared) under one LWLock: the replica's version (the
 * highest version whose commit is visible), one slot per backend saying
 * what it does with the commit order, and the ring of recently committed
 * versions that turn.c reads snapshot versions from. It is created at
 * server start and again after a crash restart, which is when the version
 * must be read back from the replication origin (turn.c, tk_committed).
 * The certifier's durable version and the waits for it are atomics beside
 * it, outside the lock (durable.c).
 */
#include "tashkent.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "access/twophase.h"
#include "utils/timestamp.h"

TkShared   *tk_shared = NULL;

static TkSlot *my_slot = NULL;

/*
 * The array of 64-bit atomics starts at an offset that is a multiple of
 * 8: MAXALIGN is 4 on some 32-bit platforms, where a pg_atomic_uint64
 * still needs 8 (the segment itself starts cache-line aligned).
 */
#define ATOMIC64_ALIGN(len) TYPEALIGN(sizeof(pg_atomic_uint64), (len))

/* Every PGPROC has a pgprocno below this. */
static int
slot_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
shared_size(void)
{
	Size		size = MAXALIGN(sizeof(TkShared));

	size = add_size(size, MAXALIGN(mul_size(slot_count(), sizeof(TkSlot))));
	size = add_size(size, MAXALIGN(mul_size(slot_count(), sizeof(int))));
	size = add_size(size, MAXALIGN(mul_size(TK_RING_SIZE, sizeof(TkRingEntry))));
	size = ATOMIC64_ALIGN(size);
	size = add_size(size, mul_size(slot_count(), sizeof(pg_atomic_uint64)));
	return size;
}

void
tk_shmem_request(void)
{
	RequestAddinShmemSpace(shared_size());
	RequestNamedLWLockTranche("tashkent", 1);
}

void
tk_shmem_startup(void)
{
	bool		found;
	char	   *base;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	base = ShmemInitStruct("tashkent", shared_size(), &found);
	tk_shared = (TkShared *) base;
	if (!found)
	{
		memset(base, 0, shared_size());
		tk_shared->lock = &(GetNamedLWLockTranche("tashkent"))->lock;
		tk_shared->incarnation = (uint64) GetCurrentTimestamp();
		tk_shared->nslots = slot_count();
		tk_shared->origin = InvalidRepOriginId;
		strlcpy(tk_shared->admit_reason, "the replica has not caught up with the cluster since its server started",
				sizeof(tk_shared->admit_reason));
		pg_atomic_init_u32(&tk_shared->fence_raised, 0);
	}
	base += MAXALIGN(sizeof(TkShared));
	tk_shared->slots = (TkSlot *) base;
	base += MAXALIGN(mul_size(tk_shared->nslots, sizeof(TkSlot)));
	tk_shared->doom_signal_pids = (int *) base;
	base += MAXALIGN(mul_size(tk_shared->nslots, sizeof(int)));
	tk_shared->ring = (TkRingEntry *) base;
	base += MAXALIGN(mul_size(TK_RING_SIZE, sizeof(TkRingEntry)));
	base = (char *) tk_shared + ATOMIC64_ALIGN(base - (char *) tk_shared);
	tk_shared->durable_waits = (pg_atomic_uint64 *) base;
	if (!found)
	{
		tk_durable_init();
		tk_safe_shmem_init();
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * A backend that exits leaves its slot free for the next one. Registered
 * with on_shmem_exit, so that it runs after the exit's transaction abort
 * (commit.c hands a version it held to the agent there).
 */
static void
release_slot(int code, Datum arg)
{
	if (my_slot == NULL)
		return;
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	memset(my_slot, 0, sizeof(TkSlot));
	LWLockRelease(tk_shared->lock);
	my_slot = NULL;
}

/* tk_my_slot: this backend's slot, claimed at first use. */
TkSlot *
tk_my_slot(void)
{
	if (my_slot != NULL)
		return my_slot;
	if (MyProc == NULL || MyProc->pgprocno < 0 || MyProc->pgprocno >= tk_shared->nslots)
		elog(ERROR, "tashkent: this process has no backend slot");
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	my_slot = &tk_shared->slots[MyProc->pgprocno];
	if (my_slot->pid != MyProcPid)	/* a doom (doom.c) may have claimed it */
		memset(my_slot, 0, sizeof(TkSlot));
	my_slot->pid = MyProcPid;
	my_slot->latch = &MyProc->procLatch;
	LWLockRelease(tk_shared->lock);
	on_shmem_exit(release_slot, 0);
	return my_slot;
}

/* tk_slot_of_pid: the slot of a live backend, NULL if it has none. */
TkSlot *
tk_slot_of_pid(int pid)
{
	for (int i = 0; i < tk_shared->nslots; i++)
		if (tk_shared->slots[i].pid == pid)
			return &tk_shared->slots[i];
	return NULL;
}
