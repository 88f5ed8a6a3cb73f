/*
 * causal.c: read-your-writes and causal reads across replicas.
 *
 * A commit on one replica is visible there when COMMIT returns, and on
 * another replica once that replica has applied its version. Three tools
 * let a client read what it (or anyone before it) wrote elsewhere:
 *
 *   tashkent.last_commit_version()  the version of this session's last
 *       writing commit (NULL before the first one): a client carries it to
 *       another replica. tashkent.last_commit() adds the epoch that
 *       certified it, which names the transaction across a failure of the
 *       certifier (tashkent.txn_state, state.c).
 *   tashkent.wait_for_version(v, timeout)  waits until this replica has
 *       committed v. It sleeps on the backend's latch, which tk_turn_pass
 *       (turn.c) sets when a commit reaches the version the backend waits
 *       for: no polling.
 *   tashkent.sync_wait  each transaction first asks the agent for the
 *       certifier's durable version (one round trip over the channel,
 *       channel.c 'S') and waits until this replica has committed it
 *       (Galera's wsrep_sync_wait).
 *
 * And one wait no client asks for: while the replica has fallen behind
 * (flow control, the agent's flowcontrol.go), its agent sets a catch-up
 * target, and each transaction waits for it at its first write
 * (tashkent.catch_up_wait; catch_up below).
 *
 * Where sync_wait waits. PostgreSQL 15 has no hook at transaction start,
 * and it takes a statement's first snapshot before any hook runs:
 * exec_simple_query and exec_parse_message take one for parse analysis,
 * exec_bind_message one for parameters, PortalStart one for a SELECT's
 * execution, PortalRunUtility one for a utility statement that needs it.
 * So the wait happens at the first of these hooks that a transaction
 * reaches (once per transaction, by its local id):
 *
 *   ProcessUtility, for BEGIN / START TRANSACTION: before any snapshot;
 *   post_parse_analyze, for the first SELECT/INSERT/UPDATE/DELETE/MERGE
 *       (simple protocol, and Parse in the extended protocol): after the
 *       snapshot for analysis;
 *   ExecutorStart, for a statement prepared in an earlier transaction
 *       (Bind without Parse): after the execution snapshot;
 *   ProcessUtility, for a utility statement that needs a snapshot (COPY,
 *       DO, CALL, EXPLAIN, ...): after it.
 *
 * Then the snapshots taken before the wait are taken again. Under READ
 * COMMITTED only the executor's is used for data: ExecutorStart replaces
 * it. Under REPEATABLE READ the transaction's snapshot, taken for this
 * first statement and not yet used to read data, is dropped and taken anew
 * (retake_transaction_snapshot), which snapmgr.c allows only while nothing
 * else holds it. A utility statement's snapshot is held by the portal, and
 * a real SERIALIZABLE transaction's by the predicate lock manager: if such
 * a snapshot lacks the version waited for, the statement fails with 40001
 * (a retry starts after the wait, so it sees the version).
 */
#include "tashkent.h"

#include "catalog/pg_class.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "parser/analyze.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "tcop/utility.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* The version of this session's last writing commit (0: none yet). */
static uint64 last_commit_version = 0;

/* The epoch that certified it. */
static uint64 last_commit_epoch = 0;

/* The transaction (local id) that sync_wait has waited for. */
static LocalTransactionId synced_lxid = InvalidLocalTransactionId;

/* The transaction (local id) that waited for the replica to catch up. */
static LocalTransactionId caught_up_lxid = InvalidLocalTransactionId;

static post_parse_analyze_hook_type prev_post_parse_analyze = NULL;
static ExecutorStart_hook_type prev_executor_start = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;

PG_FUNCTION_INFO_V1(tashkent_last_commit_version);
PG_FUNCTION_INFO_V1(tashkent_last_commit);
PG_FUNCTION_INFO_V1(tashkent_wait_for_version);

/*
 * tk_causal_note_commit: this session's transaction committed `version`,
 * certified in `epoch`.
 */
void
tk_causal_note_commit(uint64 version, uint64 epoch)
{
	last_commit_version = version;
	last_commit_epoch = epoch;
}

static void
clear_waiting(void)
{
	TkSlot	   *slot = tk_my_slot();

	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	slot->waiting_for = 0;
	/* a doom for this wait, set since the loop last looked, is moot */
	if (slot->doom_reason == TK_DOOM_WAITER)
	{
		slot->doom_reason = TK_DOOM_NONE;
		slot->doomed_by = 0;
	}
	LWLockRelease(tk_shared->lock);
}

static void
not_applied(uint64 version, uint64 committed, const char *setting)
{
	ereport(ERROR,
			(errcode(ERRCODE_TK_VERSION_WAIT_TIMEOUT),
			 errmsg("this replica has not applied version %llu within %s: its version is %llu",
					(unsigned long long) version, setting, (unsigned long long) committed),
			 errdetail("The replica applies the cluster's versions in order; it is behind, or its agent is not applying."),
			 errhint("Retry, read from another replica, or check this replica's lag (tashkent status) and its agent's log.")));
}

/*
 * A wait that holds a lock the version it waits for needs (the statement
 * that waits locked its tables when it was analyzed; a remote TRUNCATE or
 * DDL needs them): the lock watch woke it to give way (doom.c).
 */
static void
give_way(uint64 version, uint64 by)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access: the wait for version %llu holds a lock that version %llu needs",
					(unsigned long long) version, (unsigned long long) by),
			 errdetail("The statement that waits locked its tables before the wait; a version it waits for changes one of them (TRUNCATE, DDL)."),
			 errhint("The transaction might succeed if retried; or start it with BEGIN, where tashkent.sync_wait waits before it takes any lock.")));
}

/*
 * wait_committed waits until this replica has committed `version`, at the
 * latest until `deadline`, and returns the replica's version. The slot's
 * waiting_for is set under the lock that tk_turn_pass reads it under, after
 * reading the version under that lock: a commit cannot pass unseen. A
 * cancel or statement_timeout ends the wait with its error; so does the
 * lock watch, with 40001, when the wait holds a lock the versions it waits
 * for need (give_way).
 */
static uint64
wait_committed(uint64 version, TimestampTz deadline, const char *setting, bool soft)
{
	TkSlot	   *slot = tk_my_slot();
	uint64		committed = 0;

	PG_TRY();
	{
		for (;;)
		{
			long		secs;
			int			usecs;
			long		left;

			uint64		doomed_by = 0;

			ResetLatch(MyLatch);
			LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
			committed = tk_committed_locked();
			slot->waiting_for = committed < version ? version : 0;
			if (slot->doom_reason == TK_DOOM_WAITER)
			{
				doomed_by = slot->doomed_by;
				slot->doom_reason = TK_DOOM_NONE;
				slot->doomed_by = 0;
			}
			LWLockRelease(tk_shared->lock);
			if (committed >= version)
				break;
			if (soft && (doomed_by != 0 || tk_shared->catch_up_target == 0))
			{
				clear_waiting();	/* given way, or the catch-up is over */
				break;
			}
			if (doomed_by != 0)
			{
				clear_waiting();
				give_way(version, doomed_by);
			}
			TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
			left = secs * 1000 + usecs / 1000;
			if (left <= 0 && GetCurrentTimestamp() >= deadline)
			{
				clear_waiting();
				if (soft)
					return committed;
				not_applied(version, committed, setting);
			}
			/* a soft wait also looks for the end of the catch-up */
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 soft ? Min(Max(left, 1), 10) : Max(left, 1), PG_WAIT_EXTENSION);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		clear_waiting();
		PG_RE_THROW();
	}
	PG_END_TRY();
	return committed;
}

/*
 * tk_wait_committed waits until this replica has committed `version`, at
 * the latest until `deadline` (then TK004 naming `setting`), and returns
 * the replica's version.
 */
uint64
tk_wait_committed(uint64 version, TimestampTz deadline, const char *setting)
{
	return wait_committed(version, deadline, setting, false);
}

/*
 * The newest version the transaction's snapshot holds, under REPEATABLE
 * READ once it has one; UINT64_MAX otherwise (the next snapshot is yet to
 * be taken).
 */
static uint64
transaction_snapshot_version(void)
{
	if (!IsolationUsesXactSnapshot() || !FirstSnapshotSet)
		return PG_UINT64_MAX;
	return tk_snapshot_version(GetTransactionSnapshot());
}

/*
 * tashkent.last_commit_version(): the version of this session's last
 * writing commit, NULL if it has made none (read-only transactions and
 * writes to temporary tables have no version). A transaction that the
 * cluster committed but that failed here after certification counts: its
 * version is applied here from the log.
 */
Datum
tashkent_last_commit_version(PG_FUNCTION_ARGS)
{
	if (last_commit_version == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) last_commit_version);
}

/*
 * tashkent.last_commit(OUT version, OUT epoch): the version of this
 * session's last writing commit and the epoch that certified it (the
 * decision carries it), NULLs if it has made none. Counted as for
 * last_commit_version.
 */
Datum
tashkent_last_commit(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "tashkent: last_commit must return a record");
	values[0] = Int64GetDatum((int64) last_commit_version);
	values[1] = Int64GetDatum((int64) last_commit_epoch);
	if (last_commit_version == 0)
		nulls[0] = nulls[1] = true;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/*
 * tashkent.wait_for_version(version, timeout_ms): returns this replica's
 * version once it is at least `version`, so that the next snapshot taken
 * here holds it (the next statement's under READ COMMITTED, the next
 * transaction's under REPEATABLE READ); fails with TK004 after timeout_ms.
 * Inside a REPEATABLE READ transaction block whose snapshot lacks the
 * version, no wait can help the rest of the transaction: 25001 at once.
 */
Datum
tashkent_wait_for_version(PG_FUNCTION_ARGS)
{
	int64		version = PG_GETARG_INT64(0);
	int64		timeout = PG_GETARG_INT64(1);
	uint64		committed;

	if (version < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version %lld is not a version: versions start at 1", (long long) version)));
	if (timeout < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the timeout must be zero or more milliseconds, not %lld", (long long) timeout)));
	if (IsTransactionBlock() && transaction_snapshot_version() < (uint64) version)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("this REPEATABLE READ transaction cannot see version %lld: its snapshot was taken at version %llu",
						(long long) version, (unsigned long long) transaction_snapshot_version()),
				 errdetail("A wait cannot change a snapshot already taken."),
				 errhint("Call tashkent.wait_for_version before BEGIN, or as its own statement before the transaction, or use READ COMMITTED.")));
	committed = tk_committed();
	if (committed < (uint64) version)
	{
		TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   Min(timeout, (int64) INT_MAX));

		committed = wait_committed((uint64) version, deadline, psprintf("%lld ms", (long long) timeout), false);
	}
	PG_RETURN_INT64((int64) committed);
}

static void
stale_snapshot(uint64 version, bool soft)
{
	if (soft)
		return;					/* the catch-up wait: no snapshot is worth an error */
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access: this statement's snapshot was taken before this replica applied version %llu, which tashkent.sync_wait waited for",
					(unsigned long long) version),
			 errdetail("The statement needed a snapshot before tashkent could wait; the replica has the version now."),
			 errhint("The transaction might succeed if retried; or start it with BEGIN, where tashkent.sync_wait waits before any snapshot.")));
}

/*
 * The executor's query holds its snapshot registered (CreateQueryDesc),
 * and the active stack holds it too: both let go of it before it is taken
 * again, and the query registers the new one.
 */
static void
release_query_snapshot(QueryDesc *qd)
{
	if (qd != NULL)
		UnregisterSnapshot(qd->snapshot);
}

static void
hold_query_snapshot(QueryDesc *qd)
{
	if (qd != NULL)
		qd->snapshot = RegisterSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
}

/* Pops the active stack; returns its depth. */
static int
pop_active_snapshots(void)
{
	int			depth = 0;

	while (ActiveSnapshotSet())
	{
		PopActiveSnapshot();
		depth++;
	}
	return depth;
}

static void
push_active_snapshots(int depth)
{
	for (int i = 0; i < depth; i++)
		PushActiveSnapshot(GetTransactionSnapshot());
}

/*
 * retake_transaction_snapshot drops the REPEATABLE READ transaction
 * snapshot that the transaction's first statement took before the wait,
 * and takes it again. snapmgr.c allows it only while nothing but the
 * transaction snapshot is registered (the query's registration is let go
 * of first); the active stack is popped and pushed again to the same
 * depth with the new snapshot. Returns false, with everything as it was,
 * if it cannot.
 */
static bool
retake_transaction_snapshot(QueryDesc *qd)
{
	int			depth;

	if (IsolationIsSerializable() || XactHasExportedSnapshots())
		return false;
	release_query_snapshot(qd);
	InvalidateCatalogSnapshot();
	if (!ThereAreNoPriorRegisteredSnapshots())
	{
		if (qd != NULL)
			qd->snapshot = RegisterSnapshot(qd->snapshot);	/* still active */
		return false;
	}
	depth = pop_active_snapshots();
	AtEOXact_Snapshot(false, true);
	push_active_snapshots(depth);
	hold_query_snapshot(qd);
	return true;
}

/*
 * After the wait for `version`: make the snapshots this transaction reads
 * with hold it (see the header). qd: the executor's query, when the wait
 * ran in ExecutorStart; utility: when it ran for a utility statement
 * whose snapshot the portal holds.
 */
static void
follow_wait(uint64 version, QueryDesc *qd, bool utility, bool soft)
{
	if (!FirstSnapshotSet)
		return;
	/*
	 * The catch-up wait comes at a transaction's first write, maybe after
	 * it read: a REPEATABLE READ transaction keeps the snapshot it read
	 * with (a newer one would let it write over versions its reads did not
	 * see, without PostgreSQL's "could not serialize access due to
	 * concurrent update": a lost update). Its write is then refused by
	 * certification or by PostgreSQL, and its retry starts fresh.
	 */
	if (soft && IsolationUsesXactSnapshot())
		return;
	/*
	 * Inside a portal that holds its own snapshot (a procedure that
	 * committed runs its next statement in a new transaction, under the
	 * CALL's or DO's portal), the active stack belongs to outer levels as
	 * well: no snapshot of it is taken again. A stale one fails instead.
	 */
	if (ActivePortal != NULL && ActivePortal->portalSnapshot != NULL)
	{
		if (tk_snapshot_version(qd != NULL ? qd->snapshot : GetActiveSnapshot()) < version)
			stale_snapshot(version, soft);
		return;
	}
	if (!IsolationUsesXactSnapshot())
	{
		if (qd != NULL && tk_snapshot_version(qd->snapshot) < version)
		{
			int			depth;

			release_query_snapshot(qd);
			depth = pop_active_snapshots();
			push_active_snapshots(depth);
			hold_query_snapshot(qd);
		}
		else if (utility && ActiveSnapshotSet() && tk_snapshot_version(GetActiveSnapshot()) < version)
			stale_snapshot(version, soft);
		return;
	}
	if (tk_snapshot_version(GetTransactionSnapshot()) >= version)
		return;
	if (utility || !retake_transaction_snapshot(qd))
		stale_snapshot(version, soft);
}

/*
 * Whether sync_wait has yet to wait for the current transaction: a client's
 * backend only (a parallel worker inherits the setting with its leader's
 * snapshot, which the leader took after its wait).
 */
static inline bool
sync_due(void)
{
	return tk_sync_wait && MyBackendType == B_BACKEND && MyProc != NULL &&
		MyProc->lxid != synced_lxid && !tk_backend_is_applier && !IsInParallelMode() &&
		IsTransactionState() && !IsAbortedTransactionBlockState();
}

static void
sync_transaction(QueryDesc *qd, bool utility)
{
	TimestampTz deadline;
	uint64		version;
	LocalTransactionId lxid = MyProc->lxid;

	if (!tk_database_replicated())
	{
		synced_lxid = lxid;
		return;
	}
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), tk_sync_wait_timeout);
	version = tk_channel_sync(deadline);
	if (tk_committed() < version)
		(void) wait_committed(version, deadline, "tashkent.sync_wait_timeout", false);
	follow_wait(version, qd, utility, false);
	/*
	 * Only now: a wait that failed inside a block that catches the error
	 * (PL/pgSQL's EXCEPTION) is waited for again at the next statement.
	 */
	synced_lxid = lxid;
}

/* How long a transaction waits for its replica to catch up, at most. */
#define CATCH_UP_WAIT_MAX_MS 1000

/*
 * Whether the current transaction, about to write for the first time
 * (it has no transaction id: it holds no row lock), waits for its replica
 * to catch up first: the agent set a catch-up
 * target (flow control: the replica fell behind, tashkent.
 * set_catch_up_target) that the replica has not reached. A transaction
 * that writes from far behind would conflict with the versions not yet
 * applied, and hold row locks their apply needs until it does; waiting
 * before its first write, it writes from a fresh snapshot (READ COMMITTED,
 * or a first statement), or fails certification without having held the
 * apply up. Read-only transactions never wait.
 */
static inline bool
catch_up_due(void)
{
	return tk_catch_up_wait && tk_shared != NULL && tk_shared->catch_up_target > tk_shared->committed &&
		MyBackendType == B_BACKEND && MyProc != NULL && MyProc->lxid != caught_up_lxid &&
		!tk_backend_is_applier && !IsInParallelMode() && IsTransactionState() &&
		!IsAbortedTransactionBlockState() &&
		!TransactionIdIsValid(GetTopTransactionIdIfAny());	/* no row locked yet */
}

/*
 * Whether the executor starts a client's statement, not one nested in
 * another (a function's, which a SELECT's scan may call): only then are
 * the active snapshots all the statement's own, to be taken again after
 * the wait. A nested first write does not wait.
 */
static bool
top_level_statement(void)
{
	return ActivePortal == NULL ||
		(ActivePortal->queryDesc == NULL && ActivePortal->portalSnapshot == NULL);
}

static void
catch_up(QueryDesc *qd)
{
	uint64		target = tk_shared->catch_up_target;
	uint64		reached;

	caught_up_lxid = MyProc->lxid;
	if (target == 0 || tk_committed() >= target || !tk_database_replicated())
		return;
	/* well inside a statement_timeout, which would end the wait with 57014 */
	reached = wait_committed(target,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 StatementTimeout > 0 ? Min(CATCH_UP_WAIT_MAX_MS, StatementTimeout / 2) : CATCH_UP_WAIT_MAX_MS),
							 NULL, true);
	follow_wait(Min(reached, target), qd, false, true);
}

/*
 * The catch-up wait runs at executor start only, never while a statement
 * is parsed: an error there (a cancel) would leave a client's named
 * prepared statement uncreated, which pgbench, for one, does not expect.
 */

static void
causal_post_parse_analyze(ParseState *pstate, Query *query, JumbleState *jstate)
{
	if (prev_post_parse_analyze)
		prev_post_parse_analyze(pstate, query, jstate);
	tk_safe_report_failed_fast_commit();
	if (query->commandType != CMD_UTILITY && sync_due())
		sync_transaction(NULL, false);
}

/* Whether the statement writes a table that is not temporary. */
static bool
writes_replicated_table(PlannedStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->resultRelations)
	{
		RangeTblEntry *rte = rt_fetch(lfirst_int(lc), stmt->rtable);

		if (get_rel_persistence(rte->relid) != RELPERSISTENCE_TEMP)
			return true;
	}
	return false;
}

/*
 * A client's first write is refused while the agent says the replica
 * cannot apply (its apply made no progress for --refuse-writes-after:
 * tashkent.set_write_refusal). Certified, the transaction would wait at
 * COMMIT for versions the replica cannot apply, for as long as that
 * lasts; refused, its client can write on another replica. Reads go on.
 * The agent refuses certification meanwhile too, for writes that do not
 * pass here (COPY, a transaction that wrote before the refusal). Writes
 * under tashkent.maintenance are local, never certified: they go on.
 */
static void
refuse_write_while_stuck(QueryDesc *qd)
{
	char		why[sizeof(tk_shared->write_refusal)];

	if (tk_shared == NULL || tk_shared->write_refusal[0] == '\0' || tk_backend_is_applier || tk_maintenance ||
		MyBackendType != B_BACKEND || TransactionIdIsValid(GetTopTransactionIdIfAny()) ||
		!writes_replicated_table(qd->plannedstmt) || !tk_database_replicated())
		return;
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	strlcpy(why, tk_shared->write_refusal, sizeof(why));
	LWLockRelease(tk_shared->lock);
	if (why[0] == '\0')
		return;
	ereport(ERROR,
			(errcode(ERRCODE_CANNOT_CONNECT_NOW),
			 errmsg("this replica cannot take writes now: %s", why),
			 errhint("Reads here go on. Write on another replica, or retry once this one applies again (tashkent status shows its lag).")));
}

static void
causal_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (!(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		tk_fence_check();		/* before any wait: a refusal is immediate */
	/* a prepared statement executed again is not parsed again */
	tk_safe_report_failed_fast_commit();
	if (!(eflags & EXEC_FLAG_EXPLAIN_ONLY) && queryDesc->operation != CMD_SELECT)
		refuse_write_while_stuck(queryDesc);
	if (!(eflags & EXEC_FLAG_EXPLAIN_ONLY) && catch_up_due() && top_level_statement() &&
		(queryDesc->operation != CMD_SELECT || queryDesc->plannedstmt->hasModifyingCTE ||
		 queryDesc->plannedstmt->rowMarks != NIL))
		catch_up(queryDesc);
	if (sync_due() && !(eflags & EXEC_FLAG_EXPLAIN_ONLY))
		sync_transaction(queryDesc, false);
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/* BEGIN and START TRANSACTION, which open a transaction block. */
static bool
begins_block(Node *stmt)
{
	return IsA(stmt, TransactionStmt) &&
		(((TransactionStmt *) stmt)->kind == TRANS_STMT_BEGIN ||
		 ((TransactionStmt *) stmt)->kind == TRANS_STMT_START);
}

static void
causal_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					   ProcessUtilityContext context, ParamListInfo params,
					   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (begins_block(pstmt->utilityStmt) || PlannedStmtRequiresSnapshot(pstmt))
		tk_fence_check();
	tk_safe_report_failed_fast_commit();
	if (sync_due())
	{
		if (begins_block(pstmt->utilityStmt))
			sync_transaction(NULL, false);
		else if (PlannedStmtRequiresSnapshot(pstmt))
			sync_transaction(NULL, true);
	}
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
}

void
tk_causal_init(void)
{
	prev_post_parse_analyze = post_parse_analyze_hook;
	post_parse_analyze_hook = causal_post_parse_analyze;
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = causal_executor_start;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = causal_process_utility;
}
