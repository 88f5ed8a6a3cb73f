/*
 * stream.c: a large transaction's changes, spooled to a temporary file and
 * sent to the agent in fragments: a streamed writeset (Certifier.Stage,
 * api/certifierpb/certifier.proto; docs/ARCHITECTURE.md).
 *
 * Once a transaction's captured events take more memory than
 * tashkent.stream_threshold (capture.c), they are no longer held and
 * collapsed: each event is encoded as a Change (writeset.c) and written to
 * the spool, a BufFile that PostgreSQL removes at the transaction's end,
 * in the order the changes are to be applied:
 *
 *   - the order capture saw them in, but
 *   - within a run of consecutive events of one command id (a statement)
 *     every delete (OP_DELETE, OP_DELETE_ROW) before every upsert and
 *     insert: an UPDATE that swaps two keys fires delete 1, upsert 2,
 *     delete 2, upsert 1 under one command id, and both keys must end up
 *     upserted. The current run is held in memory, its deletes and its
 *     upserts apart; past RUN_MEMORY_BYTES they go to two more temporary
 *     files, appended to the spool, deletes first, when the run ends.
 *   - TRUNCATE and DDL end the run and are written in place.
 *
 * Unique index values and references are not written: they are
 * certification-only, and a streamed transaction is certified on whole
 * tables instead. What it is certified on (the certified writeset) is
 * kept in memory: OP_TABLE_WRITE for every table it wrote rows of, whose
 * unique values it wrote, or whose rows it referenced; OP_TRUNCATE for
 * every table it truncated; OP_DDL for each DDL statement (also written
 * in place: the applier runs it).
 *
 * Unlike a collapsed writeset, the stream keeps every change: a row
 * inserted and deleted again is sent twice, and a transaction whose
 * changes all cancel out still sends them (and is certified on its
 * tables). The applier's result is the same.
 *
 * Statements nested in another's AFTER ROW trigger that fires before
 * tashkent's (its name sorts first) are captured before the change that
 * fired them, which came first (capture.c). An upsert captured after a
 * change of a later command (disordered) whose row version is no longer
 * current was overwritten by a change already in the stream: it is left
 * out (collapse, writeset.c, settles such keys from the table too). What
 * the stream cannot settle, and applies in capture order: a disordered
 * delete of a key a nested statement wrote again (an AFTER DELETE trigger
 * that puts the row back), and rows of a table without a primary key that
 * such a trigger's statement changes.
 *
 * Statements run between a statement's changes also split its run: the
 * statements of its rows' AFTER ROW triggers that write (each under a later
 * command id) and subtransactions (a trigger's EXCEPTION block) end it, so
 * its deletes can no longer all go before its upserts. That matters only
 * where a part of the run already streamed upserted a table the statement
 * deletes from later (a key moved by an UPDATE): applied in capture order,
 * a key the statement moved to could be deleted. Such a delete is refused
 * (0A000) rather than streamed. So is a disordered delete of a table a
 * later command already upserted (an AFTER DELETE trigger that puts rows
 * back): applied in capture order, the row put back would be deleted. The
 * runs of statements that may resume are kept on a stack (resumable):
 * when an event of command id c comes, the statements of later command ids
 * have ended (a nested statement ends before the statement that ran it
 * goes on), and the one of c, if on the stack, resumes. The stack is
 * bounded; of a run that resumes after it left, a bitmap per command id
 * says whether any part of it upserted anything, and then its deletes are
 * refused.
 *
 * Savepoints: a subtransaction's start ends the current run and marks the
 * spool's length and the certified sets' sizes (tk_stream_mark); its
 * rollback cuts them back (tk_stream_cut). A BufFile cannot be truncated:
 * the spool's logical length is kept here, the next write seeks back to
 * it and overwrites, and reads stop at it. A rollback does no I/O (it runs
 * while the subtransaction aborts): the seek waits for the next write. An
 * error while the stream is written (temp_file_limit, a full disk) leaves
 * it in no known state: a savepoint's rollback cannot repair it, so the
 * transaction can no longer commit.
 *
 * At PRE_COMMIT (tk_stream_certify) the spool is read from its start and
 * cut into fragments of at most FRAGMENT_BYTES, each a run of whole
 * Change fields, so an encoded Writeset (a change larger than that is a
 * fragment of its own), sent to the agent one at a time as 'F' frames;
 * then 'W' with the start version, the fragment count, their total size
 * and the certified writeset; then the decision is awaited as for a
 * writeset sent whole (channel.c). A fragment never holds an OP_DELETE_ROW
 * of a table without a primary key after an OP_INSERT_ROW of the same
 * table: the applier deletes a fragment's rows of such a table before it
 * inserts them, so the fragment is cut before such a delete.
 *
 * Memory: tashkent.stream_threshold (the events held before the switch),
 * one run's buffer (RUN_MEMORY_BYTES), one fragment (FRAGMENT_BYTES, or
 * the one change larger than it), and the certified writeset.
 */
#include "tashkent.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/buffile.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

/*
 * A fragment's size: each becomes one entry of the certifier's log, so it
 * stays well under --writeset-bytes-max, and it is what the agent and the
 * certifier hold of a streaming transaction at a time.
 */
#define FRAGMENT_BYTES (4 * 1024 * 1024)

/* A run's memory before its changes go to temporary files. */
#define RUN_MEMORY_BYTES (4 * 1024 * 1024)

/* Copies between files go through a buffer of this size. */
#define COPY_BYTES (64 * 1024)

/* A temporary file with its logical length: what was written and kept. */
typedef struct Spill
{
	BufFile    *file;
	int64		len;
	bool		at_end;			/* the file's position is at len */
} Spill;

/* Tables by name, in the order first named, with a set to find them. */
typedef struct NameEntry
{
	const char *name;
	uint32		hash;
	char		status;
	CommandId	upserted_cid;	/* written: the latest command that upserted
								 * rows of the table, 0 if none */
} NameEntry;

#define SH_PREFIX nameset
#define SH_ELEMENT_TYPE NameEntry
#define SH_KEY_TYPE const char *
#define SH_KEY name
#define SH_HASH_KEY(tb, key) hash_bytes((const unsigned char *) (key), strlen(key))
#define SH_EQUAL(tb, a, b) (strcmp((a), (b)) == 0)
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) ((a)->hash)
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

typedef struct Tables
{
	nameset_hash *set;
	List	   *order;			/* the names, in the order first named */
	NameEntry  *last;			/* the last one named: a row's table is
								 * usually its predecessor's (NULL after any
								 * change to the set, which moves entries) */
} Tables;

/* The streamed transaction; all of it in context, NULL when not streamed. */
static MemoryContext context = NULL;
static Spill spool;
static Spill run_deletes_file;
static Spill run_upserts_file;
static StringInfoData run_deletes;
static StringInfoData run_upserts;
static bool run_open = false;
static CommandId run_cid = InvalidCommandId;
static List *run_upserted = NIL;	/* tables the open run upserted */
static List *run_streamed_upserts = NIL;	/* tables its parts already
											 * streamed upserted */
static bool run_forgotten_upserts = false;	/* it resumed after it left the
											 * stack, and upserted before */

/*
 * A run that ended but whose statement may resume (see the header): its
 * command id and the tables it upserted (names as kept in written).
 */
typedef struct ResumableRun
{
	CommandId	cid;
	List	   *upserted;
} ResumableRun;

/*
 * The stack of resumable runs, the latest last. Statements that follow
 * each other also stack up, so it is bounded: the oldest go, and a run
 * that resumes after it went is refused, its parts streamed being no
 * longer known (nesting deeper than this). Which command ids had a run is
 * kept in a bitmap (seen), one bit each.
 */
#define RESUMABLE_MAX 64
static ResumableRun resumable[RESUMABLE_MAX];
static int	nresumable = 0;

/* One bit per command id. */
typedef struct CidBits
{
	uint64	   *words;
	uint32		nwords;
} CidBits;

static CidBits seen;			/* a run of the command id opened */
static CidBits upserting;		/* a run of the command id upserted */
static CommandId max_cid = FirstCommandId;	/* of the changes streamed */
static Tables written;
static Tables truncated;
static StringInfoData ddl;		/* the DDL changes, encoded */
static int	writing = 0;		/* writes under way: one an error ended is
								 * left counted */
static bool broken = false;		/* a write failed (see the header) */
static StringInfoData scratch;	/* one change, encoded */

bool
tk_stream_active(void)
{
	return context != NULL;
}

/*
 * open_spill: a temporary file of the top transaction's: a file opened in
 * a subtransaction would be closed with it (its resource owner), and the
 * spool outlives the subtransactions it was written in.
 */
static void
open_spill(Spill *spill)
{
	ResourceOwner owner = CurrentResourceOwner;
	MemoryContext old = MemoryContextSwitchTo(context);

	CurrentResourceOwner = TopTransactionResourceOwner;
	PG_TRY();
	{
		spill->file = BufFileCreateTemp(false);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = owner;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	spill->len = 0;
	spill->at_end = true;
}

static void
seek_spill(Spill *spill, int64 offset)
{
	if (BufFileSeek(spill->file, 0, (off_t) offset, SEEK_SET) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not seek in tashkent's temporary file of a streamed writeset")));
}

static void
write_spill(Spill *spill, const char *data, Size len)
{
	if (len == 0)
		return;
	if (spill->file == NULL)
		open_spill(spill);
	if (!spill->at_end)
	{
		seek_spill(spill, spill->len);
		spill->at_end = true;
	}
	BufFileWrite(spill->file, (void *) data, len);
	spill->len += len;
}

static void
read_spill(Spill *spill, char *out, Size len)
{
	if (BufFileRead(spill->file, out, len) != len)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read tashkent's temporary file of a streamed writeset")));
}

/*
 * cut_spill: the file ends at len; no I/O until the next write, which
 * seeks there first (a write an error ended may have moved the position).
 */
static void
cut_spill(Spill *spill, int64 len)
{
	spill->at_end = false;
	spill->len = len;
}

/* append_spill: source's contents at the end of target; source emptied. */
static void
append_spill(Spill *target, Spill *source)
{
	char	   *buf;
	int64		left = source->len;

	if (left == 0)
		return;
	buf = palloc(COPY_BYTES);
	seek_spill(source, 0);
	source->at_end = false;
	while (left > 0)
	{
		Size		n = Min(left, COPY_BYTES);

		read_spill(source, buf, n);
		write_spill(target, buf, n);
		left -= n;
	}
	pfree(buf);
	cut_spill(source, 0);
}

static void
tables_init(Tables *t)
{
	t->set = nameset_create(context, 16, NULL);
	t->order = NIL;
	t->last = NULL;
}

/* tables_add: the table named by name's first namelen bytes. */
static NameEntry *
tables_add(Tables *t, const char *name, int namelen)
{
	char	   *copy;
	NameEntry  *entry;
	bool		found;
	MemoryContext old;

	if (t->last != NULL && strncmp(t->last->name, name, namelen) == 0 && t->last->name[namelen] == '\0')
		return t->last;
	old = MemoryContextSwitchTo(context);
	copy = pnstrdup(name, namelen);
	entry = nameset_insert(t->set, copy, &found);
	if (found)
		pfree(copy);
	else
	{
		entry->upserted_cid = 0;
		t->order = lappend(t->order, copy);
	}
	t->last = entry;
	MemoryContextSwitchTo(old);
	return entry;
}

/* tables_cut: only the first n tables named are left. */
static void
tables_cut(Tables *t, int n)
{
	for (int i = list_length(t->order) - 1; i >= n; i--)
		nameset_delete(t->set, list_nth(t->order, i));
	t->order = list_truncate(t->order, n);
	t->last = NULL;
}

/*
 * tk_stream_start: the transaction becomes streamed. Its memory is the
 * top transaction's, freed at its end (the files with it: PostgreSQL
 * deletes temporary files at the end of the transaction that made them).
 */
void
tk_stream_start(void)
{
	Assert(context == NULL);
	context = AllocSetContextCreate(TopTransactionContext, "tashkent stream",
									ALLOCSET_DEFAULT_SIZES);
	memset(&spool, 0, sizeof(spool));
	memset(&run_deletes_file, 0, sizeof(run_deletes_file));
	memset(&run_upserts_file, 0, sizeof(run_upserts_file));
	writing = 1;				/* until tk_stream_started */
	broken = false;
	open_spill(&spool);
	run_open = false;
	run_upserted = run_streamed_upserts = NIL;
	run_forgotten_upserts = false;
	nresumable = 0;
	memset(&seen, 0, sizeof(seen));
	memset(&upserting, 0, sizeof(upserting));
	tables_init(&written);
	tables_init(&truncated);
	{
		MemoryContext old = MemoryContextSwitchTo(context);

		initStringInfo(&run_deletes);
		initStringInfo(&run_upserts);
		initStringInfo(&ddl);
		initStringInfo(&scratch);
		MemoryContextSwitchTo(old);
	}
}

/*
 * tk_stream_started: the events captured before the transaction was
 * streamed are in the stream (capture.c).
 */
void
tk_stream_started(void)
{
	writing--;
}

/* cidbits_set: sets cid's bit; whether it was set. */
static bool
cidbits_set(CidBits *bits, CommandId cid)
{
	uint32		word = cid / 64;
	uint64		bit = UINT64CONST(1) << (cid % 64);
	bool		before;

	if (word >= bits->nwords)
	{
		uint32		n = Max(Max(bits->nwords * 2, word + 1), 16);

		if (bits->words == NULL)
			bits->words = MemoryContextAllocZero(context, n * sizeof(uint64));
		else
		{
			bits->words = repalloc(bits->words, n * sizeof(uint64));
			memset(bits->words + bits->nwords, 0, (n - bits->nwords) * sizeof(uint64));
		}
		bits->nwords = n;
	}
	before = (bits->words[word] & bit) != 0;
	bits->words[word] |= bit;
	return before;
}

static bool
cidbits_test(const CidBits *bits, CommandId cid)
{
	return cid / 64 < bits->nwords && (bits->words[cid / 64] & (UINT64CONST(1) << (cid % 64))) != 0;
}

/* push_resumable: the run that ended may resume (see the header). */
static void
push_resumable(CommandId cid, List *upserted)
{
	if (nresumable == RESUMABLE_MAX)
	{
		list_free(resumable[0].upserted);
		memmove(&resumable[0], &resumable[1], sizeof(ResumableRun) * (RESUMABLE_MAX - 1));
		nresumable--;
	}
	resumable[nresumable].cid = cid;
	resumable[nresumable].upserted = upserted;
	nresumable++;
}

/* end_run: the run's deletes, then its upserts, at the spool's end. */
static void
end_run(void)
{
	if (!run_open)
		return;
	append_spill(&spool, &run_deletes_file);
	write_spill(&spool, run_deletes.data, run_deletes.len);
	append_spill(&spool, &run_upserts_file);
	write_spill(&spool, run_upserts.data, run_upserts.len);
	resetStringInfo(&run_deletes);
	resetStringInfo(&run_upserts);
	run_open = false;
	push_resumable(run_cid, run_upserted);
	run_upserted = NIL;
	list_free(run_streamed_upserts);
	run_streamed_upserts = NIL;
	run_forgotten_upserts = false;
}

/*
 * open_run: a run of command id cid opens; the runs of later command ids
 * have ended for good, and cid's own, if it ran before, resumes with what
 * its streamed parts upserted.
 */
static void
open_run(CommandId cid)
{
	MemoryContext old;

	while (nresumable > 0 && resumable[nresumable - 1].cid > cid)
		list_free(resumable[--nresumable].upserted);
	run_open = true;
	run_cid = cid;
	run_upserted = NIL;
	run_streamed_upserts = NIL;
	run_forgotten_upserts = false;
	if (nresumable > 0 && resumable[nresumable - 1].cid == cid)
	{
		nresumable--;
		run_upserted = resumable[nresumable].upserted;
		old = MemoryContextSwitchTo(context);
		run_streamed_upserts = list_copy(run_upserted);
		MemoryContextSwitchTo(old);
	}
	else if (cidbits_set(&seen, cid))
		run_forgotten_upserts = cidbits_test(&upserting, cid);
}

/*
 * names_member: whether names holds name. By the text: a savepoint's
 * rollback can drop a table from written, and naming it again keeps a
 * new copy.
 */
static bool
names_member(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
	{
		if (lfirst(lc) == name || strcmp((const char *) lfirst(lc), name) == 0)
			return true;
	}
	return false;
}

/*
 * refuse_unordered_delete: a delete the stream cannot place (see the
 * header). It writes nothing, so the stream is as it was: a savepoint's
 * rollback leaves it whole.
 */
static void
refuse_unordered_delete(const TkEvent *e, const char *why)
{
	writing--;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("a streamed transaction cannot order this statement's delete from table %.*s",
					e->namelen, e->table),
			 errdetail("%s", why),
			 errhint("Run the statement in a transaction whose changes stay under tashkent.stream_threshold: there they are collapsed, and replicate in any order.")));
}

/* check_delete: refuses a delete the stream cannot place (see the header). */
static void
check_delete(const TkEvent *e, const NameEntry *table)
{
	if (e->cid < table->upserted_cid)
		refuse_unordered_delete(e, "A statement run after this one (by a trigger) already wrote the table; applied in the order captured, its rows would be deleted.");
	if (e->kind != TK_EVENT_DELETE)
		return;					/* a keyless table's rows: a multiset */
	if (run_forgotten_upserts || names_member(run_streamed_upserts, table->name))
		refuse_unordered_delete(e, "Statements run between this statement's changes (by its rows' triggers, or in subtransactions) split them after it had written the table; its deletes can no longer all go before its writes.");
}

/* spill_run: the run's changes held in memory go to its files. */
static void
spill_run(void)
{
	write_spill(&run_deletes_file, run_deletes.data, run_deletes.len);
	write_spill(&run_upserts_file, run_upserts.data, run_upserts.len);
	resetStringInfo(&run_deletes);
	resetStringInfo(&run_upserts);
}

/* encode: the event as a Change field, in scratch. */
static void
encode(const TkEvent *e)
{
	resetStringInfo(&scratch);
	tk_writeset_put_event(&scratch, e);
}

/*
 * overwritten: an upsert captured after a change of a later command whose
 * row version is gone: that change, already streamed, overwrote it (see
 * the header).
 */
static bool
overwritten(const TkEvent *e)
{
	return (e->kind == TK_EVENT_UPSERT || e->kind == TK_EVENT_KEEPING_UPSERT)
		&& e->cid < max_cid && tk_capture_row_state(e) == TK_ROW_GONE;
}

static void
add_row_change(const TkEvent *e)
{
	bool		delete = e->kind == TK_EVENT_DELETE || e->kind == TK_EVENT_DELETE_ROW;
	NameEntry  *table = tables_add(&written, e->table, e->namelen);

	if (overwritten(e))
		return;
	max_cid = Max(max_cid, e->cid);
	if (run_open && e->cid != run_cid)
		end_run();
	if (!run_open)
		open_run(e->cid);
	if (delete)
		check_delete(e, table);
	else
	{
		table->upserted_cid = Max(table->upserted_cid, e->cid);
		cidbits_set(&upserting, e->cid);
		if (!names_member(run_upserted, table->name))
		{
			MemoryContext old = MemoryContextSwitchTo(context);

			run_upserted = lappend(run_upserted, (void *) table->name);
			MemoryContextSwitchTo(old);
		}
	}
	encode(e);
	appendBinaryStringInfo(delete ? &run_deletes : &run_upserts, scratch.data, scratch.len);
	if (run_deletes.len + run_upserts.len > RUN_MEMORY_BYTES)
		spill_run();
}

/* tk_stream_event: one event of a streamed transaction (see the header). */
void
tk_stream_event(const TkEvent *e)
{
	Assert(context != NULL);
	writing++;
	switch (e->kind)
	{
		case TK_EVENT_UPSERT:
		case TK_EVENT_KEEPING_UPSERT:
		case TK_EVENT_DELETE:
		case TK_EVENT_INSERT_ROW:
		case TK_EVENT_DELETE_ROW:
			add_row_change(e);
			break;
		case TK_EVENT_UNIQUE_KEY:
		case TK_EVENT_REFERENCE:
			tables_add(&written, e->table, e->namelen);
			break;
		case TK_EVENT_TRUNCATE:
			end_run();
			tables_add(&truncated, e->table, e->namelen);
			encode(e);
			write_spill(&spool, scratch.data, scratch.len);
			break;
		case TK_EVENT_DDL:
			end_run();
			encode(e);
			write_spill(&spool, scratch.data, scratch.len);
			appendBinaryStringInfo(&ddl, scratch.data, scratch.len);
			break;
	}
	writing--;
}

/* tk_stream_mark: where a subtransaction starting now would cut back to. */
void
tk_stream_mark(TkStreamMark *mark)
{
	writing++;
	end_run();
	mark->spool_len = spool.len;
	mark->nwritten = list_length(written.order);
	mark->ntruncated = list_length(truncated.order);
	mark->ddl_len = ddl.len;
	writing--;
}

/*
 * tk_stream_cut: a subtransaction rolled back; what it streamed goes. The
 * current run is its own (its start ended the one before).
 */
void
tk_stream_cut(const TkStreamMark *mark)
{
	if (writing != 0)
		broken = true;
	writing = 0;
	resetStringInfo(&run_deletes);
	resetStringInfo(&run_upserts);
	cut_spill(&run_deletes_file, 0);
	cut_spill(&run_upserts_file, 0);
	run_open = false;
	run_upserted = run_streamed_upserts = NIL;
	cut_spill(&spool, mark->spool_len);
	tables_cut(&written, mark->nwritten);
	tables_cut(&truncated, mark->ntruncated);
	ddl.len = mark->ddl_len;
	ddl.data[ddl.len] = '\0';
}

/* tk_stream_empty: nothing is left to send (every change rolled back). */
bool
tk_stream_empty(void)
{
	return spool.len == 0 && !run_open && written.order == NIL && truncated.order == NIL;
}

/* ---- fragments ---- */

/* A fragment being filled: a frame, 'F' and its payload. */
typedef struct Fragment
{
	StringInfoData frame;
	List	   *inserted;		/* keyless tables it inserts rows of: each
								 * a Span of the frame */
	uint32		count;			/* fragments sent */
	uint64		bytes;			/* their payloads' total size */
} Fragment;

/* A span of the frame's bytes (offsets: the frame may move as it grows). */
typedef struct Span
{
	int			off;
	int			len;
} Span;

static void
fragment_reset(Fragment *f)
{
	if (f->frame.maxlen > 2 * (FRAGMENT_BYTES + TK_FRAME_HEADER_BYTES))
	{
		pfree(f->frame.data);	/* it held one larger change */
		f->frame.data = NULL;
	}
	if (f->frame.data == NULL)
		initStringInfo(&f->frame);
	f->frame.len = TK_FRAME_HEADER_BYTES;
	list_free_deep(f->inserted);
	f->inserted = NIL;
}

static void
fragment_send(Fragment *f)
{
	if (f->frame.len == TK_FRAME_HEADER_BYTES)
		return;

	/*
	 * Nothing is certified while fragments go: a remote version that
	 * waits for this transaction's row locks may doom it (lockwatch), as
	 * any transaction not yet sent for certification, rather than wait for
	 * the whole upload.
	 */
	tk_doom_check();
	tk_channel_stream_fragment(&f->frame);
	f->count++;
	f->bytes += f->frame.len - TK_FRAME_HEADER_BYTES;
	fragment_reset(f);
}

/* parse_varint: the varint at *p (before end); *p moves past it. */
static uint64
parse_varint(const char **p, const char *end)
{
	uint64		v = 0;

	for (int shift = 0; shift < 64 && *p < end; shift += 7)
	{
		uint8		b = (uint8) *(*p)++;

		v |= (uint64) (b & 0x7f) << shift;
		if ((b & 0x80) == 0)
			return v;
	}
	elog(ERROR, "tashkent: malformed change in a streamed writeset's spool");
	return 0;
}

/* read_varint: a varint from the spool, its bytes appended to out. */
static uint64
read_varint(StringInfo out)
{
	int			start = out->len;
	const char *p;
	uint8		b;

	do
	{
		if (out->len - start == 10)
			elog(ERROR, "tashkent: malformed varint in a streamed writeset's spool");
		read_spill(&spool, (char *) &b, 1);
		appendStringInfoChar(out, (char) b);
	} while (b & 0x80);
	p = out->data + start;
	return parse_varint(&p, out->data + out->len);
}

/*
 * change_op: a Change's op and table (as a Span of the frame), from
 * its encoding at [off, off + len) of the frame: put_change writes the
 * table (field 1) and then the op (field 2) first.
 */
static int
change_op(const StringInfo frame, int off, int len, Span *table)
{
	const char *p = frame->data + off;
	const char *end = p + len;

	table->off = table->len = 0;
	while (p < end)
	{
		uint64		tag = parse_varint(&p, end);

		if (tag == (2 << 3 | 0))
			return (int) parse_varint(&p, end);
		if (tag != (1 << 3 | 2))
			break;
		table->len = (int) parse_varint(&p, end);
		table->off = p - frame->data;
		p += table->len;
	}
	elog(ERROR, "tashkent: malformed change in a streamed writeset's spool");
	return 0;
}

static bool
inserts_into(const Fragment *f, const Span *table)
{
	ListCell   *lc;

	foreach(lc, f->inserted)
	{
		const Span *t = lfirst(lc);

		if (t->len == table->len
			&& memcmp(f->frame.data + t->off, f->frame.data + table->off, t->len) == 0)
			return true;
	}
	return false;
}

/*
 * next_change: the spool's next Change field appended to the fragment, or
 * the fragment sent first where it would grow past FRAGMENT_BYTES or hold
 * a keyless table's delete after an insert of it. Returns the bytes read.
 */
static int64
next_change(Fragment *f)
{
	StringInfoData header;
	uint64		len;
	int			start = f->frame.len;
	int			body;
	int64		consumed;
	Span	table;
	int			op;

	initStringInfo(&header);
	read_varint(&header);
	if (header.data[0] != (1 << 3 | 2))
		elog(ERROR, "tashkent: malformed change in a streamed writeset's spool");
	len = read_varint(&header);
	if (len > MaxAllocSize - header.len - f->frame.len)
		elog(ERROR, "tashkent: a change of %llu bytes in a streamed writeset's spool",
			 (unsigned long long) len);
	appendBinaryStringInfo(&f->frame, header.data, header.len);
	body = f->frame.len;
	enlargeStringInfo(&f->frame, (int) len);
	read_spill(&spool, f->frame.data + body, len);
	f->frame.len += len;
	consumed = header.len + len;
	pfree(header.data);

	op = change_op(&f->frame, body, (int) len, &table);
	if (start > TK_FRAME_HEADER_BYTES
		&& (f->frame.len - TK_FRAME_HEADER_BYTES > FRAGMENT_BYTES
			|| (op == TK_OP_DELETE_ROW && inserts_into(f, &table))))
	{
		/* the change starts the next fragment */
		int			n = f->frame.len - start;
		char	   *change = palloc(n);

		memcpy(change, f->frame.data + start, n);
		f->frame.len = start;
		fragment_send(f);
		appendBinaryStringInfo(&f->frame, change, n);
		table.off += TK_FRAME_HEADER_BYTES - start;
		pfree(change);
	}
	if (op == TK_OP_INSERT_ROW && !inserts_into(f, &table))
	{
		Span   *t = palloc(sizeof(Span));

		*t = table;
		f->inserted = lappend(f->inserted, t);
	}
	return consumed;
}

/* send_fragments: the spool, cut into fragments, to the agent. */
static void
send_fragments(Fragment *f)
{
	int64		read = 0;

	memset(f, 0, sizeof(*f));
	fragment_reset(f);
	seek_spill(&spool, 0);
	spool.at_end = false;
	PG_TRY();
	{
		tk_channel_stream_begin();
		while (read < spool.len)
		{
			read += next_change(f);
			CHECK_FOR_INTERRUPTS();
		}
		fragment_send(f);
	}
	PG_CATCH();
	{
		tk_channel_stream_broken();
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* certified_writeset: what the transaction is certified on (see the header). */
static void
certified_writeset(StringInfo out)
{
	ListCell   *lc;

	initStringInfo(out);
	foreach(lc, written.order)
		tk_writeset_put_table(out, lfirst(lc), TK_OP_TABLE_WRITE);
	foreach(lc, truncated.order)
		tk_writeset_put_table(out, lfirst(lc), TK_OP_TRUNCATE);
	appendBinaryStringInfo(out, ddl.data, ddl.len);
}

/*
 * tk_stream_certify: the streamed writeset sent (its fragments, then the
 * certification request) and the decision awaited. certifying is called
 * between the two: from then on the transaction is the certifier's.
 * Returns the number of fragments: a commit's versions are
 * decision->version - fragments + 1 .. decision->version.
 */
uint32
tk_stream_certify(uint64 start_version, void (*certifying) (void), TkDecision *decision)
{
	MemoryContext work = AllocSetContextCreate(CurrentMemoryContext, "tashkent fragments",
											   ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(work);
	Fragment	f;
	StringInfoData certified;

	if (broken || writing != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("the transaction's streamed writeset is incomplete: writing its temporary file failed earlier"),
				 errdetail("A savepoint's rollback does not undo such a failure."),
				 errhint("Roll back the transaction; see the earlier error for the cause.")));
	end_run();
	send_fragments(&f);
	certified_writeset(&certified);
	tk_stream_close();
	certifying();
	tk_channel_certify_streamed(start_version, f.count, f.bytes, &certified, decision);
	MemoryContextSwitchTo(old);
	if (decision->detail != NULL)
		decision->detail = pstrdup(decision->detail);
	MemoryContextDelete(work);
	return f.count;
}

static void
close_spill(Spill *spill)
{
	if (spill->file != NULL)
		BufFileClose(spill->file);
	spill->file = NULL;
	spill->len = 0;
}

/*
 * tk_stream_close: the files closed (and so removed) before the
 * transaction commits: PostgreSQL warns of a temporary file still open
 * at a commit. An abort closes them itself.
 */
void
tk_stream_close(void)
{
	if (context == NULL)
		return;
	close_spill(&spool);
	close_spill(&run_deletes_file);
	close_spill(&run_upserts_file);
}

/* tk_stream_xact_end: the transaction ended; its memory and files went. */
void
tk_stream_xact_end(void)
{
	context = NULL;
	run_open = false;
	run_upserted = run_streamed_upserts = NIL;
	run_forgotten_upserts = false;
	nresumable = 0;
	memset(&seen, 0, sizeof(seen));
	memset(&upserting, 0, sizeof(upserting));
	max_cid = FirstCommandId;
	writing = 0;
	broken = false;
	memset(&spool, 0, sizeof(spool));
	memset(&run_deletes_file, 0, sizeof(run_deletes_file));
	memset(&run_upserts_file, 0, sizeof(run_upserts_file));
}
