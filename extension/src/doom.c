/*
 * doom.c: a local transaction that blocks a remote writeset gives way.
 *
 * A remote writeset (the agent's applier) can wait for a row lock held by
 * a local transaction. If the local transaction wrote that row, a version
 * it has not seen wrote it too, and certification would refuse it anyway
 * (eager pre-certification, Tashkent §8.2; Postgres-R(SI) §4.2: remote
 * transactions abort local ones): PostgreSQL has no priorities, so the
 * agent watches what its applier waits for (pg_blocking_pids) and dooms
 * the holder with tashkent.doom(pid, version). A doomed transaction fails
 * with 40001 at its next statement or, if it is running one, at once (a
 * cancel, whose 57014 is reported as the 40001 it stands for).
 *
 * The doom's cancel is not a plain SIGINT: a signal can arrive late, after
 * the doomed transaction already failed at its next statement, and a
 * SIGINT then cancels whatever the session runs next (the client's retry,
 * with a 57014 it does not retry). Backends take SIGUSR2 instead (which
 * PostgreSQL's own backends ignore; walsenders keep theirs), and the
 * handler cancels the running statement only if the doom it stands for is
 * still for the current transaction and not yet reported: a late signal
 * does nothing.
 *
 * A transaction already certified, waiting for its turn, cannot be
 * refused: the cluster committed it. If it holds a lock an earlier version
 * needs (a row it locked without writing it: SELECT ... FOR UPDATE, a
 * foreign key check), each would wait for the other. It is displaced: its
 * backend ends with FATAL 08007, saying that the transaction committed,
 * and the agent applies its version in its place.
 */
#include "tashkent.h"

#include <signal.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/elog.h"

static emit_log_hook_type prev_emit_log_hook = NULL;

/*
 * The transaction whose doom this backend reported (its 40001 raised, or
 * its cancel rewritten into one): a doom signal that arrives afterwards,
 * while the transaction unwinds, must not cancel anything.
 */
static volatile TransactionId doom_reported_xid = InvalidTransactionId;

PG_FUNCTION_INFO_V1(tashkent_doom);

/* My slot's doom, if it is for the current transaction. */
static TkDoomReason
my_doom(uint64 *by)
{
	TkSlot	   *slot;
	TransactionId xid;
	TkDoomReason reason = TK_DOOM_NONE;

	if (tk_shared == NULL || MyProc == NULL || MyProc->pgprocno < 0 ||
		MyProc->pgprocno >= tk_shared->nslots)
		return TK_DOOM_NONE;
	slot = &tk_shared->slots[MyProc->pgprocno];
	if (slot->pid != MyProcPid || slot->doom_reason == TK_DOOM_NONE)
		return TK_DOOM_NONE;
	xid = GetTopTransactionIdIfAny();
	if (TransactionIdIsValid(xid) && slot->doomed_xid == xid)
	{
		reason = slot->doom_reason;
		*by = slot->doomed_by;
	}
	return reason;
}

/* tk_doom_check raises the doomed transaction's error. */
void
tk_doom_check(void)
{
	uint64		by = 0;

	switch (my_doom(&by))
	{
		case TK_DOOM_NONE:
		case TK_DOOM_WAITER:	/* no transaction id: its wait ends it */
			return;
		case TK_DOOM_BLOCKER:
			doom_reported_xid = GetTopTransactionIdIfAny();
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent update on another replica"),
					 errdetail("Version %llu, committed on another replica, writes a row this transaction locked.",
							   (unsigned long long) by),
					 errhint("The transaction might succeed if retried.")));
			break;
		case TK_DOOM_DISPLACED:
			if (tk_mode_ed() && !tk_durable_reached(tk_my_slot()->version))
				ereport(FATAL,
						(errcode(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN),
						 errmsg("the cluster decided this transaction as version %llu, which is not durable yet, but this session had to give way to version %llu and ends",
								(unsigned long long) tk_my_slot()->version, (unsigned long long) by),
						 errdetail("The transaction holds a row lock (SELECT ... FOR UPDATE or a foreign key check) that the earlier version %llu needs; this replica applies the transaction's changes from the log instead if its version becomes durable.",
								   (unsigned long long) by),
						 errhint("Ask tashkent.txn_state(%llu) on any replica whether it became durable or failed before doing it again.",
								 (unsigned long long) tk_my_slot()->version)));
			ereport(FATAL,
					(errcode(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN),
					 errmsg("the cluster committed this transaction, but this session had to give way to version %llu and ends",
							(unsigned long long) by),
					 errdetail("The transaction holds a row lock (SELECT ... FOR UPDATE or a foreign key check) that the earlier version %llu needs; this replica applies the transaction's changes from the log instead.",
							   (unsigned long long) by),
					 errhint("Do not retry the transaction: it committed.")));
			break;
	}
}

/* tk_doom_clear forgets a doom: the transaction ended, or it is certified. */
void
tk_doom_clear(void)
{
	if (tk_shared == NULL || MyProc == NULL || MyProc->pgprocno < 0 ||
		MyProc->pgprocno >= tk_shared->nslots)
		return;
	if (tk_shared->slots[MyProc->pgprocno].pid != MyProcPid ||
		tk_shared->slots[MyProc->pgprocno].doom_reason == TK_DOOM_NONE)
		return;
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	tk_shared->slots[MyProc->pgprocno].doom_reason = TK_DOOM_NONE;
	tk_shared->slots[MyProc->pgprocno].doomed_xid = InvalidTransactionId;
	tk_shared->slots[MyProc->pgprocno].doomed_by = 0;
	LWLockRelease(tk_shared->lock);
}

/*
 * The cancel that interrupted a doomed transaction's statement, and the
 * termination of one that kept its locks while idle, are reported as what
 * they stand for. Never an error here: this runs while one is reported.
 */
static void
report_doom(ErrorData *edata)
{
	uint64		by = 0;

	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
	if (edata->sqlerrcode != ERRCODE_QUERY_CANCELED && edata->sqlerrcode != ERRCODE_ADMIN_SHUTDOWN)
		return;
	if (my_doom(&by) != TK_DOOM_BLOCKER)
		return;
	doom_reported_xid = GetTopTransactionIdIfAny();
	edata->sqlerrcode = ERRCODE_T_R_SERIALIZATION_FAILURE;
	edata->message = psprintf("could not serialize access due to a concurrent update on another replica%s",
							  edata->elevel >= FATAL ? "; the session ends because its transaction kept the lock while idle" : "");
	edata->detail = psprintf("Version %llu, committed on another replica, writes a row this transaction locked.",
							 (unsigned long long) by);
	edata->hint = pstrdup("The transaction might succeed if retried.");
}

/*
 * doom_outstanding, in a signal handler: my slot dooms my current
 * transaction as a blocker, and I have not reported it yet. Reads only
 * shared memory and this process's PGPROC.
 */
static bool
doom_outstanding(void)
{
	TkSlot	   *slot;
	TransactionId xid;

	if (tk_shared == NULL || MyProc == NULL || MyProc->pgprocno < 0 ||
		MyProc->pgprocno >= tk_shared->nslots)
		return false;
	slot = &tk_shared->slots[MyProc->pgprocno];
	xid = MyProc->xid;
	return !proc_exit_inprogress && slot->pid == MyProcPid &&
		slot->state == TK_SLOT_IDLE && slot->doom_reason == TK_DOOM_BLOCKER &&
		TransactionIdIsValid(xid) && slot->doomed_xid == xid &&
		xid != doom_reported_xid;
}

/* SIGUSR2: what PostgreSQL's StatementCancelHandler does, if still due. */
static void
doom_interrupt(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (doom_outstanding())
	{
		QueryCancelPending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * tk_doom_take_signals: a client backend takes doom signals, and says so
 * (doom_signal_pids): tashkent.doom signals only a backend that does (a
 * walsender, or a background worker, may use SIGUSR2 for something else).
 * Called at authentication (admit.c), after PostgresMain set up its own
 * handlers.
 */
void
tk_doom_take_signals(void)
{
	if (am_walsender || MyProc == NULL || MyProc->pgprocno < 0 ||
		MyProc->pgprocno >= tk_shared->nslots)
		return;
	pqsignal(SIGUSR2, doom_interrupt);
	tk_shared->doom_signal_pids[MyProc->pgprocno] = MyProcPid;
}

/*
 * tashkent.doom(pid, version): the transaction of backend pid holds a lock
 * that version needs. Returns 'blocker' (it will fail with 40001; it was
 * sent the doom signal), 'waiter' (no transaction id, but it waits for
 * `version` or a later one, tashkent.sync_wait or wait_for_version: its
 * wait ends with 40001, woken by its latch), 'displaced' (certified: it gives way, see above), or
 * NULL when it cannot be doomed now (no transaction, or its certification
 * or commit under way: the certifier or the turn resolves it).
 */
Datum
tashkent_doom(PG_FUNCTION_ARGS)
{
	int			pid = PG_GETARG_INT32(0);
	uint64		by = (uint64) PG_GETARG_INT64(1);
	PGPROC	   *proc = BackendPidGetProc(pid);
	TkSlot	   *slot;
	TkDoomReason reason = TK_DOOM_NONE;
	TransactionId xid;
	bool		signal = false;

	if (proc == NULL || proc->pgprocno < 0 || proc->pgprocno >= tk_shared->nslots)
		PG_RETURN_NULL();
	xid = proc->xid;
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	slot = &tk_shared->slots[proc->pgprocno];
	if (slot->pid != pid)
	{
		if (!TransactionIdIsValid(xid))
		{
			LWLockRelease(tk_shared->lock);
			PG_RETURN_NULL();	/* a reader that never waited for a version */
		}
		memset(slot, 0, sizeof(TkSlot));
		slot->pid = pid;
		slot->latch = &proc->procLatch;
	}
	if (!TransactionIdIsValid(xid))
	{
		/*
		 * A reader that waits for a version at or after `by` waits for
		 * this batch, which waits for its lock: it gives way (causal.c).
		 */
		if (slot->state == TK_SLOT_IDLE && slot->waiting_for >= by)
			reason = TK_DOOM_WAITER;
	}
	else if (slot->state == TK_SLOT_IDLE)
		reason = TK_DOOM_BLOCKER;
	else if (slot->state == TK_SLOT_HOLDING && by < slot->version)
		reason = TK_DOOM_DISPLACED;
	if (reason != TK_DOOM_NONE)
	{
		slot->doom_reason = reason;
		slot->doomed_xid = xid;
		slot->doomed_by = by;
		SetLatch(slot->latch);
		signal = reason == TK_DOOM_BLOCKER &&
			tk_shared->doom_signal_pids[proc->pgprocno] == pid;
	}
	LWLockRelease(tk_shared->lock);
	if (reason == TK_DOOM_NONE)
		PG_RETURN_NULL();
	if (signal)
		(void) kill(pid, SIGUSR2);
	PG_RETURN_TEXT_P(cstring_to_text(reason == TK_DOOM_BLOCKER ? "blocker" :
									 reason == TK_DOOM_WAITER ? "waiter" : "displaced"));
}

void
tk_doom_init(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = report_doom;
}
