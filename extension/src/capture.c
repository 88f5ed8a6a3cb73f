/*
 * capture.c: a transaction's changes of replicated tables, captured in the
 * backend's memory by a row trigger (Tashkent §8.1, "Writeset Extraction":
 * triggers on INSERT, UPDATE and DELETE record the table, the operation,
 * the primary key and the new row).
 *
 * tashkent.capture() is an AFTER INSERT OR UPDATE OR DELETE FOR EACH ROW
 * trigger and an AFTER TRUNCATE statement trigger, ENABLE ALWAYS, on every
 * permanent table of the database (sql/tashkent--1.0.sql installs them).
 * Each call appends events to a list that lives as long as the transaction;
 * at commit, commit.c hands the list to writeset.c, which collapses it and
 * encodes the writeset. Nothing is written to the database, and nothing is
 * collected by a round trip: the writeset is ready in the backend that
 * certifies it.
 *
 * The events of a row:
 *
 *   INSERT   UPSERT (key, row)
 *   DELETE   DELETE (key)
 *   UPDATE   KEEPING_UPSERT (key, row) if it kept the primary key and no
 *            foreign key references the table through another index (a
 *            keeping update, Change.keeps_row); UPSERT (key, row) if it
 *            kept the key otherwise; DELETE (old key) and UPSERT (new key,
 *            row) if it moved the key
 *
 * and of a row of a table without a primary key (its whole row is its
 * identity, as with PostgreSQL's REPLICA IDENTITY FULL):
 *
 *   INSERT   INSERT_ROW (row)
 *   DELETE   DELETE_ROW (old row, as the key)
 *   UPDATE   DELETE_ROW (old row), INSERT_ROW (new row)
 *
 * plus UNIQUE_KEY events for the values of certified unique indexes the
 * row took (INSERT), freed (DELETE) or changed (UPDATE: old and new), and
 * REFERENCE events for the parent rows it references through a foreign key
 * (INSERT, and UPDATE when the foreign key's columns changed). See
 * relinfo.c for which indexes and how parents are named.
 *
 * Keys are JSON arrays of the key columns' values, written as to_json
 * writes them (numbers bare, bool, json as is, anything else a string of
 * the type's output text); rows are the row type's text form (record_out),
 * which the applier reads back with record_in. Both are printed with the
 * settings that change how values print pinned (DateStyle ISO, YMD,
 * IntervalStyle postgres, TimeZone UTC, bytea_output hex, extra_float_digits
 * 1), so that the same row gives the same bytes on every replica, whatever
 * the session set: the certifier compares keys as bytes.
 *
 * The order of events. AFTER ROW triggers fire at the end of the statement
 * that made the change, so a statement run by a trigger or function inside
 * another (a nested statement) has its events fire before those of the
 * statement it runs in, although its changes came later. Each event
 * carries the command id of the change (cid): of the new row version for
 * INSERT and UPDATE (its cmin), of the deletion for DELETE (the old
 * version's cmax), read from the tuple header the trigger gets (fetched
 * from the heap; HeapTupleHeaderGetCmin/Cmax resolve combo command ids).
 * A nested statement runs under a later command id than the statement
 * that runs it, so (cid, firing order) is the order changes happened in,
 * with one exception writeset.c handles: a BEFORE trigger's nested
 * statement runs before the change of the statement that runs it, which
 * keeps the earlier command id.
 *
 * Savepoints: a rolled-back subtransaction's events are dropped
 * (tk_capture_subxact). Events are allocated in the subtransaction's
 * memory (CurTransactionContext), which PostgreSQL frees with it; the
 * list, in TopTransactionContext, is cut back to its length at the
 * subtransaction's start.
 *
 * Large transactions: once the list's events take more memory than
 * tashkent.stream_threshold, the transaction is streamed (stream.c): the
 * events held go to a temporary file, in order, and are freed, and so is
 * every later event as soon as it is captured. A savepoint's mark then
 * holds its place in the stream, which its rollback cuts back to. The
 * limits count the same in both: every row change, and the bytes of keys
 * and rows.
 *
 * Nothing is captured for the agent's applier (its writes are other
 * replicas' certified changes) nor under tashkent.maintenance.
 */
#include "tashkent.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "common/jsonapi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgtime.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/bytea.h"
#include "utils/datum.h"
#include "utils/float.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(tashkent_capture);

/* The transaction's events, in the order capture saw them. */
static List *events = NIL;
static uint32 next_seq = 0;
static int64 row_changes = 0;	/* UPSERT, DELETE, INSERT_ROW and DELETE_ROW
								 * events */
static int64 event_bytes = 0;	/* of keys and rows */
static int64 held_bytes = 0;	/* the memory the list's events take */
static bool has_ddl = false;
static uint64 ddl_label = 0;
static uint64 first_version = 0;	/* the replica's version at the first event */
static uint64 first_row_identity_version = 0;	/* ... at the first DELETE_ROW */

/* What a subtransaction's rollback puts back. */
typedef struct SubxactMark
{
	SubTransactionId subid;
	int			nevents;
	int64		row_changes;
	int64		event_bytes;
	int64		held_bytes;
	bool		has_ddl;
	uint64		ddl_label;
	TkStreamMark stream;		/* where in the stream, once streamed */
} SubxactMark;

static SubxactMark *marks = NULL;	/* a stack, in TopMemoryContext */
static int	nmarks = 0;
static int	maxmarks = 0;

/* The print settings, saved while capture's are pinned. */
typedef struct PrintSettings
{
	int			date_style;
	int			date_order;
	int			interval_style;
	int			bytea_output;
	int			extra_float_digits;
	pg_tz	   *timezone;
} PrintSettings;

static pg_tz *utc = NULL;

/*
 * pin_print_settings: the settings that change how values print, set to
 * capture's values, on the variables behind them (a GUC change would cost
 * a nest level and the settings' text at every call; nothing else runs
 * while they are pinned, and restore_print_settings puts them back, also
 * on error).
 */
static void
pin_print_settings(PrintSettings *saved)
{
	if (utc == NULL)
	{
		utc = pg_tzset("UTC");
		if (utc == NULL)
			elog(ERROR, "could not load time zone \"UTC\"");
	}
	saved->date_style = DateStyle;
	saved->date_order = DateOrder;
	saved->interval_style = IntervalStyle;
	saved->bytea_output = bytea_output;
	saved->extra_float_digits = extra_float_digits;
	saved->timezone = session_timezone;
	DateStyle = USE_ISO_DATES;
	DateOrder = DATEORDER_YMD;
	IntervalStyle = INTSTYLE_POSTGRES;
	bytea_output = BYTEA_OUTPUT_HEX;
	extra_float_digits = 1;
	session_timezone = utc;
}

static void
restore_print_settings(const PrintSettings *saved)
{
	DateStyle = saved->date_style;
	DateOrder = saved->date_order;
	IntervalStyle = saved->interval_style;
	bytea_output = saved->bytea_output;
	extra_float_digits = saved->extra_float_digits;
	session_timezone = saved->timezone;
}

/*
 * new_event: an event, with copies of its texts, in one allocation of the
 * current subtransaction's memory. The limits are checked here: they
 * bound the memory a transaction's capture takes, and the writeset the
 * certifier is sent. namelen: the leading bytes of table that name the
 * table itself (stream.c certifies a streamed transaction on tables).
 */
static TkEvent *
new_event(TkEventKind kind, CommandId cid, const char *table, int tablelen, int namelen,
		  const char *key, int keylen, const char *row, int rowlen)
{
	Size		size = MAXALIGN(sizeof(TkEvent));
	TkEvent    *e;
	char	   *p;

	if (kind == TK_EVENT_UPSERT || kind == TK_EVENT_KEEPING_UPSERT || kind == TK_EVENT_DELETE
		|| kind == TK_EVENT_INSERT_ROW || kind == TK_EVENT_DELETE_ROW)
	{
		if (row_changes >= tk_writeset_max_rows)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("the transaction's writeset exceeds tashkent.writeset_max_rows (%d row changes)",
							tk_writeset_max_rows),
					 errhint("Split the transaction, or raise tashkent.writeset_max_rows.")));
		row_changes++;
	}
	if (event_bytes + keylen + rowlen > (int64) tk_writeset_max_bytes * 1024)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the transaction's writeset exceeds tashkent.writeset_max_bytes (%d kB)",
						tk_writeset_max_bytes),
				 errhint("Split the transaction, or raise tashkent.writeset_max_bytes.")));
	event_bytes += keylen + rowlen;

	size += (table ? tablelen + 1 : 0) + (key ? keylen + 1 : 0) + (row ? rowlen + 1 : 0);
	e = MemoryContextAllocZero(CurTransactionContext, size);
	held_bytes += size + sizeof(ListCell);
	p = (char *) e + MAXALIGN(sizeof(TkEvent));
	e->kind = kind;
	e->cid = cid;
	e->seq = next_seq++;
	if (table)
	{
		memcpy(p, table, tablelen);
		e->table = p;
		e->namelen = namelen;
		p += tablelen + 1;
	}
	if (key)
	{
		memcpy(p, key, keylen);
		e->key = p;
		e->keylen = keylen;
		p += keylen + 1;
	}
	if (row)
	{
		memcpy(p, row, rowlen);
		e->row = p;
		e->rowlen = rowlen;
	}
	if (events == NIL && !tk_stream_active())
		first_version = tk_committed();
	if (kind == TK_EVENT_DELETE_ROW && first_row_identity_version == 0)
		first_row_identity_version = tk_committed();
	return e;
}

/*
 * start_streaming: the events held so far go to the stream (stream.c), in
 * their order, and are freed. A savepoint taken among them gets its place
 * in the stream, where its rollback cuts it back to.
 */
static void
start_streaming(void)
{
	ListCell   *lc;
	int			m = 0;

	tk_stream_start();
	foreach(lc, events)
	{
		for (; m < nmarks && marks[m].nevents <= foreach_current_index(lc); m++)
			tk_stream_mark(&marks[m].stream);
		tk_stream_event(lfirst(lc));
	}
	for (; m < nmarks; m++)
		tk_stream_mark(&marks[m].stream);
	tk_stream_started();
	foreach(lc, events)
		pfree(lfirst(lc));
	list_free(events);
	events = NIL;
	held_bytes = 0;
}

/*
 * add_event: the event joins the transaction's: held in the list, or, in
 * a streamed transaction, written to the stream and freed. The list
 * turns into a stream once it holds more than tashkent.stream_threshold.
 */
static void
add_event(TkEvent *e)
{
	MemoryContext old;

	if (tk_stream_active())
	{
		tk_stream_event(e);
		pfree(e);
		return;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	events = lappend(events, e);
	MemoryContextSwitchTo(old);
	if (held_bytes > (int64) tk_stream_threshold * 1024)
		start_streaming();
}

static void
append_event(TkEventKind kind, CommandId cid, const char *table, int tablelen, int namelen,
			 const char *key, int keylen, const char *row, int rowlen)
{
	add_event(new_event(kind, cid, table, tablelen, namelen, key, keylen, row, rowlen));
}

/* append_json_value: one value of a key, as to_json writes it. */
static void
append_json_value(StringInfo buf, TkColumn *col, Datum value, bool isnull)
{
	char	   *text;

	if (isnull)
	{
		appendStringInfoString(buf, "null");
		return;
	}
	if (col->json == TK_JSON_BOOL)
	{
		appendStringInfoString(buf, DatumGetBool(value) ? "true" : "false");
		return;
	}
	text = OutputFunctionCall(&col->output, value);
	if (col->json == TK_JSON_RAW
		|| (col->json == TK_JSON_NUMBER && IsValidJsonNumber(text, strlen(text))))
		appendStringInfoString(buf, text);
	else
		escape_json(buf, text);	/* a string; NaN and Infinity too */
	pfree(text);
}

/* A row version, deformed. */
typedef struct RowImage
{
	HeapTuple	tuple;
	Datum	   *values;			/* [attnum - 1] */
	bool	   *nulls;
} RowImage;

static void
deform(RowImage *img, HeapTuple tuple, TupleDesc desc)
{
	img->tuple = tuple;
	img->values = palloc(sizeof(Datum) * Max(desc->natts, 1));
	img->nulls = palloc(sizeof(bool) * Max(desc->natts, 1));
	heap_deform_tuple(tuple, desc, img->values, img->nulls);
}

/*
 * key_text: into buf, the JSON array of the values of key's columns in
 * img. False when the key has a SQL NULL and NULLs are distinct in its
 * index: such values are no key (they never conflict).
 */
static bool
key_text(StringInfo buf, TkRelInfo *info, const TkKey *key, const RowImage *img)
{
	resetStringInfo(buf);
	if (key->nulls_distinct)
		for (int i = 0; i < key->ncols; i++)
			if (img->nulls[key->attnums[i] - 1])
				return false;
	appendStringInfoChar(buf, '[');
	for (int i = 0; i < key->ncols; i++)
	{
		int			k = key->attnums[i] - 1;

		if (i > 0)
			appendStringInfoChar(buf, ',');
		append_json_value(buf, &info->columns[k], img->values[k], img->nulls[k]);
	}
	appendStringInfoChar(buf, ']');
	return true;
}

/*
 * row_text: into buf, the row's text form, byte for byte what record_out
 * prints (src/backend/utils/adt/rowtypes.c), with the relation's cached
 * output functions: NULL as nothing, a value quoted when empty or when it
 * holds a quote, backslash, parenthesis, comma or space, quotes and
 * backslashes doubled inside.
 */
static void
row_text(StringInfo buf, TkRelInfo *info, const RowImage *img)
{
	bool		comma = false;

	resetStringInfo(buf);
	appendStringInfoChar(buf, '(');
	for (int i = 0; i < info->natts; i++)
	{
		TkColumn   *col = &info->columns[i];
		char	   *value;
		bool		quote;

		if (col->dropped)
			continue;
		if (comma)
			appendStringInfoChar(buf, ',');
		comma = true;
		if (img->nulls[i])
			continue;
		value = OutputFunctionCall(&col->output, img->values[i]);
		quote = value[0] == '\0';
		for (char *p = value; *p && !quote; p++)
			quote = *p == '"' || *p == '\\' || *p == '(' || *p == ')' || *p == ','
				|| isspace((unsigned char) *p);
		if (quote)
			appendStringInfoCharMacro(buf, '"');
		for (char *p = value; *p; p++)
		{
			if (*p == '"' || *p == '\\')
				appendStringInfoCharMacro(buf, *p);
			appendStringInfoCharMacro(buf, *p);
		}
		if (quote)
			appendStringInfoCharMacro(buf, '"');
		pfree(value);
	}
	appendStringInfoChar(buf, ')');
}

/* columns_equal: whether a and b hold the same bytes in the columns. */
static bool
columns_equal(TupleDesc desc, const AttrNumber *attnums, int ncols,
			  const RowImage *a, const RowImage *b)
{
	for (int i = 0; i < ncols; i++)
	{
		int			k = attnums[i] - 1;
		Form_pg_attribute att = TupleDescAttr(desc, k);

		if (a->nulls[k] != b->nulls[k])
			return false;
		if (!a->nulls[k] && !datum_image_eq(a->values[k], b->values[k], att->attbyval, att->attlen))
			return false;
	}
	return true;
}

static bool
any_null(const AttrNumber *attnums, int ncols, const RowImage *img)
{
	for (int i = 0; i < ncols; i++)
		if (img->nulls[attnums[i] - 1])
			return true;
	return false;
}

/* A parent row's key, printed. */
typedef struct ParentKey
{
	char	   *label;			/* NULL: no parent row found */
	int			namelen;		/* the label's leading bytes naming the parent */
	StringInfoData key;
} ParentKey;

/* One row's capture: what its trigger call gives and what it found. */
typedef struct RowCapture
{
	Relation	rel;
	TkRelInfo  *info;
	CommandId	cid;
	RowImage	old;			/* UPDATE, DELETE */
	RowImage	new;			/* INSERT, UPDATE */
	bool		has_old;
	bool		has_new;
	bool	   *refers;			/* per foreign key: record its reference */
	ParentKey  *parents;		/* per foreign key looked up */
} RowCapture;

/* print_key: key_text under the pinned print settings. */
static void
print_key(StringInfo buf, TkRelInfo *info, const TkKey *key, const RowImage *img)
{
	PrintSettings saved;

	pin_print_settings(&saved);
	PG_TRY();
	{
		key_text(buf, info, key, img);
	}
	PG_FINALLY();
	{
		restore_print_settings(&saved);
	}
	PG_END_TRY();
}

/*
 * find_parent: the key of the parent row the new row references through
 * fk, a foreign key whose parent is looked up (see relinfo.c), printed as
 * the parent's own capture prints it. The lookup runs before the print
 * settings are pinned: it compares values as the session does. The key is
 * printed at once, and the parent's entry not kept: a later lookup may
 * rebuild it.
 */
static void
find_parent(RowCapture *rc, TkForeignKey *fk, ParentKey *parent)
{
	Datum		values[INDEX_MAX_KEYS];
	Oid			partition;
	TkRelInfo  *pinfo;
	const TkKey *pkey;
	RowImage	prow;

	if (!tk_relinfo_find_parent(fk, rc->new.values, &partition, values))
		return;
	/* the table itself (a self-reference): its entry is in use */
	pinfo = partition == rc->info->relid ? rc->info : tk_relinfo_get_oid(partition);
	pkey = tk_relinfo_index_key(pinfo, fk->index, fk->index_is_pk);
	if (pkey == NULL)
		return;
	prow.values = palloc0(sizeof(Datum) * Max(pinfo->natts, 1));
	prow.nulls = palloc(sizeof(bool) * Max(pinfo->natts, 1));
	memset(prow.nulls, true, sizeof(bool) * Max(pinfo->natts, 1));
	for (int i = 0; i < pkey->ncols; i++)
	{
		prow.values[pkey->attnums[i] - 1] = values[i];
		prow.nulls[pkey->attnums[i] - 1] = false;
	}
	initStringInfo(&parent->key);
	print_key(&parent->key, pinfo, pkey, &prow);
	parent->label = pstrdup(pkey->label);
	parent->namelen = pkey->namelen;
}

/*
 * emit_row_change: the row's UPSERT, KEEPING_UPSERT or DELETE (an UPDATE
 * that moved the primary key: the old key's DELETE, then the new key's
 * UPSERT). An UPSERT remembers the row version it wrote, for
 * tk_capture_row_state.
 */
static void
emit_row_change(RowCapture *rc, StringInfo key, StringInfo other, StringInfo row)
{
	TkRelInfo  *info = rc->info;
	TkEventKind kind = TK_EVENT_UPSERT;
	TkEvent    *e;

	if (!rc->has_new)
	{
		key_text(key, info, &info->pk, &rc->old);
		append_event(TK_EVENT_DELETE, rc->cid, info->name, info->namelen, info->namelen,
					 key->data, key->len, NULL, 0);
		return;
	}
	key_text(key, info, &info->pk, &rc->new);
	if (rc->has_old)
	{
		bool		moved = false;

		/* the key moved if its bytes changed and it prints otherwise */
		if (!columns_equal(RelationGetDescr(rc->rel), info->pk.attnums, info->pk.ncols,
						   &rc->old, &rc->new))
		{
			key_text(other, info, &info->pk, &rc->old);
			moved = other->len != key->len || memcmp(other->data, key->data, key->len) != 0;
		}
		if (moved)
			append_event(TK_EVENT_DELETE, rc->cid, info->name, info->namelen, info->namelen,
						 other->data, other->len, NULL, 0);
		else if (info->keeping)
			kind = TK_EVENT_KEEPING_UPSERT;
	}
	row_text(row, info, &rc->new);
	e = new_event(kind, rc->cid, info->name, info->namelen, info->namelen,
				  key->data, key->len, row->data, row->len);
	e->relid = RelationGetRelid(rc->rel);
	e->relfilenode = rc->rel->rd_node.relNode;
	e->tid = rc->new.tuple->t_self;
	add_event(e);
}

/*
 * emit_keyless_change: the row change of a table without a primary key:
 * the old row's DELETE_ROW, the new row's INSERT_ROW, or both (an
 * UPDATE, both under its command id: writeset.c orders deletes first).
 */
static void
emit_keyless_change(RowCapture *rc, StringInfo row)
{
	TkRelInfo  *info = rc->info;

	if (rc->has_old)
	{
		row_text(row, info, &rc->old);
		append_event(TK_EVENT_DELETE_ROW, rc->cid, info->name, info->namelen, info->namelen,
					 row->data, row->len, NULL, 0);
	}
	if (rc->has_new)
	{
		row_text(row, info, &rc->new);
		append_event(TK_EVENT_INSERT_ROW, rc->cid, info->name, info->namelen, info->namelen,
					 NULL, 0, row->data, row->len);
	}
}

/* emit_unique_keys: the unique values the row took, freed or changed. */
static void
emit_unique_keys(RowCapture *rc, StringInfo key, StringInfo other)
{
	TkRelInfo  *info = rc->info;

	for (int u = 0; u < info->nunique; u++)
	{
		const TkKey *uk = &info->unique[u];
		bool		has_new = false;
		bool		has_old = false;

		if (rc->has_old && rc->has_new
			&& columns_equal(RelationGetDescr(rc->rel), uk->attnums, uk->ncols, &rc->old, &rc->new))
			continue;
		if (rc->has_new)
			has_new = key_text(key, info, uk, &rc->new);
		if (rc->has_old)
			has_old = key_text(other, info, uk, &rc->old);
		if (has_new && has_old && key->len == other->len
			&& memcmp(key->data, other->data, key->len) == 0)
			continue;			/* equal values of different bytes */
		if (has_old)
			append_event(TK_EVENT_UNIQUE_KEY, rc->cid, uk->label, strlen(uk->label), uk->namelen,
						 other->data, other->len, NULL, 0);
		if (has_new)
			append_event(TK_EVENT_UNIQUE_KEY, rc->cid, uk->label, strlen(uk->label), uk->namelen,
						 key->data, key->len, NULL, 0);
	}
}

/*
 * emit_references: the parent rows the row references, named as the
 * parents' own changes name them: the referencing values themselves where
 * they print as the parent's (relinfo.c), else the parent's key as
 * find_parent printed it.
 */
static void
emit_references(RowCapture *rc, StringInfo key)
{
	TkRelInfo  *info = rc->info;

	for (int f = 0; f < info->nfkeys; f++)
	{
		TkForeignKey *fk = &info->fkeys[f];
		ParentKey  *parent = &rc->parents[f];

		if (!rc->refers[f])
			continue;
		if (fk->label != NULL)
		{
			TkKey		direct;

			direct.label = fk->label;
			direct.nulls_distinct = true;
			direct.ncols = fk->ncols;
			memcpy(direct.attnums, fk->attnums, sizeof(AttrNumber) * fk->ncols);
			key_text(key, info, &direct, &rc->new);
			append_event(TK_EVENT_REFERENCE, rc->cid, fk->label, strlen(fk->label),
						 fk->label_namelen, key->data, key->len, NULL, 0);
		}
		else if (parent->label != NULL)
			append_event(TK_EVENT_REFERENCE, rc->cid, parent->label, strlen(parent->label),
						 parent->namelen, parent->key.data, parent->key.len, NULL, 0);
	}
}

/* emit_row_events: the events of one row, with print settings pinned. */
static void
emit_row_events(RowCapture *rc)
{
	StringInfoData key;
	StringInfoData other;
	StringInfoData row;

	initStringInfo(&key);
	initStringInfo(&other);
	initStringInfo(&row);
	if (rc->info->has_pk)
		emit_row_change(rc, &key, &other, &row);
	else
		emit_keyless_change(rc, &row);
	if (rc->info->nunique > 0)
		emit_unique_keys(rc, &key, &other);
	if (rc->info->nfkeys > 0)
		emit_references(rc, &key);
}

static void
capture_row(TriggerData *trigdata, TkRelInfo *info)
{
	TriggerEvent event = trigdata->tg_event;
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	RowCapture	rc;
	PrintSettings saved;

	memset(&rc, 0, sizeof(rc));
	rc.rel = trigdata->tg_relation;
	rc.info = info;
	if (TRIGGER_FIRED_BY_INSERT(event))
	{
		rc.has_new = true;
		deform(&rc.new, trigdata->tg_trigtuple, desc);
		rc.cid = HeapTupleHeaderGetCmin(trigdata->tg_trigtuple->t_data);
	}
	else if (TRIGGER_FIRED_BY_DELETE(event))
	{
		rc.has_old = true;
		deform(&rc.old, trigdata->tg_trigtuple, desc);
		rc.cid = HeapTupleHeaderGetCmax(trigdata->tg_trigtuple->t_data);
	}
	else
	{
		rc.has_old = rc.has_new = true;
		deform(&rc.old, trigdata->tg_trigtuple, desc);
		deform(&rc.new, trigdata->tg_newtuple, desc);
		rc.cid = HeapTupleHeaderGetCmin(trigdata->tg_newtuple->t_data);
	}

	if (info->nfkeys > 0)
	{
		rc.refers = palloc0(sizeof(bool) * info->nfkeys);
		rc.parents = palloc0(sizeof(ParentKey) * info->nfkeys);
		for (int f = 0; f < info->nfkeys; f++)
		{
			TkForeignKey *fk = &info->fkeys[f];

			/* MATCH SIMPLE: a key with a NULL references nothing */
			rc.refers[f] = rc.has_new && !any_null(fk->attnums, fk->ncols, &rc.new)
				&& (!rc.has_old || !columns_equal(desc, fk->attnums, fk->ncols, &rc.old, &rc.new));
			if (rc.refers[f] && fk->label == NULL)
				find_parent(&rc, fk, &rc.parents[f]);
		}
	}

	pin_print_settings(&saved);
	PG_TRY();
	{
		emit_row_events(&rc);
	}
	PG_FINALLY();
	{
		restore_print_settings(&saved);
	}
	PG_END_TRY();
}

/*
 * tashkent.capture(): the trigger. Its memory is the trigger call's (the
 * executor resets it after each call); the events go to the transaction's.
 */
Datum
tashkent_capture(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TkRelInfo  *info;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tashkent.capture() must be fired as an AFTER trigger")));
	/*
	 * An extension's script (CREATE or ALTER EXTENSION) is replicated as
	 * the statement that runs it, and fills its tables on every replica
	 * itself.
	 */
	if (tk_backend_is_applier || tk_maintenance || creating_extension)
		return PointerGetDatum(NULL);
	if (trigdata->tg_relation->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		return PointerGetDatum(NULL);

	info = tk_relinfo_get(trigdata->tg_relation);
	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		append_event(TK_EVENT_TRUNCATE, GetCurrentCommandId(true), info->name, info->namelen,
					 info->namelen, NULL, 0, NULL, 0);
	else if (TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		capture_row(trigdata, info);
	else
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tashkent.capture() must be fired for each row, or for TRUNCATE")));
	return PointerGetDatum(NULL);
}

bool
tk_capture_pending(void)
{
	return events != NIL || tk_stream_active();
}

bool
tk_capture_has_ddl(void)
{
	return has_ddl;
}

uint64
tk_capture_ddl_label(void)
{
	return ddl_label;
}

/*
 * tk_capture_first_version: the replica's version when the transaction
 * captured its first change (commit.c's start version when DDL committed
 * meanwhile).
 */
uint64
tk_capture_first_version(void)
{
	return first_version;
}

/*
 * tk_capture_first_row_identity_version: the replica's version when the
 * transaction first updated or deleted a row of a table without a primary
 * key (0: it did not). commit.c certifies such a transaction from it.
 */
uint64
tk_capture_first_row_identity_version(void)
{
	return first_row_identity_version;
}

/*
 * tk_capture_ddl: a DDL statement, replicated as its text (ddl.c), in its
 * place among the row changes, with the search_path it ran under (the
 * applier runs it under the same, so that its names mean the same
 * objects) and the role that ran it (the applier runs it as that role, so
 * that what it creates has the same owner). label is the version its
 * snapshot saw; the transaction is certified from the smallest.
 */
void
tk_capture_ddl(const char *sql, int len, const char *search_path, const char *role,
			   uint64 label)
{
	TkEvent    *e;

	e = new_event(TK_EVENT_DDL, GetCurrentCommandId(true), NULL, 0, 0,
				  search_path, strlen(search_path), sql, len);
	e->role = MemoryContextStrdup(CurTransactionContext, role);
	add_event(e);
	if (!has_ddl || label < ddl_label)
		ddl_label = label;
	has_ddl = true;
}

List *
tk_capture_events(void)
{
	return events;
}

/*
 * tk_capture_row_state: whether the row version an UPSERT wrote is still
 * the row's current version in this transaction: inserted by a part of
 * it that did not roll back and not updated nor deleted by one since
 * (SnapshotSelf, which ignores command ids). Asked at commit by
 * writeset.c, for the keys whose events' order it cannot tell from
 * command ids. UNKNOWN when the table has been rewritten since (TRUNCATE,
 * a rewriting ALTER TABLE): the version's TID means nothing there.
 */
TkRowState
tk_capture_row_state(const TkEvent *event)
{
	Relation	rel;
	TupleTableSlot *slot;
	TkRowState	state = TK_ROW_UNKNOWN;

	rel = try_table_open(event->relid, AccessShareLock);
	if (rel == NULL)
		return TK_ROW_UNKNOWN;
	if (rel->rd_node.relNode == event->relfilenode
		&& ItemPointerGetBlockNumber(&event->tid) < RelationGetNumberOfBlocks(rel))
	{
		ItemPointerData tid = event->tid;

		slot = table_slot_create(rel, NULL);
		state = table_tuple_fetch_row_version(rel, &tid, SnapshotSelf, slot) ?
			TK_ROW_CURRENT : TK_ROW_GONE;
		ExecDropSingleTupleTableSlot(slot);
	}
	table_close(rel, NoLock);
	return state;
}

void
tk_capture_xact_end(void)
{
	events = NIL;				/* freed with the transaction's memory */
	next_seq = 0;
	row_changes = 0;
	event_bytes = 0;
	held_bytes = 0;
	has_ddl = false;
	ddl_label = 0;
	first_version = 0;
	first_row_identity_version = 0;
	nmarks = 0;
	tk_stream_xact_end();
}

/*
 * tk_capture_subxact: a savepoint (or a PL/pgSQL EXCEPTION block) that
 * rolls back takes its events with it. Marks are pushed for every
 * subtransaction, capturing or not: a push is cheaper than finding out.
 */
void
tk_capture_subxact(SubXactEvent event, SubTransactionId mySubid,
				   SubTransactionId parentSubid)
{
	switch (event)
	{
		case SUBXACT_EVENT_START_SUB:
			if (nmarks == maxmarks)
			{
				maxmarks = Max(16, maxmarks * 2);
				marks = marks == NULL ?
					MemoryContextAlloc(TopMemoryContext, sizeof(SubxactMark) * maxmarks) :
					repalloc(marks, sizeof(SubxactMark) * maxmarks);
			}
			marks[nmarks].subid = mySubid;
			marks[nmarks].nevents = list_length(events);
			marks[nmarks].row_changes = row_changes;
			marks[nmarks].event_bytes = event_bytes;
			marks[nmarks].held_bytes = held_bytes;
			marks[nmarks].has_ddl = has_ddl;
			marks[nmarks].ddl_label = ddl_label;
			if (tk_stream_active())
				tk_stream_mark(&marks[nmarks].stream);
			nmarks++;
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			if (nmarks > 0 && marks[nmarks - 1].subid == mySubid)
				nmarks--;
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			for (int i = nmarks - 1; i >= 0; i--)
			{
				if (marks[i].subid != mySubid)
					continue;
				if (tk_stream_active())
					tk_stream_cut(&marks[i].stream);
				else
				{
					events = list_truncate(events, marks[i].nevents);
					held_bytes = marks[i].held_bytes;
				}
				row_changes = marks[i].row_changes;
				event_bytes = marks[i].event_bytes;
				has_ddl = marks[i].has_ddl;
				ddl_label = marks[i].ddl_label;
				nmarks = i;
				break;
			}
			break;
		default:
			break;
	}
}
