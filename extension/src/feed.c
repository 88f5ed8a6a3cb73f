/*
 * feed.c: the durability feed, a background worker ("tashkent durability
 * feed") that brings the certifier's durable version from the agent into
 * shared memory.
 *
 * Backends that wait for a version to become durable wait on shared
 * memory (durable.c), not on a socket of their own: one connection per
 * replica carries every advance, however many backends wait. It plays the
 * part PostgreSQL's WAL sender plays for SyncRepWaitForLSN, which Kashi's
 * safe transactions wait in (§3.8): a high-water mark comes in, and each
 * waiter up to it has its latch set. The worker connects to the agent's
 * socket as role 2 and reads 'V' frames (channel.c): the durable version
 * at once, then at each advance (the latest only, once the socket's
 * buffer is full: the agent never waits for a feed). Outside mode ed,
 * where no commit waits for the feed, the agent sends at most one per
 * 10 ms. Each goes to
 * tk_durable_advance, which keeps the maximum and wakes the backends
 * whose version it reached. An 'X' frame says which versions failed
 * (safe.c).
 *
 * The worker needs no database: it starts with the postmaster, and the
 * postmaster starts it again if it dies. When the agent is not there (not
 * started yet, restarting) it tries again, every FEED_RETRY_MAX_MS at
 * most, and logs that once, not at every try; it logs again once the
 * agent sends it a durable version. An agent that takes the connection
 * and drops it counts as away. The durable version in shared memory stays
 * as it was meanwhile: a durable version never stops being durable. A
 * reload that changes tashkent.agent_socket makes it connect again there.
 */
#include "tashkent.h"

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

/* How soon the postmaster starts a worker that died again. */
#define FEED_RESTART_SECONDS 1

/* The waits between attempts to reach the agent: doubled up to the max. */
#define FEED_RETRY_MIN_MS 50
#define FEED_RETRY_MAX_MS 1000

/* How long one read waits before the worker looks at its settings. */
#define FEED_READ_MS 1000

/* The socket the current connection went to. */
static char feed_socket[MAXPGPATH];

/* tk_feed_register registers the worker; from _PG_init, at server start. */
void
tk_feed_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = FEED_RESTART_SECONDS;
	strlcpy(worker.bgw_library_name, "tashkent", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tk_feed_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "tashkent durability feed", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "tashkent durability feed", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* Reloads the settings if asked; true if the agent's socket moved. */
static bool
socket_moved(void)
{
	if (!ConfigReloadPending)
		return false;
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	return strcmp(feed_socket, tk_agent_socket != NULL ? tk_agent_socket : "") != 0;
}

/*
 * follow_agent connects to the agent and copies its durable versions into
 * shared memory until the connection breaks or the socket moves. It
 * returns whether the agent sent a durable version (an agent that takes
 * the connection and drops it sent none: the feed keeps backing off and
 * stays quiet), and why it stopped (*why, allocated in `context`; NULL
 * when the socket moved).
 */
static bool
follow_agent(MemoryContext context, char **why)
{
	volatile bool heard = false;

	*why = NULL;
	strlcpy(feed_socket, tk_agent_socket != NULL ? tk_agent_socket : "", sizeof(feed_socket));
	PG_TRY();
	{
		tk_channel_open_feed();
		while (!socket_moved())
		{
			uint64		value;
			uint64		epoch;
			char		type;

			if (!tk_channel_feed_read(FEED_READ_MS, &type, &value, &epoch))
				continue;
			if (type == 'X')
				tk_failed_after_set(value, epoch);
			else
				tk_durable_advance(value);
			if (!heard)
				ereport(LOG,
						(errmsg("tashkent durability feed: following the agent at \"%s\"", feed_socket)));
			heard = true;
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		FlushErrorState();
		*why = edata->message;
	}
	PG_END_TRY();
	tk_channel_close();
	return heard;
}

/* Waits ms on the latch, for a termination or a reload too. */
static void
pause_ms(long ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* tk_feed_main: the worker's life; it ends only when terminated. */
void
tk_feed_main(Datum arg)
{
	MemoryContext attempt;
	long		retry_ms = FEED_RETRY_MIN_MS;
	bool		said = false;	/* logged why since the agent last sent a
								 * durable version */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	attempt = AllocSetContextCreate(TopMemoryContext, "tashkent durability feed", ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		char	   *why;

		MemoryContextReset(attempt);
		MemoryContextSwitchTo(attempt);
		if (follow_agent(attempt, &why))
		{
			retry_ms = FEED_RETRY_MIN_MS;
			said = false;
		}
		if (why == NULL)
			continue;			/* the socket moved: at once */
		if (!said)
			ereport(LOG,
					(errmsg("%s", why),
					 errdetail("The durability feed tries again every %d ms at most and logs again once it reaches the agent.",
							   FEED_RETRY_MAX_MS)));
		said = true;
		pause_ms(retry_ms);
		retry_ms = Min(retry_ms * 2, FEED_RETRY_MAX_MS);
		(void) socket_moved();
	}
}
