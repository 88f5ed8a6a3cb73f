/*
 * commit.c: a writing transaction's commit, inside its backend (Tashkent
 * §6.2 steps C1 to C5).
 *
 * At XACT_EVENT_PRE_COMMIT, after deferred constraints were checked, a
 * transaction that captured changes of replicated tables (capture.c, ddl.c)
 * sends its writeset and its start version to the agent and waits for the
 * certifier's decision. An abort is an ERROR (40001 for a conflict), which
 * rolls the transaction back. A commit with version v waits for v's turn,
 * makes its commit record carry v (turn.c), and lets the commit proceed;
 * XACT_EVENT_COMMIT runs once the commit is visible and passes the turn on.
 *
 * The start version. A transaction without DDL is certified from the
 * replica's version at PRE_COMMIT, not from its snapshot's: every version
 * up to it is committed here, and one that wrote a row this transaction
 * wrote committed before this transaction wrote the row: afterwards it
 * would have waited for the row's lock, which this transaction still
 * holds (an apply locks the parent rows its versions reference, FOR KEY
 * SHARE, as the origin's foreign-key checks did, and unique index entries
 * wait for the inserting transaction, so this holds for references and
 * unique values too). Under REPEATABLE READ PostgreSQL itself then refused
 * that write (40001, "could not serialize access due to concurrent
 * update") if the version was not in the snapshot; under READ COMMITTED
 * the write was based on that version's row, as on a single server. What
 * is left for the certifier are the versions not yet applied here, which
 * no snapshot here could see: the write-write conflicts between replicas,
 * and nothing more, so a transaction is never refused for a conflict
 * PostgreSQL would have resolved on one server. DDL takes no such lock in
 * every case (ALTER SCHEMA ... RENAME locks no table the transaction
 * wrote), so if a version that ran DDL committed here after the
 * transaction's first change, it is certified from the replica's version
 * at that first change instead: the DDL version, which conflicts with
 * every write, is then a conflict. DDL is replicated as its text and run
 * again elsewhere, where it reads the data as of its position in the
 * order; a transaction that ran DDL is certified from the version its
 * own snapshot saw (ddl.c), so that a version it did not see is a
 * conflict (the schema key conflicts with every write).
 *
 * Rows of a table without a primary key break the lock argument: equal
 * rows cannot be told apart, so a version that updated or deleted "the
 * same" row (its whole old row is the key both certify) may have been
 * applied here to another, equal row, which this transaction did not
 * lock. A transaction that updated or deleted such a row is certified
 * from the replica's version at the first of those changes: a version
 * applied after it is a conflict, and exactly one of two concurrent
 * updates of equal rows commits.
 *
 * A streamed transaction (stream.c) sends its writeset in fragments and
 * is certified on whole tables; its commit is a span of consecutive
 * versions, one per fragment, which it commits at once: it waits for the
 * turn of the first and passes the turn on after the last.
 *
 * In mode ed the certifier answers at the commit point, before the version
 * is durable: a safe transaction's COMMIT then waits for durability after
 * its locks are released, and a safe read-only transaction waits at
 * PRE_COMMIT for what it may have read (safe.c).
 *
 * A certified transaction that fails after PRE_COMMIT (an error in the
 * rest of PostgreSQL's pre-commit work, or its backend terminated while it
 * waited for its turn) tells the agent, which applies the version in its
 * place (soft recovery, Tashkent §8.1): the replica never skips a version.
 */
#include "tashkent.h"

#include "access/transam.h"
#include "miscadmin.h"
#include "storage/predicate.h"
#include "storage/proc.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* How long a refused transaction waits for the version it conflicted with. */
#define CONFLICT_CATCH_UP_MS 100

/* The last version this transaction commits, once it has one (0: none). */
static uint64 holding = 0;

/* The epoch that certified it (the agent's decision says). */
static uint64 holding_epoch = 0;

/*
 * This transaction put its backend's slot in the commit order (it asked
 * for certification, or applied): its end must take it out again. Other
 * transactions, most of them, never touch the shared state.
 */
static bool in_commit_order = false;

static void
raise_abort(const TkDecision *d)
{
	switch (d->abort_reason)
	{
		case TK_ABORT_LIMIT:
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("the transaction's writeset exceeds a limit of the certifier"),
					 errdetail_internal("%s", d->detail)));
			break;
		case TK_ABORT_INVALID:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("the certifier refused the transaction's writeset as malformed"),
					 errdetail_internal("%s", d->detail)));
			break;
		case TK_ABORT_TOO_OLD:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access: the transaction's snapshot is older than the certifier remembers"),
					 errdetail_internal("%s", d->detail),
					 errhint("The transaction might succeed if retried.")));
			break;
		case TK_ABORT_NOT_STAGED:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not certify the transaction: the certifier lost its streamed writeset"),
					 errdetail_internal("%s", d->detail),
					 errhint("Nothing was committed; the transaction might succeed if retried.")));
			break;
		case TK_ABORT_OVERLOADED:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not certify the transaction: the certifier is overloaded"),
					 errdetail_internal("%s", d->detail),
					 errhint("The transaction might succeed if retried.")));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent update on another replica"),
					 errdetail_internal("%s", d->detail),
					 errhint("The transaction might succeed if retried.")));
	}
}

/*
 * A transaction refused for a conflict with version v is retried at once
 * by most clients; until v is applied here, the retry's snapshot lacks it
 * and would conflict with it again. So the backend, once the refused
 * transaction has released its locks (v's apply may need them: it wrote
 * the row this one wrote), waits a little for v before it reads the
 * client's next message. The client has the error by then (PostgreSQL
 * reports it before it aborts), but its retry runs only afterwards.
 */
static uint64 conflict_to_await = 0;

static void
await_conflict(void)
{
	uint64		version = conflict_to_await;
	TimestampTz deadline;

	if (version == 0)
		return;
	conflict_to_await = 0;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), CONFLICT_CATCH_UP_MS);
	while (version > tk_committed() && GetCurrentTimestamp() < deadline)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * after_locks: the top-level transaction's locks are released. A
 * committed one waits for its durability if it is safe (safe.c); a
 * refused one for the version it conflicted with.
 */
static void
after_locks(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	if (isCommit)
		tk_safe_commit_wait();
	await_conflict();
}

static void
set_slot(TkSlotState state, uint64 first, uint64 version)
{
	TkSlot	   *slot = tk_my_slot();

	in_commit_order = true;
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	slot->state = state;
	slot->first = first;
	slot->version = version;
	slot->agent_generation = tk_agent_generation_seen();
	LWLockRelease(tk_shared->lock);
}

/* set_slot_certifying: the writeset goes for certification now. */
static void
set_slot_certifying(void)
{
	set_slot(TK_SLOT_CERTIFYING, 0, 0);
}

/* The version the transaction is certified from (see the header). */
static uint64
start_version(void)
{
	uint64		first = tk_capture_first_version();
	uint64		row_identity = tk_capture_first_row_identity_version();

	if (tk_capture_has_ddl())
		return tk_capture_ddl_label();
	if (first != 0 && tk_last_ddl_version() > first)
		return first;
	if (row_identity != 0)
		return row_identity;
	return tk_committed();
}

/* take_decision: a decision other than commit is an ERROR. */
static void
take_decision(const TkDecision *decision)
{
	switch (decision->kind)
	{
		case TK_DECISION_COMMIT:
			break;
		case TK_DECISION_ABORT:
			set_slot(TK_SLOT_IDLE, 0, 0);
			conflict_to_await = decision->version;
			raise_abort(decision);
			break;
		case TK_DECISION_UNAVAILABLE:
			ereport(ERROR,
					(errcode(ERRCODE_CANNOT_CONNECT_NOW),
					 errmsg("this replica cannot commit writes now: %s", decision->detail),
					 errhint("Reads still work; retry the transaction later.")));
			break;
		case TK_DECISION_UNKNOWN:
			ereport(ERROR,
					(errcode(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN),
					 errmsg("the outcome of this transaction is unknown: %s", decision->detail),
					 errdetail("If the cluster committed it, this replica applies it from the certifier's log like any other version; here it was rolled back."),
					 errhint("Check whether its changes are there before retrying it.")));
			break;
	}
}

/*
 * commit_in_turn: the certified versions first..last (one, or a streamed
 * writeset's span) wait for their turn and go with the commit record.
 */
static void
commit_in_turn(uint64 first, const TkDecision *decision)
{
	uint64		last = decision->version;
	uint32		failures;

	holding = last;
	holding_epoch = decision->epoch;
	tk_doom_clear();			/* a blocker doomed before: certified now */
	set_slot(TK_SLOT_HOLDING, first, last);
	failures = tk_failures_known();
	tk_turn_wait(first, holding_epoch, false);
	tk_safe_commit_choose(last, decision->epoch, decision->durable, failures);
	tk_turn_record(first, last);
}

/*
 * certify_streamed: a streamed transaction (stream.c) sends its fragments
 * and its certified writeset; a commit is the span of versions
 * decision.version - fragments + 1 .. decision.version, one per fragment.
 */
static void
certify_streamed(void)
{
	TkDecision	decision;
	uint32		fragments;

	if (tk_stream_empty())
	{
		/* every change rolled back: nothing to replicate */
		tk_stream_close();
		return;
	}
	fragments = tk_stream_certify(start_version(), set_slot_certifying, &decision);
	take_decision(&decision);
	if (fragments == 0 || decision.version < fragments)
		elog(ERROR, "tashkent: the agent committed %u fragments as version %llu",
			 fragments, (unsigned long long) decision.version);
	commit_in_turn(decision.version - fragments + 1, &decision);
}

static void
certify_and_wait_turn(void)
{
	StringInfoData writeset;
	TkDecision	decision;
	uint64		start;

	/*
	 * SERIALIZABLE is mapped to REPEATABLE READ where ddl.c sees it asked
	 * for; one set by other means gets its SSI check now, before the
	 * cluster commits the transaction, rather than after (where PostgreSQL
	 * would run it).
	 */
	if (IsolationIsSerializable())
		PreCommit_CheckForSerializationFailure();

	if (tk_stream_active())
	{
		certify_streamed();
		return;
	}
	initStringInfo(&writeset);
	tk_writeset_encode(tk_capture_events(), &writeset);
	if (writeset.len == 0)
	{
		/* every change cancelled out (writeset.c): nothing to replicate */
		pfree(writeset.data);
		return;
	}
	start = start_version();

	set_slot(TK_SLOT_CERTIFYING, 0, 0);
	tk_channel_certify(start, &writeset, &decision);
	pfree(writeset.data);
	take_decision(&decision);
	commit_in_turn(decision.version, &decision);
}

static void
apply_in_turn(void)
{
	TkSlot	   *slot = tk_my_slot();

	in_commit_order = true;
	LWLockAcquire(tk_shared->lock, LW_EXCLUSIVE);
	slot->state = TK_SLOT_APPLYING;
	slot->first = tk_apply_first;
	slot->version = tk_apply_last;
	LWLockRelease(tk_shared->lock);
	holding = tk_apply_last;
	tk_turn_wait(tk_apply_first, 0, true);
	tk_turn_record(tk_apply_first, tk_apply_last);
}

static void
pre_commit(void)
{
	if (tk_backend_is_applier)
	{
		if (tk_apply_first != 0)
			apply_in_turn();
		return;
	}
	if (tk_maintenance)
	{
		tk_stream_close();
		if (TransactionIdIsValid(GetTopTransactionIdIfAny()) && tk_database_replicated())
			ereport(LOG,
					(errmsg("tashkent.maintenance is on: transaction %u commits without replication",
							GetTopTransactionIdIfAny())));
		return;
	}
	if (tk_capture_pending())
		certify_and_wait_turn();
	if (holding == 0)
		tk_safe_read_wait();
}

static void
end_transaction(void)
{
	in_commit_order = false;
	holding = 0;
	holding_epoch = 0;
	tk_apply_first = tk_apply_last = 0;
	tk_capture_xact_end();
	tk_ddl_xact_end();
	tk_doom_clear();
}

static void
at_commit(void)
{
	tk_rewind_xact_end(true);
	if (holding != 0)
	{
		tk_turn_pass(holding, tk_capture_has_ddl() || tk_ddl_ran());
		if (!tk_backend_is_applier)
			tk_causal_note_commit(holding, holding_epoch);
	}
	end_transaction();
}

/*
 * A certified version this backend will not commit goes to the agent; the
 * client hears of it in a warning, since the error it gets does not say
 * that the cluster committed the transaction.
 */
static void
at_abort(void)
{
	uint64		abandoned = holding;
	uint64		abandoned_epoch = holding_epoch;
	bool		applier = tk_backend_is_applier;

	tk_rewind_xact_end(false);
	tk_safe_xact_end();
	if (in_commit_order)
		tk_turn_release();
	end_transaction();
	if (tk_version_failed(abandoned, abandoned_epoch))
		abandoned = 0;			/* it failed (turn.c): no one applies it */
	if (abandoned != 0 && !applier)
	{
		tk_channel_abandon(abandoned);
		tk_causal_note_commit(abandoned, abandoned_epoch);
		if (tk_mode_ed() && !tk_durable_reached(abandoned))
			ereport(WARNING,
					(errmsg("the cluster decided this transaction as version %llu of epoch %llu, which is not durable yet; it failed here after certification, and this replica applies its changes from the log if the version becomes durable",
							(unsigned long long) abandoned, (unsigned long long) abandoned_epoch),
					 errhint("Ask tashkent.txn_state(%llu, %llu) on any replica whether it became durable or failed before doing it again.",
							 (unsigned long long) abandoned, (unsigned long long) abandoned_epoch)));
		else
			ereport(WARNING,
					(errmsg("the cluster committed this transaction as version %llu; it failed here after certification and this replica applies its changes from the log",
							(unsigned long long) abandoned),
					 errhint("Do not retry it: it committed.")));
	}
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			pre_commit();
			break;
		case XACT_EVENT_COMMIT:
			at_commit();
			break;
		case XACT_EVENT_ABORT:
			at_abort();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (tk_rewind_or_finish_in_xact())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("PREPARE TRANSACTION is not supported for a rewind or its finish")));
			if (tk_capture_pending())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("PREPARE TRANSACTION is not supported for transactions that write replicated tables")));
			break;
		case XACT_EVENT_PREPARE:
			end_transaction();
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	tk_capture_subxact(event, mySubid, parentSubid);
}

void
tk_commit_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	RegisterResourceReleaseCallback(after_locks, NULL);
}
