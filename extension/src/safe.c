/*
 * safe.c: mode ed (eventual durability, Kashi, "Eventual Durability"):
 * commits are visible at the commit point, the certifier's decision, and
 * durable later, once the certifier's log has them on disk. A transaction
 * is fast or safe (§2.2.1, property 1), chosen by the user's
 * synchronous_commit as in ED Postgres (§3.6): off is fast, anything else
 * safe. A fast commit is acknowledged at its commit point; a safe one only
 * once it is durable (property 5), and a safe read-only transaction only
 * once every version it may have read is (property 5b, §2.2.3, §3.8).
 *
 * The safe commit (Alg. 2 of §3.7, with the locks released before the
 * wait). PRE_COMMIT certifies and takes the turn (commit.c); then
 * tk_safe_commit_choose reads the effective synchronous_commit (SET LOCAL,
 * SET, role and database defaults, connection options) and sets it off
 * for this commit (GUC_ACTION_LOCAL, which AtEOXact_GUC undoes after
 * RecordTransactionCommit read it): the replica never flushes for a
 * replicated commit, its durability is the certifier's. CommitTransaction
 * then makes the commit visible, passes the turn on (XACT_EVENT_COMMIT) and
 * releases the locks (RESOURCE_RELEASE_LOCKS); in RESOURCE_RELEASE_AFTER_LOCKS
 * tk_safe_commit_wait waits until the version is durable. So a row lock is
 * held until the commit point only, and a conflicting writer proceeds
 * while the first one's COMMIT still waits (§3.7: early visibility). The
 * client's CommandComplete is sent only after CommitTransaction returns.
 *
 * That wait runs with interrupts held, after the commit: an ERROR or FATAL
 * there would abort a committed transaction, a PANIC. So it allocates
 * nothing, raises nothing and waits on its latch with WL_POSTMASTER_DEATH
 * (never WL_EXIT_ON_PM_DEATH, whose proc_exit would abort), as
 * PostgreSQL's SyncRepWaitForLSN does, and ends as that does:
 *
 *   - cancel, statement_timeout: absorbed with one WARNING (safe means
 *     acknowledged only once durable);
 *   - termination, postmaster death: a WARNING that the transaction
 *     committed and is not durable yet, no further output (the client never
 *     sees COMMIT), and the backend exits afterwards;
 *   - the version failed (the agent's feed says every version above C
 *     failed, C < v): an ErrorResponse FATAL TK006 sent by hand, then no
 *     further output and the backend exits: the client hears that the
 *     transaction failed and never sees COMMIT. The rewind takes the version
 *     off every replica (rewind.c).
 *
 * A fast commit is acknowledged before it is durable. If it fails, its
 * session hears of it once, at its next statement, in a WARNING with
 * SQLSTATE TK006 (tk_safe_report_failed_fast_commit); any session can ask
 * tashkent.txn_state(v, e).
 *
 * failed_after and failed_epoch are set by the feed ('X' C, epoch, feed.c)
 * when the agent is told to rewind: the versions above C decided in that
 * epoch or an earlier one failed. The agent sets them back to "none"
 * (PG_UINT64_MAX) once its run after the rewind opens the admission gate.
 * The feed applies them asynchronously, maybe after the new epoch's first
 * commits: the epoch keeps a late 'X' from failing those (a later epoch's
 * version at a number above C did not fail). A commit
 * waiting for its turn with a failed version gets 40001 (turn.c): nothing
 * was committed.
 *
 * The mode is the agent's (tashkent.set_mode, called before the agent
 * admits clients in each of its runs, and after every server start, when
 * shared memory is new): only the agent knows whether the certifier
 * answers at the commit point, and a server setting could disagree with
 * it. In mw and base nothing here applies: PostgreSQL's synchronous_commit
 * keeps its meaning, and the certifier answers only once durable.
 */
#include "tashkent.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

/*
 * libpq/libpq.h (pq_putmessage, pq_flush) includes libpq-be.h, which wants
 * GSSAPI's headers when the server was built with it; the server headers
 * tashkent builds against come without them. Nothing here uses GSSAPI, and
 * Port's layout does not depend on it (its gss member is a pointer either
 * way).
 */
#undef ENABLE_GSS
#include "libpq/libpq.h"

PG_FUNCTION_INFO_V1(tashkent_set_mode);

/* No version is known to have failed. */
#define TK_NONE_FAILED PG_UINT64_MAX

/* The version this transaction's commit waits for after its locks (0: none). */
static uint64 safe_version = 0;
static uint64 safe_epoch = 0;

/* This transaction is a read-only one waiting at PRE_COMMIT. */
static bool read_waiting = false;

/*
 * A fast commit acknowledged before it was durable: this transaction's
 * (pending, until it commits) and this session's last one, until it is
 * known durable or failed; with the failures counted when it was decided.
 */
typedef struct FastCommit
{
	uint64		version;		/* 0: none */
	uint64		epoch;
	uint32		failures;
} FastCommit;

static FastCommit fast_pending;
static FastCommit fast_last;

void
tk_safe_shmem_init(void)
{
	SpinLockInit(&tk_shared->failed_lock);
	tk_shared->failed_after = TK_NONE_FAILED;
	tk_shared->failed_epoch = 0;
	pg_atomic_init_u32(&tk_shared->mode, TK_MODE_UNKNOWN);
	pg_atomic_init_u32(&tk_shared->failures, 0);
	for (int i = 0; i < TK_FAILURES_KEPT; i++)
	{
		pg_atomic_init_u64(&tk_shared->failed_from[i], 0);
		pg_atomic_init_u64(&tk_shared->failed_epoch_of[i], 0);
	}
}

bool
tk_mode_ed(void)
{
	return pg_atomic_read_u32(&tk_shared->mode) == TK_MODE_ED;
}

/* The common version C of the failure known now (TK_NONE_FAILED: none). */
uint64
tk_failed_after(void)
{
	uint64		c;

	SpinLockAcquire(&tk_shared->failed_lock);
	c = tk_shared->failed_after;
	SpinLockRelease(&tk_shared->failed_lock);
	return c;
}

/*
 * tk_version_failed: whether version `version`, decided in `epoch`, is
 * known to have failed: above C and of the failed epoch or an earlier one.
 * A later epoch reuses the numbers above C, and its versions did not fail:
 * so an 'X' the feed applies late, or a "none" it has not applied yet,
 * never fails them. Allocates nothing, raises nothing.
 */
bool
tk_version_failed(uint64 version, uint64 epoch)
{
	uint64		c;
	uint64		failed_epoch;

	SpinLockAcquire(&tk_shared->failed_lock);
	c = tk_shared->failed_after;
	failed_epoch = tk_shared->failed_epoch;
	SpinLockRelease(&tk_shared->failed_lock);
	return version > c && epoch <= failed_epoch;
}

/*
 * tk_failed_after_set records that every version above `version` decided
 * in `epoch` or earlier failed (TK_NONE_FAILED: none is known to) and
 * wakes every backend: the waits for durability and for the turn look
 * again. The agent sends the same failure again on every feed connection:
 * it is counted and logged once.
 */
void
tk_failed_after_set(uint64 version, uint64 epoch)
{
	bool		same;

	SpinLockAcquire(&tk_shared->failed_lock);
	same = tk_shared->failed_after == version &&
		(version == TK_NONE_FAILED || tk_shared->failed_epoch == epoch);
	tk_shared->failed_after = version;
	tk_shared->failed_epoch = version == TK_NONE_FAILED ? 0 : epoch;
	SpinLockRelease(&tk_shared->failed_lock);
	if (same)
		return;
	if (version != TK_NONE_FAILED)
	{
		uint32		n = pg_atomic_read_u32(&tk_shared->failures) + 1;

		/* the feed is the only writer: C and the epoch first, then the count */
		pg_atomic_write_u64(&tk_shared->failed_from[n % TK_FAILURES_KEPT], version);
		pg_atomic_write_u64(&tk_shared->failed_epoch_of[n % TK_FAILURES_KEPT], epoch);
		pg_write_barrier();
		pg_atomic_write_u32(&tk_shared->failures, n);
	}
	pg_memory_barrier();
	for (int i = 0; i < tk_shared->nslots; i++)
		SetLatch(&GetPGProcByNumber(i)->procLatch);
	if (version != TK_NONE_FAILED)
		ereport(LOG,
				(errmsg("tashkent: the versions after %llu of epoch %llu and earlier failed; the transactions that hold them end",
						(unsigned long long) version, (unsigned long long) epoch)));
}

/* Whether this transaction is safe: its synchronous_commit is not off. */
static bool
transaction_is_safe(void)
{
	return synchronous_commit > SYNCHRONOUS_COMMIT_OFF;
}

/*
 * tk_failures_known: the failures counted now. A commit reads it before
 * its turn checks that its version has not failed (tk_turn_wait): a
 * failure the check missed is counted after, and the session's report
 * compares its fast commit with it (tk_safe_report_failed_fast_commit).
 */
uint32
tk_failures_known(void)
{
	uint32		n = pg_atomic_read_u32(&tk_shared->failures);

	pg_read_barrier();
	return n;
}

/*
 * tk_safe_commit_choose: a certified transaction about to commit version
 * `version` of `epoch`; the agent knew durable_when_decided to be durable
 * when it answered, and failures_before_turn failures were counted before
 * its turn (tk_failures_known). Called at PRE_COMMIT, where errors are
 * still allowed.
 */
void
tk_safe_commit_choose(uint64 version, uint64 epoch, uint64 durable_when_decided, uint32 failures_before_turn)
{
	bool		safe;

	if (!tk_mode_ed())
		return;
	safe = transaction_is_safe();
	(void) set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	if (version <= durable_when_decided || tk_durable_reached(version))
		return;
	if (!safe)
	{
		fast_pending.version = version;
		fast_pending.epoch = epoch;
		fast_pending.failures = failures_before_turn;
		return;
	}
	tk_durable_wait_prepare();
	safe_version = version;
	safe_epoch = epoch;
}

/*
 * send_failed tells the client, by hand and without allocating, that its
 * transaction failed: an ErrorResponse FATAL TK006, flushed. Nothing is
 * sent after it (whereToSendOutput = DestNone), and the backend exits at
 * its next interrupt check, once the commit is cleaned up.
 */
static void
send_failed(uint64 version, uint64 epoch)
{
	static char message[1024];
	static char text[256];
	int			len = 0;

#define PUT_FIELD(code, value) \
	do { \
		int			n = strlen(value) + 1; \
		if (len + 1 + n < (int) sizeof(message) - 1) \
		{ \
			message[len++] = (code); \
			memcpy(message + len, (value), n); \
			len += n; \
		} \
	} while (0)

	snprintf(text, sizeof(text),
			 "the transaction failed: the certifier lost its version %llu (epoch %llu) before it became durable; nothing of it remains anywhere",
			 (unsigned long long) version, (unsigned long long) epoch);
	PUT_FIELD(PG_DIAG_SEVERITY, "FATAL");
	PUT_FIELD(PG_DIAG_SEVERITY_NONLOCALIZED, "FATAL");
	PUT_FIELD(PG_DIAG_SQLSTATE, "TK006");
	PUT_FIELD(PG_DIAG_MESSAGE_PRIMARY, text);
	PUT_FIELD(PG_DIAG_MESSAGE_HINT, "It is safe to retry.");
	message[len++] = '\0';
#undef PUT_FIELD
	if (whereToSendOutput == DestRemote)
	{
		(void) pq_putmessage('E', message, len);
		(void) pq_flush();
	}
	whereToSendOutput = DestNone;
	ereport(LOG_SERVER_ONLY,
			(errcode(ERRCODE_TK_TRANSACTION_FAILED),
			 errmsg("%s", text),
			 errdetail("The client was told so (FATAL TK006) and the backend exits.")));
	ProcDiePending = true;
	InterruptPending = true;
}

/* The client will not see COMMIT: the wait ended before durability. */
static void
leave_not_durable(uint64 version, uint64 epoch, const char *why)
{
	ereport(WARNING,
			(errcode(ERRCODE_ADMIN_SHUTDOWN),
			 errmsg("%s: this transaction committed at the commit point as version %llu of epoch %llu and is not durable yet",
					why, (unsigned long long) version, (unsigned long long) epoch),
			 errhint("Ask tashkent.txn_state(%llu, %llu) on any replica whether it became durable or failed.",
					 (unsigned long long) version, (unsigned long long) epoch)));
	whereToSendOutput = DestNone;
}

/*
 * tk_safe_commit_wait: RESOURCE_RELEASE_AFTER_LOCKS of a committed top-level
 * transaction; a safe one waits for its version's durability (see the
 * header). It must not fail: no allocation, no ERROR.
 */
void
tk_safe_commit_wait(void)
{
	uint64		version = safe_version;
	uint64		epoch = safe_epoch;
	bool		cancel_warned = false;

	if (fast_pending.version != 0)
		fast_last = fast_pending;
	fast_pending.version = 0;
	if (version == 0)
		return;
	safe_version = safe_epoch = 0;
	for (;;)
	{
		int			rc;

		ResetLatch(MyLatch);
		tk_durable_wait_begin(version);
		/* failed first: a later epoch may make the same number durable */
		if (tk_version_failed(version, epoch))
		{
			send_failed(version, epoch);
			break;
		}
		if (tk_durable_reached(version))
			break;
		if (ProcDiePending)
		{
			leave_not_durable(version, epoch, "terminating the connection");
			break;
		}
		if (QueryCancelPending)
		{
			QueryCancelPending = false;
			if (!cancel_warned)
				ereport(WARNING,
						(errmsg("canceling the wait for durability is not possible"),
						 errdetail("The transaction committed as version %llu; a safe transaction (synchronous_commit is not off) is acknowledged once the certifier made it durable.",
								   (unsigned long long) version)));
			cancel_warned = true;
		}
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_POSTMASTER_DEATH, -1, PG_WAIT_EXTENSION);
		if ((rc & WL_POSTMASTER_DEATH) || !PostmasterIsAlive())
		{
			leave_not_durable(version, epoch, "the server is stopping");
			ProcDiePending = true;
			break;
		}
	}
	tk_durable_wait_end();
}

/*
 * The highest version any snapshot of this transaction may have seen: the
 * replica's version, or the one being committed now (it is visible before
 * XACT_EVENT_COMMIT raises the replica's version). Read at PRE_COMMIT,
 * after every snapshot of the transaction: conservative, like ED
 * Postgres's maxLSN (§3.8).
 */
static uint64
visible_bound(void)
{
	uint64		bound;

	(void) tk_committed();		/* loaded */
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	bound = tk_shared->committed;
	for (int i = 0; i < tk_shared->nslots; i++)
	{
		TkSlot	   *slot = &tk_shared->slots[i];

		if (slot->pid != 0 && slot->state == TK_SLOT_COMMITTING && slot->version > bound)
			bound = slot->version;
	}
	LWLockRelease(tk_shared->lock);
	return bound;
}

static void
read_failed(uint64 bound)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("this transaction read versions that failed"),
			 errdetail("It may have read versions up to %llu; the certifier lost the versions after %llu before they became durable.",
					   (unsigned long long) bound, (unsigned long long) tk_failed_after()),
			 errhint("Nothing it read is guaranteed; the transaction might succeed if retried.")));
}

/*
 * Whether this transaction read data for a client: a client backend's,
 * past its start (InitPostgres reads the catalogs in transactions of its
 * own), with a snapshot. Background workers, autovacuum and walsenders
 * never wait.
 */
static bool
reads_for_a_client(void)
{
	return MyBackendType == B_BACKEND && IsNormalProcessingMode() &&
		OidIsValid(MyDatabaseId) && FirstSnapshotSet;
}

/*
 * tk_safe_read_wait: PRE_COMMIT of a transaction that is not certified. A
 * safe one that took a snapshot waits until every version it may have
 * read is durable (§2.2.1 property 5b; the wait of §3.8's Alg. 3). Nothing
 * is committed yet, so a cancel ends it with an error, as does a version
 * that failed (40001).
 */
void
tk_safe_read_wait(void)
{
	uint64		bound;

	if (!tk_mode_ed() || !reads_for_a_client() || !transaction_is_safe() || !tk_database_replicated())
		return;
	bound = visible_bound();
	if (bound == 0)
		return;					/* version 0: nothing was ever committed */
	tk_durable_wait_prepare();
	read_waiting = true;
	for (;;)
	{

		ResetLatch(MyLatch);
		tk_durable_wait_begin(bound);
		if (bound > tk_failed_after())
			read_failed(bound);
		if (tk_durable_reached(bound))
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1, PG_WAIT_EXTENSION);
		CHECK_FOR_INTERRUPTS();
	}
	tk_durable_wait_end();
	read_waiting = false;
}

/* tk_safe_xact_end: the transaction ended without its wait (an abort). */
void
tk_safe_xact_end(void)
{
	safe_version = safe_epoch = 0;
	fast_pending.version = 0;
	if (read_waiting)
		tk_durable_wait_end();
	read_waiting = false;
}

/*
 * tk_safe_report_failed_fast_commit: at each statement, a session whose
 * last fast commit failed since (Kashi §2.2.1, property 4: acknowledged,
 * then failed) hears of it once, in a WARNING with SQLSTATE TK006.
 * Versions fail as a suffix of the replica's history at a failure, and
 * the fast commit was in that history (it committed here), so it failed
 * iff it lies above the common version C of the first failure of its
 * epoch or a later one counted since its turn; one at or below C is
 * durable (C is in the certifier's synced log), so later failures cannot
 * take it. A failure of an earlier epoch, applied late by the feed, says
 * nothing of it. Before any failure, durability clears it. The WARNING
 * names C: the session's earlier fast commits above it failed too.
 */
void
tk_safe_report_failed_fast_commit(void)
{
	uint32		failures;

	if (fast_last.version == 0)
		return;
	failures = pg_atomic_read_u32(&tk_shared->failures);
	pg_read_barrier();
	if (failures - fast_last.failures > TK_FAILURES_KEPT)
	{
		fast_last.version = 0;	/* too many since: ask txn_state */
		return;
	}
	for (; fast_last.failures != failures; fast_last.failures++)
	{
		uint32		n = fast_last.failures + 1;
		uint64		from = pg_atomic_read_u64(&tk_shared->failed_from[n % TK_FAILURES_KEPT]);
		uint64		failed_epoch = pg_atomic_read_u64(&tk_shared->failed_epoch_of[n % TK_FAILURES_KEPT]);

		if (failed_epoch < fast_last.epoch)
			continue;
		if (fast_last.version > from)
			ereport(WARNING,
					(errcode(ERRCODE_TK_TRANSACTION_FAILED),
					 errmsg("this session's last commit failed: the certifier lost version %llu (epoch %llu) before it became durable; nothing of it remains anywhere",
							(unsigned long long) fast_last.version, (unsigned long long) fast_last.epoch),
					 errdetail("It was fast (synchronous_commit = off), so it was acknowledged at its commit point, before it was durable. Every version above %llu of epoch %llu or earlier failed with it, so did this session's earlier fast commits among them.",
							   (unsigned long long) from, (unsigned long long) failed_epoch),
					 errhint("Do it again if it must be done.")));
		fast_last.version = 0;
		return;
	}
	if (tk_durable_reached(fast_last.version))
		fast_last.version = 0;
}

/*
 * tashkent.set_mode(mode): the agent's durability placement, 'base', 'mw'
 * or 'ed'; the agent calls it before it admits clients.
 */
Datum
tashkent_set_mode(PG_FUNCTION_ARGS)
{
	char	   *mode = text_to_cstring(PG_GETARG_TEXT_PP(0));
	TkMode		m;

	if (strcmp(mode, "base") == 0)
		m = TK_MODE_BASE;
	else if (strcmp(mode, "mw") == 0)
		m = TK_MODE_MW;
	else if (strcmp(mode, "ed") == 0)
		m = TK_MODE_ED;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown durability mode \"%s\"", mode),
				 errhint("The modes are base, mw and ed.")));
	pg_atomic_write_u32(&tk_shared->mode, (uint32) m);
	PG_RETURN_VOID();
}
