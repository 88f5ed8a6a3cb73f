/*
 * tashkent.c: the extension's entry point. It must be loaded at server
 * start (shared_preload_libraries): the replica's commit order lives in
 * shared memory, and every backend, whoever connects, must capture and
 * certify its writes.
 */
#include "tashkent.h"

#include "commands/extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

char	   *tk_agent_socket = NULL;
bool		tk_maintenance = false;
bool		tk_agent_session = false;
int			tk_certify_timeout = 60000;
int			tk_writeset_max_bytes = 4194304;	/* 4 GiB, in kB */
int			tk_writeset_max_rows = 100000000;
int			tk_stream_threshold = 8192; /* 8 MiB, in kB */
char	   *tk_recovery_roles = NULL;
bool		tk_sync_wait = false;
bool		tk_catch_up_wait = true;
int			tk_sync_wait_timeout = 30000;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
request_shmem(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	tk_shmem_request();
}

static void
startup_shmem(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	tk_shmem_startup();
}

static void
define_settings(void)
{
	DefineCustomStringVariable("tashkent.agent_socket",
							   "The Unix socket of this replica's tashkent agent.",
							   "A relative path is relative to the data directory.",
							   &tk_agent_socket,
							   "tashkent_agent.sock",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("tashkent.maintenance",
							 "Lets this session's writes and DDL bypass replication (they stay on this replica).",
							 "For repairs by a superuser; every transaction that commits so is logged.",
							 &tk_maintenance,
							 false,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	/*
	 * Set at connection start only (PGC_SU_BACKEND: the startup packet,
	 * ALTER ROLE ... SET), by superusers: a client cannot switch it on
	 * in its session to pass the rewind fence.
	 */
	DefineCustomBoolVariable("tashkent.agent_session",
							 "Marks a session as the tashkent agent's own.",
							 "The agent's sessions run while a rewind refuses clients' transactions; the agent connects with it on.",
							 &tk_agent_session,
							 false,
							 PGC_SU_BACKEND, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tashkent.certify_timeout",
							"How long a commit waits for the certifier's decision.",
							"After it the commit fails with SQLSTATE 08007: its outcome is unknown.",
							&tk_certify_timeout,
							60000, 100, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);
	/*
	 * Superuser only: they bound a backend's memory and temporary files,
	 * and a streamed transaction is certified on whole tables, so it
	 * conflicts with every concurrent write of them, other roles' too.
	 */
	DefineCustomIntVariable("tashkent.writeset_max_bytes",
							"The largest writeset a transaction may commit, streamed or not.",
							"A transaction that writes more fails with SQLSTATE 54000.",
							&tk_writeset_max_bytes,
							4194304, 1, INT_MAX,
							PGC_SUSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("tashkent.writeset_max_rows",
							"The most row changes a transaction may commit.",
							"A transaction that changes more fails with SQLSTATE 54000.",
							&tk_writeset_max_rows,
							100000000, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	/*
	 * At most 1 GB: a transaction below it is collapsed into one writeset
	 * in memory. One of more than the certifier's --writeset-bytes-max is
	 * refused there.
	 */
	DefineCustomIntVariable("tashkent.stream_threshold",
							"The memory a transaction's captured changes may take before they are streamed.",
							"Past it the changes go to a temporary file and are sent in fragments; the transaction is then certified on the tables it wrote.",
							&tk_stream_threshold,
							8192, 64, 1024 * 1024,
							PGC_SUSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomStringVariable("tashkent.recovery_roles",
							   "Roles that may connect while the replica catches up with the cluster.",
							   "A comma-separated list; the agent's role must be in it.",
							   &tk_recovery_roles,
							   "postgres",
							   PGC_SIGHUP, GUC_LIST_INPUT, NULL, NULL, NULL);
	/* Anyone may set these: they only make the session's transactions wait. */
	DefineCustomBoolVariable("tashkent.sync_wait",
							 "Makes each transaction first wait until this replica has applied every version the cluster had made durable.",
							 "Costs one round trip to the certifier per transaction, plus the wait.",
							 &tk_sync_wait,
							 false,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("tashkent.catch_up_wait",
							 "While this replica catches up with the cluster (flow control), each transaction that may write first waits for it, up to a second.",
							 "A transaction that started far behind would conflict with the versions the replica had not applied yet, holding locks its apply needs.",
							 &tk_catch_up_wait,
							 true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("tashkent.sync_wait_timeout",
							"How long tashkent.sync_wait waits, round trip to the certifier included.",
							"After it the transaction's first statement fails with SQLSTATE TK004 (57P03 if the agent did not answer).",
							&tk_sync_wait_timeout,
							30000, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	MarkGUCPrefixReserved("tashkent");
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tashkent must be loaded at server start"),
				 errhint("Add tashkent to shared_preload_libraries in postgresql.conf and restart the server.")));

	define_settings();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = request_shmem;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = startup_shmem;

	tk_commit_init();
	tk_ddl_init();
	tk_guard_init();
	tk_admit_init();
	tk_doom_init();
	tk_causal_init();
	tk_feed_register();
}

/*
 * tk_database_replicated: the current database has the extension. Asked
 * where a statement could escape replication (DDL, guards); a lookup by
 * name in pg_extension's index, cheap next to the DDL it guards.
 */
bool
tk_database_replicated(void)
{
	if (!IsTransactionState())
		return false;
	return OidIsValid(get_extension_oid("tashkent", true));
}
