/*
 * tashkent.h: what the extension's files share.
 *
 * The extension puts tashkent's data path inside PostgreSQL (see
 * docs/ARCHITECTURE.md, "The path of a transaction"). One concept per file:
 *
 *   tashkent.c  _PG_init: settings, hooks, callbacks
 *   shmem.c     the shared state: the replica's version, one slot per backend
 *   turn.c      the replica's commit order: wait for the turn, record the
 *               version with the commit, pass the turn on once visible
 *   channel.c   the socket to the replica's agent and its messages
 *   commit.c    the transaction callbacks: certify at commit, in order
 *   capture.c   the row trigger: a transaction's row changes, in memory
 *   stream.c    a large transaction's changes spooled to a temporary file
 *               and sent in fragments (a streamed writeset)
 *   relinfo.c   what capture needs to know of a table (keys, unique
 *               indexes, foreign keys), cached per relation
 *   writeset.c  a transaction's changes collapsed and encoded for the
 *               certifier (tashkent.certifier.v1.Writeset)
 *   ddl.c       ProcessUtility_hook: DDL captured as its text at the
 *               outermost level, temporary objects kept local
 *   stmtkind.c  which utility statements are DDL, which stay local
 *   tempddl.c   what the parse tree says of temporary objects, and DDL
 *               that would name one in a permanent object refused
 *   unreplicated.c  utility statements whose effect would stay on one
 *               replica refused (LISTEN/NOTIFY, large objects, ...)
 *   protect.c   replication's own triggers, event triggers and schema
 *               protected; tashkent.maintenance logged
 *   isolation.c SERIALIZABLE asked for is mapped to REPEATABLE READ
 *   ddlguard.c  replicated DDL only from superusers (or trusted roles)
 *   guard.c     functions whose effect stays on one replica refused, and
 *               writes to the system catalogs
 *   admit.c     new connections refused while the replica catches up
 *   doom.c      local transactions that block a remote writeset aborted
 *               (eager pre-certification, Tashkent §8.2)
 *   apply.c     the SQL functions the agent calls
 *   causal.c    read-your-writes across replicas: the session's last
 *               commit version, waits for a version, tashkent.sync_wait
 *   durable.c   the certifier's durable version in shared memory, and the
 *               backends that wait for it
 *   feed.c      the background worker that brings the durable version
 *               from the agent (the durability feed)
 *   state.c     a transaction's state (Kashi §2.2.1): txn_state,
 *               wait_durable, durable_version
 *   safe.c      mode ed: a safe commit acknowledged only once durable, a
 *               safe read-only transaction's wait, failed versions (TK006)
 *   hold.c      commits held after a version, for a snapshot at exactly
 *               that version (tashkent verify)
 *   rewind.c    the replica goes back to an earlier version: the undo's
 *               barrier and marker, the origin and shared state set back
 */
#ifndef TASHKENT_H
#define TASHKENT_H

#include "postgres.h"

#include "access/xact.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "replication/origin.h"
#include "storage/itemptr.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

/* The version of the socket protocol between a backend and the agent. */
#define TK_PROTOCOL_VERSION 3

/* The replication origin whose progress is the replica's version. */
#define TK_ORIGIN_NAME "tashkent"

/*
 * SQLSTATEs of tashkent's own, class TK: the one list, which Go's
 * internal/pgcode mirrors (its test compares the two). TK001 and TK005 are
 * raised by functions in sql/tashkent--1.0.sql, which spells them as text.
 */
#define ERRCODE_TK_DDL_GENERATION_CHANGED MAKE_SQLSTATE('T','K','0','0','1')
#define ERRCODE_TK_ALREADY_COMMITTED MAKE_SQLSTATE('T','K','0','0','2')
#define ERRCODE_TK_NOT_APPLIER MAKE_SQLSTATE('T','K','0','0','3')
#define ERRCODE_TK_VERSION_WAIT_TIMEOUT MAKE_SQLSTATE('T','K','0','0','4')
#define ERRCODE_TK_KEYLESS_ROW_MISSING MAKE_SQLSTATE('T','K','0','0','5')
#define ERRCODE_TK_TRANSACTION_FAILED MAKE_SQLSTATE('T','K','0','0','6')

/* ---- tashkent.c: settings ---- */

extern char *tk_agent_socket;	/* tashkent.agent_socket */
extern bool tk_maintenance;		/* tashkent.maintenance */
extern bool tk_agent_session;	/* tashkent.agent_session */
extern int	tk_certify_timeout; /* tashkent.certify_timeout, ms */
extern int	tk_writeset_max_bytes;	/* tashkent.writeset_max_bytes, kB */
extern int	tk_writeset_max_rows;	/* tashkent.writeset_max_rows */
extern int	tk_stream_threshold;	/* tashkent.stream_threshold, kB */
extern char *tk_recovery_roles; /* tashkent.recovery_roles */
extern bool tk_sync_wait;		/* tashkent.sync_wait */
extern bool tk_catch_up_wait;	/* tashkent.catch_up_wait */
extern int	tk_sync_wait_timeout;	/* tashkent.sync_wait_timeout, ms */

/* Whether the current database has the extension (so is replicated). */
extern bool tk_database_replicated(void);

/* ---- shmem.c ---- */

/* What a backend is doing with the replica's commit order. */
typedef enum TkSlotState
{
	TK_SLOT_IDLE = 0,
	TK_SLOT_CERTIFYING,			/* writeset sent to the agent, no decision yet */
	TK_SLOT_HOLDING,			/* certified with `version`, waiting for its turn */
	TK_SLOT_COMMITTING,			/* has the turn: committing `first`..`version` */
	TK_SLOT_APPLYING			/* the agent's applier, before its turn */
} TkSlotState;

/* Why a backend's transaction was doomed (doom.c). */
typedef enum TkDoomReason
{
	TK_DOOM_NONE = 0,
	TK_DOOM_BLOCKER,			/* holds a row lock a remote writeset needs */
	TK_DOOM_WAITER,				/* no transaction id, waits for a version
								 * (causal.c) while it holds a lock that
								 * version's batch needs */
	TK_DOOM_DISPLACED			/* certified, but holds a lock an earlier
								 * version needs: it gives way */
} TkDoomReason;

/* One backend's part of the shared state, indexed by pgprocno. */
typedef struct TkSlot
{
	int			pid;
	TkSlotState state;
	uint64		first;			/* COMMITTING/APPLYING: first version */
	uint64		version;		/* HOLDING: the certified version;
								 * COMMITTING/APPLYING: the last version */
	uint64		waiting_for;	/* the version whose commit this backend
								 * waits for; 0 when not waiting */
	uint64		agent_generation;	/* CERTIFYING/HOLDING: the agent asked */
	TransactionId doomed_xid;	/* the transaction doomed, or Invalid */
	TkDoomReason doom_reason;
	uint64		doomed_by;		/* the version that needs its locks */
	Latch	   *latch;
} TkSlot;

/* One entry of the ring of recently committed versions (turn.c). */
typedef struct TkRingEntry
{
	uint64		version;
	TransactionId xid;
} TkRingEntry;

#define TK_RING_SIZE 65536

/* The failures of versions whose common version shared memory keeps (safe.c). */
#define TK_FAILURES_KEPT 16

typedef struct TkShared
{
	LWLock	   *lock;			/* everything below */
	uint64		incarnation;	/* this shared memory's: a new one after a
								 * crash restart, which keeps the postmaster */
	bool		loaded;			/* committed read from the origin's progress */
	uint64		committed;		/* every version up to here is visible */
	uint64		last_ddl_version;	/* the newest committed version that ran DDL */
	uint64		floor;			/* committed when loaded: visible to all */
	RepOriginId origin;
	uint64		agent_generation;	/* incremented by each applier
									 * registration */
	int			applier_pid;
	bool		admitting;		/* the agent caught up: admit clients */
	uint64		catch_up_target;	/* flow control: clients' transactions
									 * first wait for it (causal.c); 0: none */
	char		admit_reason[256];	/* why not, for the refusal */
	char		write_refusal[256]; /* the replica cannot apply: why client
									 * writes are refused; "": they are not */
	/*
	 * A hold (hold.c): local commits of versions after hold_after wait for
	 * their turn until hold_until, or until the holding backend releases
	 * it or exits; 0: no hold.
	 */
	uint64		hold_after;
	int			hold_pid;
	TimestampTz hold_until;
	/*
	 * A rewind (rewind.c) from its undo's rewind_begin to its finish's
	 * commit: no version takes its turn; rewind_target is where it goes.
	 */
	bool		rewinding;
	uint64		rewind_target;
	/* tashkent.rewind was read in this server life and held no marker */
	bool		rewind_marker_checked;
	/*
	 * The rewind fence (fence.c): clients' transactions in fence_database
	 * are refused while the agent rewinds to fence_target or below. Written
	 * under the lock; fence_raised is also read without it, per statement.
	 */
	pg_atomic_uint32 fence_raised;
	Oid			fence_database;
	uint64		fence_target;
	int			nslots;
	TkSlot	   *slots;
	/*
	 * Per slot (pgprocno), the pid of the client backend there that takes
	 * the doom's SIGUSR2 (doom.c); written by that backend alone, without
	 * the lock: another process at the same slot never matches its pid.
	 */
	int		   *doom_signal_pids;
	TkRingEntry *ring;
	/*
	 * The certifier's durable version as this replica's agent last told it
	 * (durable.c): never lower than before; durable_known is 0 until the
	 * first word since the server started (for durable_version()'s NULL
	 * only: a waiter compares the value, tk_durable_reached). Atomics, no
	 * lock: the durability feed writes them and wakes waiters per advance.
	 */
	pg_atomic_uint64 durable;
	pg_atomic_uint32 durable_known;
	/*
	 * Per slot (pgprocno), the version whose durability the backend there
	 * waits for, 0 when it waits for none: the feed sets the latch of each
	 * backend whose version it reached (durable.c).
	 */
	pg_atomic_uint64 *durable_waits;
	/*
	 * Mode ed (safe.c): every version above failed_after decided in an
	 * epoch at or below failed_epoch failed (the agent's 'X'); a later
	 * epoch's versions at the same numbers did not. PG_UINT64_MAX: none is
	 * known to. failed_lock keeps the pair together. mode is the agent's
	 * durability placement (TkMode), set before it admits clients.
	 */
	slock_t		failed_lock;
	uint64		failed_after;
	uint64		failed_epoch;
	pg_atomic_uint32 mode;
	/*
	 * The failures since the server started, and the common version C and
	 * failed epoch of the last TK_FAILURES_KEPT (failed_from[n %
	 * TK_FAILURES_KEPT] is that of the n-th): a session tells its client
	 * that a fast commit failed.
	 */
	pg_atomic_uint32 failures;
	pg_atomic_uint64 failed_from[TK_FAILURES_KEPT];
	pg_atomic_uint64 failed_epoch_of[TK_FAILURES_KEPT];
} TkShared;

extern TkShared *tk_shared;

extern void tk_shmem_request(void);
extern void tk_shmem_startup(void);
extern TkSlot *tk_my_slot(void);
extern TkSlot *tk_slot_of_pid(int pid);

/* ---- turn.c ---- */

extern uint64 tk_committed(void);
extern uint64 tk_committed_locked(void);
extern uint64 tk_last_ddl_version(void);
extern void tk_turn_wait(uint64 first, uint64 epoch, bool cancellable);
extern void tk_turn_record(uint64 first, uint64 last);
extern void tk_turn_pass(uint64 last, bool ran_ddl);
extern void tk_turn_release(void);
extern uint64 tk_snapshot_version(Snapshot snapshot);

/* ---- channel.c ---- */

typedef enum TkDecisionKind
{
	TK_DECISION_COMMIT = 1,
	TK_DECISION_ABORT = 2,
	TK_DECISION_UNAVAILABLE = 3,	/* the agent cannot certify now */
	TK_DECISION_UNKNOWN = 4		/* the certifier did not answer in time */
} TkDecisionKind;

/* Abort reasons, as tashkent.certifier.v1.AbortReason numbers them. */
#define TK_ABORT_CONFLICT 1
#define TK_ABORT_TOO_OLD 2
#define TK_ABORT_LIMIT 3
#define TK_ABORT_INVALID 4
#define TK_ABORT_OVERLOADED 5
#define TK_ABORT_REFERENCE_CONFLICT 6
#define TK_ABORT_NOT_STAGED 7

typedef struct TkDecision
{
	TkDecisionKind kind;
	uint64		version;		/* COMMIT: the commit version; ABORT: the
								 * version it conflicted with, or 0 */
	uint64		epoch;			/* COMMIT: the epoch that certified it */
	uint64		durable;		/* the certifier's durable version the agent
								 * knew when it answered */
	int			abort_reason;	/* ABORT: TK_ABORT_* */
	char	   *detail;			/* palloc'd; what the agent says */
} TkDecision;

extern void tk_channel_certify(uint64 start_version, StringInfo writeset,
							   TkDecision *decision);

/* A frame's length and type, ahead of its payload. */
#define TK_FRAME_HEADER_BYTES 5

extern void tk_channel_stream_begin(void);
extern void tk_channel_stream_fragment(StringInfo frame);
extern void tk_channel_stream_broken(void);
extern void tk_channel_certify_streamed(uint64 start_version, uint32 fragments,
										uint64 bytes, StringInfo certified,
										TkDecision *decision);
extern void tk_channel_abandon(uint64 version);
extern void tk_channel_register_applier(void);
extern uint64 tk_channel_sync(TimestampTz deadline);
extern uint64 tk_channel_hold(uint64 version, uint32 hold_ms, TimestampTz deadline);

/* A transaction's state, as the agent judges it ('q'; state.c). */
typedef enum TkTxnState
{
	TK_TXN_UNAVAILABLE = 0,		/* the agent cannot judge now */
	TK_TXN_DURABLE = 1,
	TK_TXN_COMMITTED = 2,
	TK_TXN_FAILED = 3,
	TK_TXN_UNKNOWN = 4
} TkTxnState;

/* The agent's answer to a state question ('q'). */
typedef struct TkStateAnswer
{
	TkTxnState	state;
	bool		final;			/* the state never changes on this replica */
	uint64		durable;		/* the certifier's durable version, as the
								 * agent knows it */
	char	   *why;			/* why, when unavailable or unknown for good */
} TkStateAnswer;

extern bool tk_channel_txn_state(uint64 version, bool has_epoch, uint64 epoch,
								 TimestampTz deadline, TkStateAnswer *answer);
extern void tk_channel_open_feed(void);
extern bool tk_channel_feed_read(long timeout_ms, char *type, uint64 *value, uint64 *epoch);
extern void tk_channel_close(void);
extern long tk_ms_left(TimestampTz deadline);

/* ---- hold.c ---- */

extern bool tk_hold_keeps(uint64 last);
extern void tk_channel_release(void);
extern uint64 tk_agent_generation_seen(void);

/* ---- commit.c ---- */

extern void tk_commit_init(void);

/* ---- causal.c ---- */

extern uint64 tk_wait_committed(uint64 version, TimestampTz deadline, const char *setting);

extern void tk_causal_init(void);
extern void tk_causal_note_commit(uint64 version, uint64 epoch);

/* ---- durable.c ---- */

extern void tk_durable_init(void);
extern void tk_durable_advance(uint64 version);
extern bool tk_durable_get(uint64 *version);
extern bool tk_durable_reached(uint64 version);
extern void tk_durable_wait_prepare(void);
extern void tk_durable_wait_begin(uint64 version);
extern void tk_durable_wait_end(void);

/* ---- safe.c ---- */

/* The agent's durability placement (tashkent.set_mode). */
typedef enum TkMode
{
	TK_MODE_UNKNOWN = 0,		/* no agent said since the server started */
	TK_MODE_BASE,
	TK_MODE_MW,
	TK_MODE_ED
} TkMode;

extern void tk_safe_shmem_init(void);
extern bool tk_mode_ed(void);
extern uint64 tk_failed_after(void);
extern bool tk_version_failed(uint64 version, uint64 epoch);
extern void tk_failed_after_set(uint64 version, uint64 epoch);
extern uint32 tk_failures_known(void);
extern void tk_safe_commit_choose(uint64 version, uint64 epoch, uint64 durable_when_decided, uint32 failures_before_turn);
extern void tk_safe_commit_wait(void);
extern void tk_safe_read_wait(void);
extern void tk_safe_xact_end(void);
extern void tk_safe_report_failed_fast_commit(void);

/* ---- feed.c ---- */

extern void tk_feed_register(void);
extern PGDLLEXPORT void tk_feed_main(Datum arg);

/* ---- relinfo.c ---- */

/* How a column's value is written in a key's JSON array (to_json's rules). */
typedef enum TkJsonKind
{
	TK_JSON_STRING,				/* the output text, as a JSON string */
	TK_JSON_NUMBER,				/* the output text, bare (NaN, Infinity quoted) */
	TK_JSON_BOOL,				/* true, false */
	TK_JSON_RAW					/* json, jsonb: the output text is JSON */
} TkJsonKind;

/* A column of a captured table. */
typedef struct TkColumn
{
	bool		dropped;
	TkJsonKind	json;
	FmgrInfo	output;			/* the type's output function */
} TkColumn;

/* A key: the primary key, or a unique index certified as OP_UNIQUE_KEY. */
typedef struct TkKey
{
	Oid			index;
	const char *label;			/* the table, or "<table>#<index>" */
	int			namelen;		/* the label's leading bytes naming the table */
	bool		nulls_distinct; /* values with a SQL NULL are no key */
	int			ncols;
	AttrNumber	attnums[INDEX_MAX_KEYS];
} TkKey;

/* A foreign key of a captured table: the parent rows it references. */
typedef struct TkForeignKey
{
	int			ncols;
	AttrNumber	attnums[INDEX_MAX_KEYS];	/* referencing columns, in the
											 * referenced index's order */
	const char *label;			/* the parent key's name, when the values
								 * print as the parent's; else NULL: */
	int			label_namelen;	/* the label's leading bytes naming the
								 * parent table */
	/* ... the parent row is looked up (relinfo.c, tk_relinfo_find_parent) */
	Oid			parent;
	Oid			parent_owner;
	Oid			index;			/* the referenced unique index */
	bool		index_is_pk;
	const char *query;
	Oid			argtypes[INDEX_MAX_KEYS];
	void	   *plan;			/* SPIPlanPtr, prepared at first use */
} TkForeignKey;

/* What capture knows of a table (relinfo.c). */
typedef struct TkRelInfo
{
	Oid			relid;
	bool		valid;			/* false once invalidated: rebuilt at next use */
	MemoryContext context;		/* everything below */
	const char *name;			/* quoted schema.table */
	int			namelen;
	bool		has_pk;
	bool		keeping;		/* an UPDATE that moves no primary key keeps
								 * the row (no foreign key references the
								 * table through another index) */
	TkKey		pk;
	int			natts;
	TkColumn   *columns;		/* [attnum - 1] */
	int			nunique;
	TkKey	   *unique;
	int			nfkeys;
	TkForeignKey *fkeys;
	int			ndeps;
	Oid		   *deps;			/* relations whose change invalidates this */
} TkRelInfo;

extern TkRelInfo *tk_relinfo_get(Relation rel);
extern TkRelInfo *tk_relinfo_get_oid(Oid relid);
extern const TkKey *tk_relinfo_index_key(TkRelInfo *info, Oid index, bool is_pk);
extern bool tk_relinfo_find_parent(TkForeignKey *fk, const Datum *values,
								   Oid *partition, Datum *key);

/* ---- capture.c ---- */

/* A change's kind, as writeset.c encodes it. */
typedef enum TkEventKind
{
	TK_EVENT_UPSERT,			/* key, row */
	TK_EVENT_KEEPING_UPSERT,	/* an UPDATE that kept the row: moved no
								 * key, changed no referenced column */
	TK_EVENT_DELETE,			/* key */
	TK_EVENT_TRUNCATE,			/* the table */
	TK_EVENT_DDL,				/* the statement's text */
	TK_EVENT_UNIQUE_KEY,		/* "<table>#<index>", the index's values */
	TK_EVENT_REFERENCE,			/* the parent's name, its key */
	TK_EVENT_INSERT_ROW,		/* a table without a primary key: row */
	TK_EVENT_DELETE_ROW			/* a table without a primary key: the old
								 * row, as its key */
} TkEventKind;

/*
 * One captured change. Events are listed in the order capture saw them
 * (seq); the order they happened in is (cid, then seq), with the
 * exceptions writeset.c sorts out.
 */
typedef struct TkEvent
{
	TkEventKind kind;
	CommandId	cid;			/* the command that made it: the order */
	uint32		seq;			/* the order capture saw it in */
	const char *table;			/* quoted schema.table (or label); NULL for
								 * DDL */
	int			namelen;		/* table's leading bytes that name the table
								 * itself (of a label: the table whose
								 * index, or the parent, it names) */
	char	   *key;			/* JSON array, the old row (DELETE_ROW), the
								 * search_path (DDL); NULL for TRUNCATE and
								 * INSERT_ROW */
	int			keylen;
	char	   *row;			/* record_out text (UPSERTs, INSERT_ROW), DDL
								 * text */
	int			rowlen;
	const char *role;			/* DDL: the role that ran it */
	/* UPSERTs: the row version written (tk_capture_row_state) */
	Oid			relid;
	Oid			relfilenode;
	ItemPointerData tid;
} TkEvent;

/* Whether an UPSERT's row version is the row's current one. */
typedef enum TkRowState
{
	TK_ROW_UNKNOWN,				/* cannot tell (the table was rewritten) */
	TK_ROW_CURRENT,
	TK_ROW_GONE					/* updated or deleted since */
} TkRowState;

extern bool tk_capture_pending(void);
extern bool tk_capture_has_ddl(void);
extern uint64 tk_capture_ddl_label(void);
extern uint64 tk_capture_first_version(void);
extern uint64 tk_capture_first_row_identity_version(void);
extern void tk_capture_ddl(const char *sql, int len, const char *search_path,
						   const char *role, uint64 label);
extern List *tk_capture_events(void);
extern TkRowState tk_capture_row_state(const TkEvent *event);
extern void tk_capture_xact_end(void);
extern void tk_capture_subxact(SubXactEvent event, SubTransactionId mySubid,
							   SubTransactionId parentSubid);

/* ---- stream.c ---- */

/* Where a subtransaction's rollback cuts a streamed transaction back to. */
typedef struct TkStreamMark
{
	int64		spool_len;
	int			nwritten;		/* tables written */
	int			ntruncated;		/* tables truncated */
	int			ddl_len;		/* bytes of DDL changes */
} TkStreamMark;

extern bool tk_stream_active(void);
extern void tk_stream_start(void);
extern void tk_stream_started(void);
extern void tk_stream_event(const TkEvent *event);
extern void tk_stream_mark(TkStreamMark *mark);
extern void tk_stream_cut(const TkStreamMark *mark);
extern bool tk_stream_empty(void);
extern uint32 tk_stream_certify(uint64 start_version, void (*certifying) (void), TkDecision *decision);
extern void tk_stream_close(void);
extern void tk_stream_xact_end(void);

/* ---- writeset.c ---- */

/* Op numbers of tashkent.certifier.v1.Op (certifier.proto). */
#define TK_OP_UPSERT 1
#define TK_OP_DELETE 2
#define TK_OP_TRUNCATE 3
#define TK_OP_DDL 4
#define TK_OP_UNIQUE_KEY 5
#define TK_OP_REFERENCE 6
#define TK_OP_INSERT_ROW 7
#define TK_OP_DELETE_ROW 8
#define TK_OP_TABLE_WRITE 9

extern void tk_writeset_encode(List *events, StringInfo out);
extern void tk_writeset_put_event(StringInfo out, const TkEvent *event);
extern void tk_writeset_put_table(StringInfo out, const char *table, int op);

/* ---- ddl.c, guard.c, admit.c, doom.c ---- */

extern void tk_ddl_init(void);
extern bool tk_ddl_ran(void);
extern void tk_ddl_xact_end(void);
extern void tk_guard_init(void);
extern void tk_guard_catalog_write(Oid relid);

/* ---- stmtkind.c ---- */

/* What ddl.c does with a utility statement. */
typedef enum TkUtilityKind
{
	TK_UTILITY_LOCAL,			/* stays on this replica; nothing to look at */
	TK_UTILITY_CHECKED,			/* stays on this replica once checked (it may
								 * be refused or rewritten) */
	TK_UTILITY_DDL,				/* replicated as its text, unless it touches
								 * temporary objects only */
	TK_UTILITY_OWN_EXTENSION	/* CREATE/ALTER EXTENSION tashkent: never
								 * replicated, nor its script */
} TkUtilityKind;

extern TkUtilityKind tk_utility_kind(Node *stmt);
extern bool tk_utility_is_concurrent(Node *stmt);
extern void tk_utility_clear_concurrent(Node *stmt);

/* ---- tempddl.c ---- */

extern bool tk_declared_temporary(Node *stmt);
extern bool tk_concurrent_target_is_temporary(Node *stmt);
extern void tk_count_unreported_targets(Node *stmt, int *temporary, int *permanent);
extern void tk_refuse_temporary_sources(Node *stmt);
extern bool tk_creates_temporary(RangeVar *rel);

/* ---- unreplicated.c ---- */

/* Features whose effect would stay on one replica (refused, 0A000). */
typedef enum TkFeature
{
	TK_FEATURE_NOTIFICATIONS,	/* LISTEN, NOTIFY, pg_notify */
	TK_FEATURE_LARGE_OBJECTS,	/* lo_*, ... ON LARGE OBJECT */
	TK_FEATURE_ADVISORY_LOCKS,	/* pg_advisory_*, pg_try_advisory_* */
	TK_FEATURE_SETVAL,			/* setval */
	TK_FEATURE_CTAS_EXECUTE,	/* CREATE TABLE AS EXECUTE */
	TK_FEATURE_PREPARED_SELECT_INTO,	/* PREPARE ... SELECT INTO */
	TK_FEATURE_EXPLAIN_ANALYZE_CTAS,	/* EXPLAIN ANALYZE CREATE TABLE AS */
	TK_FEATURE_REPLICATION_ORIGINS	/* pg_replication_origin_session_setup, ... */
} TkFeature;

extern void tk_refuse_feature(TkFeature feature) pg_attribute_noreturn();
extern void tk_refuse_unreplicated(Node *stmt);

/* ---- protect.c ---- */

extern void tk_protect_replication(Node *stmt);
extern void tk_protect_own_objects(void);
extern bool tk_sets_maintenance_on(Node *stmt);
extern void tk_log_maintenance_on(void);

/* ---- isolation.c ---- */

extern bool tk_asks_serializable(Node *stmt);
extern void tk_map_serializable(Node *stmt);

/* ---- ddlguard.c ---- */

extern void tk_ddl_guard_check(Node *stmt);
extern void tk_admit_init(void);
extern void tk_doom_init(void);
extern void tk_doom_check(void);
extern void tk_doom_clear(void);
extern void tk_doom_take_signals(void);

/* ---- apply.c ---- */

/* This backend is the agent's applier (registered through the agent). */
extern bool tk_backend_is_applier;

/* The versions the current apply transaction commits (0: none). */
extern uint64 tk_apply_first;
extern uint64 tk_apply_last;

/* ---- rewind.c ---- */

extern bool tk_rewind_holds_turn(void);
extern bool tk_rewind_in_xact(void);
extern bool tk_rewind_or_finish_in_xact(void);
extern void tk_rewind_refuse_pending_marker(void);

/* The hint of a refusal while a rewind runs (its undo or its finish). */
#define TK_REWIND_UNDER_WAY_HINT "The tashkent agent finishes the rewind (tashkent.rewind_finish) once its undo committed, or rolls the undo back; retry then."
extern void tk_rewind_xact_end(bool committed);

/* ---- fence.c ---- */

extern void tk_fence_check(void);

#endif							/* TASHKENT_H */
