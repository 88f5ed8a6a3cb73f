/*
 * state.c: a transaction's state under eventual durability, for any
 * client that speaks SQL.
 *
 * A transaction that writes is active, then committed (visible) and at
 * last durable, or committed and then failed; or it is aborted (Kashi
 * §2.2.1, properties 2 and 3). Here a transaction is named by the
 * version the certifier committed it as and the epoch that certified it
 * (tashkent.last_commit()): a failure of the certifier can give a version
 * number to another transaction in a later epoch, so a number alone names
 * a transaction only as long as nothing failed.
 *
 *   tashkent.durable_version()  the certifier's durable version as this
 *       replica last heard it (durable.c); NULL if it has heard nothing
 *       since its server started.
 *   tashkent.txn_state(version, epoch)  'durable', 'committed', 'failed'
 *       or 'unknown', judged by the agent from the replica's history and
 *       the durable version ('Q', channel.c; internal/agent/txnstate.go
 *       has the rules). A NULL epoch means the epoch this replica's
 *       history holds at the version: ambiguous across a failure, since
 *       it names whichever transaction holds the number here.
 *   tashkent.wait_durable(version, timeout_ms, epoch)  returns 'durable'
 *       or 'failed' once the state is one of them; TK004 after timeout_ms;
 *       22023 at once for a pair whose state stays 'unknown' here
 *       whatever comes (a version before this replica's history, or one
 *       durable in an older epoch than the one named: the agent marks
 *       such answers final).
 *
 * The agent answers only while the certifier admits the replica's
 * history (57P03 before its stream is admitted, and after a refusal).
 * 'aborted' is never answered: an aborted transaction got its error
 * (40001 for a conflict) at COMMIT and never had a version to ask about.
 *
 * wait_durable asks the agent, and while the answer is 'committed' (or
 * 'unknown': not decided yet) waits on its latch for the durability feed
 * to reach the version (durable.c); it asks again after
 * STATE_RECHECK_MS at most, a backstop so that it ends even while the
 * feed is away. Where the version is durable but the agent cannot say so
 * yet (its history is behind while it catches up, or a new agent has not
 * heard the durable version yet), it asks again after short sleeps. Each
 * question gets the time left to the wait's deadline (STATE_ANSWER_MIN_MS
 * at least), so a stalled agent ends the wait with TK004 on time. A
 * cancel or statement_timeout ends the wait with its error; so does an
 * agent that goes away (57P03).
 */
#include "tashkent.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PG_FUNCTION_INFO_V1(tashkent_durable_version);
PG_FUNCTION_INFO_V1(tashkent_txn_state);
PG_FUNCTION_INFO_V1(tashkent_wait_durable);

/*
 * How long the agent may take to answer one question: at most
 * STATE_ANSWER_MS, no longer than the caller waits, but at least
 * STATE_ANSWER_MIN_MS (an agent that serves answers in well under it).
 */
#define STATE_ANSWER_MS 10000
#define STATE_ANSWER_MIN_MS 100

/*
 * A wait asks the agent again after at most this long: a backstop for a
 * feed that is away, since the feed's advance is what wakes the wait.
 */
#define STATE_RECHECK_MS 4000

/* The sleeps while the agent's history is behind its durable version. */
#define STATE_POLL_MIN_MS 5
#define STATE_POLL_MAX_MS 100

static const char *const state_names[] = {
	[TK_TXN_UNAVAILABLE] = "unavailable",
	[TK_TXN_DURABLE] = "durable",
	[TK_TXN_COMMITTED] = "committed",
	[TK_TXN_FAILED] = "failed",
	[TK_TXN_UNKNOWN] = "unknown",
};

/* The transaction a call names. */
typedef struct NamedTxn
{
	uint64		version;
	bool		has_epoch;
	uint64		epoch;
} NamedTxn;

static NamedTxn
named_txn(int64 version, bool epoch_null, int64 epoch)
{
	NamedTxn	txn = {.version = (uint64) version, .has_epoch = !epoch_null, .epoch = (uint64) epoch};

	if (version < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version %lld is not a version: versions start at 1", (long long) version)));
	if (!epoch_null && epoch < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("epoch %lld is not an epoch: epochs are zero or more", (long long) epoch)));
	return txn;
}

/*
 * ask_state asks the agent for txn's state, to be answered by `by` (the
 * caller's deadline; 0 if it has none) within the bounds above; false if
 * no answer came in time. The certifier's durable version in the answer
 * raises shared memory's too.
 */
static bool
ask_state(const NamedTxn *txn, TimestampTz by, TkStateAnswer *answer)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz answer_by = TimestampTzPlusMilliseconds(now, STATE_ANSWER_MS);

	if (by != 0)
		answer_by = Max(Min(answer_by, by), TimestampTzPlusMilliseconds(now, STATE_ANSWER_MIN_MS));
	if (!tk_channel_txn_state(txn->version, txn->has_epoch, txn->epoch, answer_by, answer))
		return false;
	if (answer->state == TK_TXN_UNAVAILABLE)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("this replica's tashkent agent cannot judge a transaction's state now: %s", answer->why),
				 errhint("Retry once the agent serves (tashkent status), or ask another replica.")));
	if (answer->durable > 0)
		tk_durable_advance(answer->durable);
	return true;
}

static void
no_answer(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_CANNOT_CONNECT_NOW),
			 errmsg("this replica's tashkent agent did not answer within %d ms", STATE_ANSWER_MS),
			 errhint("Check the agent's log (tashkent status), or ask another replica.")));
}

/*
 * tashkent.durable_version(): the certifier's durable version as this
 * replica last heard it; NULL if nothing was heard since the server
 * started (the agent was never reached).
 */
Datum
tashkent_durable_version(PG_FUNCTION_ARGS)
{
	uint64		durable;

	if (!tk_durable_get(&durable))
		PG_RETURN_NULL();
	PG_RETURN_INT64((int64) durable);
}

/* tashkent.txn_state(version, epoch DEFAULT NULL): see the header. */
Datum
tashkent_txn_state(PG_FUNCTION_ARGS)
{
	NamedTxn	txn;
	TkStateAnswer answer;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	txn = named_txn(PG_GETARG_INT64(0), PG_ARGISNULL(1), PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1));
	if (!ask_state(&txn, 0, &answer))
		no_answer();
	PG_RETURN_TEXT_P(cstring_to_text(state_names[answer.state]));
}

/*
 * sleep_on_latch waits up to ms for the latch (which an advance of the
 * durable version to `version` sets, if version is not 0), then handles
 * interrupts. It handles them before it waits too: one that came since
 * the last check would otherwise wait for the latch or the timeout.
 */
static void
sleep_on_latch(uint64 version, long ms)
{
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	if (version != 0)
		tk_durable_wait_begin(version);
	if (version == 0 || !tk_durable_reached(version))
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, Max(ms, 1), PG_WAIT_EXTENSION);
	if (version != 0)
		tk_durable_wait_end();
	CHECK_FOR_INTERRUPTS();
}

/* "version v" or "version v of epoch e", for messages. */
static char *
txn_name(const NamedTxn *txn)
{
	if (txn->has_epoch)
		return psprintf("version %llu of epoch %llu", (unsigned long long) txn->version, (unsigned long long) txn->epoch);
	return psprintf("version %llu", (unsigned long long) txn->version);
}

static void
not_durable(const NamedTxn *txn, int64 timeout_ms, const TkStateAnswer *answer)
{
	if (answer->durable >= txn->version)
		ereport(ERROR,
				(errcode(ERRCODE_TK_VERSION_WAIT_TIMEOUT),
				 errmsg("the state of %s is still %s on this replica after %lld ms, though the certifier's durable version (%llu) has passed it",
						txn_name(txn), state_names[answer->state], (long long) timeout_ms,
						(unsigned long long) answer->durable),
				 errdetail("This replica's history does not reach the version yet (it is catching up), or holds no run of the epoch named yet."),
				 errhint("Wait again, or ask another replica.")));
	ereport(ERROR,
			(errcode(ERRCODE_TK_VERSION_WAIT_TIMEOUT),
			 errmsg("%s is not durable after %lld ms: the certifier's durable version is %llu",
					txn_name(txn), (long long) timeout_ms, (unsigned long long) answer->durable),
			 errdetail("Its state on this replica is %s.", state_names[answer->state]),
			 errhint("Wait again, or ask tashkent.txn_state(version, epoch) later; if the durable version does not advance, check the certifier (tashkent status).")));
}

static void
not_answered(const NamedTxn *txn, int64 timeout_ms)
{
	ereport(ERROR,
			(errcode(ERRCODE_TK_VERSION_WAIT_TIMEOUT),
			 errmsg("%s is not known to be durable after %lld ms: this replica's tashkent agent did not answer in time",
					txn_name(txn), (long long) timeout_ms),
			 errhint("Wait again, or check the agent's log (tashkent status).")));
}

/* A pair whose state stays unknown here whatever comes: nothing to wait for. */
static void
unknown_for_good(const NamedTxn *txn, const TkStateAnswer *answer)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s names no transaction whose durability this replica can ever tell: %s", txn_name(txn), answer->why),
			 errhint("Name a transaction by the version and epoch tashkent.last_commit() returned for it.")));
}

/*
 * tashkent.wait_durable(version, timeout_ms DEFAULT 30000, epoch DEFAULT
 * NULL): see the header. NULL in (version or timeout), NULL out.
 */
Datum
tashkent_wait_durable(PG_FUNCTION_ARGS)
{
	NamedTxn	txn;
	int64		timeout_ms;
	TimestampTz deadline;
	long		poll_ms = STATE_POLL_MIN_MS;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	txn = named_txn(PG_GETARG_INT64(0), PG_ARGISNULL(2), PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2));
	timeout_ms = PG_GETARG_INT64(1);
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the timeout must be zero or more milliseconds, not %lld", (long long) timeout_ms)));
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), Min(timeout_ms, (int64) INT_MAX));
	tk_durable_wait_prepare();
	for (;;)
	{
		TkStateAnswer answer;
		long		left;

		if (!ask_state(&txn, deadline, &answer))
		{
			if (tk_ms_left(deadline) <= 0)
				not_answered(&txn, timeout_ms);
			no_answer();
		}
		if (answer.state == TK_TXN_DURABLE || answer.state == TK_TXN_FAILED)
			PG_RETURN_TEXT_P(cstring_to_text(state_names[answer.state]));
		if (answer.final)
			unknown_for_good(&txn, &answer);
		left = tk_ms_left(deadline);
		if (left <= 0)
			not_durable(&txn, timeout_ms, &answer);
		if (answer.durable >= txn.version || tk_durable_reached(txn.version))
		{
			/*
			 * Durable, but the agent's history does not reach the version
			 * yet, or the agent has not heard of its durability yet (it
			 * just started): nothing to be woken by.
			 */
			sleep_on_latch(0, Min(left, poll_ms));
			poll_ms = Min(poll_ms * 2, STATE_POLL_MAX_MS);
		}
		else
			sleep_on_latch(txn.version, Min(left, STATE_RECHECK_MS));
	}
}
