/*
 * tashkent_capture.c: tashkent.capture_key in C, for the statements that
 * make up almost every OLTP transaction, and tashkent.take_writeset, the
 * collect the proxy runs at every COMMIT (at the end of this file).
 *
 * Why: capture is most of what a write transaction costs tashkent (see
 * "Capture in C" in ../doc.go). The PL/pgSQL capture_key runs, per
 * statement, a dozen plpgsql expressions and an INSERT ... SELECT over the
 * transition table that prints the key through to_json; this function
 * reads the transition tables itself and appends the same rows to the same
 * buffer, straight into its heap (append_batch).
 *
 * What it does: exactly what tashkent.capture_key_plpgsql (sql.go) does on
 * its plain path, and nothing else. It appends to pg_temp.tashkent_writeset
 * (tbl, op, key, row) for a statement-level AFTER trigger of a table with
 * one primary key column (TG_ARGV[0]; TG_ARGV[1] is the letter of an
 * UPDATE that moved no key):
 *
 *   INSERT: 'U', key, row for every new row;
 *   DELETE: 'D', key for every old row;
 *   UPDATE of one row: TG_ARGV[1] (or 'U'), key, row if the key stayed;
 *     'D' old key, then 'U' new key and row if it moved.
 *
 * The key is the JSON array of the key value as to_json prints it, the row
 * PostgreSQL's text form of the row (record_out): byte for byte what the
 * PL/pgSQL function writes (TestCaptureSameEventsAsBefore compares both
 * with the capture from before the capture cost work).
 *
 * Everything else goes to tashkent.capture_key_plpgsql, called with this
 * call's trigger data: a session without capture (it refuses the write),
 * print settings that are not the pinned ones (it pins them), a nested
 * statement or a transaction in which one ran (it records by state), an
 * UPDATE of several rows (it compares the key sets), and a key type whose
 * JSON form is not plain (anything but int2, int4, int8, text, varchar,
 * uuid). (The row prints with record_out on both paths: PL/pgSQL's
 * tashkent_n.* is a record, so no cast of the table's row type applies.) A fallback
 * costs one function lookup on top of the PL/pgSQL call; with
 * track_functions = all, pg_stat_user_functions counts the fallbacks as
 * calls of capture_key_plpgsql.
 *
 * It runs as tashkent_capture (SECURITY DEFINER, as the PL/pgSQL one), so
 * that the sealed buffer is writable here and nowhere else.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "utils/acl.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "pgstat.h"
#include "pgtime.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/bytea.h"
#include "utils/float.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/xid8.h"
#include "utils/tuplestore.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(tashkent_capture_key);

/* Events printed before they are appended: a bulk statement's go in batches. */
#define BATCH_ROWS 1024

/* The writeset buffer's columns (create_writeset_buffer in sql.go). */
enum
{
	BUFFER_SEQ,					/* bigserial: the order of the events */
	BUFFER_XID,					/* xid8, DEFAULT pg_current_xact_id() */
	BUFFER_TBL,
	BUFFER_OP,
	BUFFER_KEY,
	BUFFER_ROW,
	BUFFER_COLUMNS
};

static const Oid bufferTypes[BUFFER_COLUMNS] = {INT8OID, XID8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};

/*
 * The buffer, opened for a statement's first batch: the relation, and its
 * two defaults, evaluated for every event as an INSERT would.
 */
typedef struct WritesetBuffer
{
	Relation	rel;
	ExprState  *defaults[2];	/* BUFFER_SEQ, BUFFER_XID */
	ExprContext *econtext;
} WritesetBuffer;

/* How the key column prints in JSON. */
typedef enum KeyForm
{
	KEY_UNSUPPORTED,			/* the PL/pgSQL function handles it */
	KEY_NUMBER,					/* int2, int4, int8: the output text */
	KEY_STRING					/* text, varchar, uuid: a quoted JSON string */
} KeyForm;

/* One statement's capture: what the events are made of, and the batch. */
typedef struct Capture
{
	TupleTableSlot *slot;		/* a transition row */
	AttrNumber	keyAttr;
	KeyForm		keyForm;
	FmgrInfo	keyOut;			/* the key type's output function */
	FmgrInfo	rowOut;			/* record_out */
	Datum		table;			/* quoted schema.table, as text */
	MemoryContext batchContext; /* the batch's values */
	int			n;				/* events in the batch */
	int			capacity;		/* of the arrays below */
	Datum	   *ops;
	Datum	   *keys;
	Datum	   *rows;
	bool	   *rowNulls;
	WritesetBuffer buffer;			/* rel is NULL until the first batch */
} Capture;

static bool
setting_is(const char *name, const char *want)
{
	const char *value = GetConfigOption(name, true, false);

	return value != NULL && strcmp(value, want) == 0;
}

/*
 * capture_on_with_pinned_output is the PL/pgSQL function's first test:
 * capture set up in this session and the settings that change how values
 * print at the values capture pins. The same comparisons, made on the
 * variables behind the settings rather than on their text (which
 * current_setting builds afresh at every call): TimeZone shows the zone's
 * name, DateStyle starts with "ISO," exactly when its style is ISO.
 */
static bool
capture_on_with_pinned_output(void)
{
	const char *zone = pg_get_timezone_name(session_timezone);

	return setting_is("tashkent.capture", "on")
		&& zone != NULL && (strcmp(zone, "UTC") == 0 || strcmp(zone, "Etc/UTC") == 0)
		&& DateStyle == USE_ISO_DATES
		&& IntervalStyle == INTSTYLE_POSTGRES
		&& bytea_output == BYTEA_OUTPUT_HEX
		&& extra_float_digits > 0;
}

/*
 * nested_capture_may_have_run is NESTED_CAPTURE_MAY_HAVE_RUN (sql.go): a
 * capture inside a user trigger's statement, or a transaction in which one
 * ran at depth 1.
 */
static bool
nested_capture_may_have_run(void)
{
	LOCAL_FCINFO(depthCall, 0);

	InitFunctionCallInfoData(*depthCall, NULL, 0, InvalidOid, NULL, NULL);
	if (DatumGetInt32(pg_trigger_depth(depthCall)) > 1)
		return true;
	return setting_is("tashkent.nested_capture_1", "on");
}

static KeyForm
key_form(Oid type)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return KEY_NUMBER;
		case TEXTOID:
		case VARCHAROID:
		case UUIDOID:
			return KEY_STRING;
		default:
			return KEY_UNSUPPORTED;
	}
}

static AttrNumber
attribute_named(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	return InvalidAttrNumber;
}

static int64
rows_in(Tuplestorestate *transition)
{
	return transition == NULL ? 0 : tuplestore_tuple_count(transition);
}

/*
 * handled_here says whether this function captures the statement itself
 * (else the PL/pgSQL function does), and finds its key column.
 */
static bool
handled_here(TriggerData *trigger, AttrNumber *keyAttr, KeyForm *keyForm)
{
	Relation	rel = trigger->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	TriggerEvent event = trigger->tg_event;

	if (trigger->tg_trigger->tgnargs < 1)
		return false;
	if (!capture_on_with_pinned_output() || nested_capture_may_have_run())
		return false;
	if (TRIGGER_FIRED_BY_UPDATE(event))
	{
		if (trigger->tg_oldtable == NULL || trigger->tg_newtable == NULL)
			return false;
		if (rows_in(trigger->tg_oldtable) > 1 || rows_in(trigger->tg_newtable) > 1)
			return false;
	}
	else if (TRIGGER_FIRED_BY_INSERT(event))
	{
		if (trigger->tg_newtable == NULL)
			return false;
	}
	else if (!TRIGGER_FIRED_BY_DELETE(event) || trigger->tg_oldtable == NULL)
		return false;			/* and a trigger without its transition table errs there */
	*keyAttr = attribute_named(desc, trigger->tg_trigger->tgargs[0]);
	if (*keyAttr == InvalidAttrNumber)
		return false;
	*keyForm = key_form(TupleDescAttr(desc, *keyAttr - 1)->atttypid);
	return *keyForm != KEY_UNSUPPORTED;
}

/*
 * capture_in_plpgsql runs tashkent.capture_key_plpgsql for this trigger
 * call, as the trigger manager would have.
 */
static Datum
capture_in_plpgsql(FunctionCallInfo fcinfo)
{
	List	   *name = list_make2(makeString("tashkent"), makeString("capture_key_plpgsql"));
	FmgrInfo   *plpgsql = palloc0(sizeof(FmgrInfo));
	Datum		result;

	LOCAL_FCINFO(call, 0);

	PgStat_FunctionCallUsage usage;

	fmgr_info(LookupFuncName(name, 0, NULL, false), plpgsql);
	InitFunctionCallInfoData(*call, plpgsql, 0, InvalidOid, fcinfo->context, NULL);
	/* Counted in pg_stat_user_functions, as a trigger's call would be. */
	pgstat_init_function_usage(call, &usage);
	result = FunctionCallInvoke(call);
	pgstat_end_function_usage(&usage, true);
	fcinfo->isnull = call->isnull;
	return result;
}

static void
not_the_buffer(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("tashkent capture: pg_temp.tashkent_writeset is not the writeset buffer tashkent creates"),
			 errhint("Run DISCARD TEMP outside a transaction block: the tashkent proxy sets the buffer up again.")));
}

/*
 * check_buffer_owner refuses a buffer that is not tashkent_capture's (the
 * role these functions run as), in tashkent.refuse_foreign_buffer's words:
 * a buffer of the session's own role holds rows it could forge.
 */
static void
check_buffer_owner(Relation rel)
{
	if (rel->rd_rel->relowner != GetUserId())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("pg_temp.tashkent_writeset belongs to role %s, not to tashkent: writeset capture cannot use it",
						GetUserNameFromId(rel->rd_rel->relowner, false)),
				 errdetail("tashkent keeps the session's writeset in a temporary table that only its own role, tashkent_capture, may read or write."),
				 errhint("Do not create relations named tashkent_writeset; DROP TABLE pg_temp.tashkent_writeset or reconnect.")));
}

/*
 * check_buffer_shape refuses a buffer of another shape than the one
 * create_writeset_buffer gives it: a heap table of its six columns, with
 * nothing an INSERT or DELETE would have to run (no index, trigger, rule,
 * check constraint, generated column, row security or inheritance child).
 */
static void
check_buffer_shape(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	if (rel->rd_rel->relam != HEAP_TABLE_AM_OID
		|| rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relhasindex || rel->rd_rel->relhassubclass
		|| rel->rd_rel->relhasrules || rel->rd_rel->relrowsecurity || rel->trigdesc != NULL
		|| (desc->constr != NULL && desc->constr->num_check > 0) || desc->natts != BUFFER_COLUMNS)
		not_the_buffer();
	for (int i = 0; i < BUFFER_COLUMNS; i++)
		if (TupleDescAttr(desc, i)->atttypid != bufferTypes[i] || TupleDescAttr(desc, i)->attisdropped
			|| TupleDescAttr(desc, i)->attgenerated != '\0')
			not_the_buffer();
}

/*
 * locked_buffer finds pg_temp.tashkent_writeset and locks it for writing,
 * or raises the error a query naming a missing one raises (42P01, which
 * the proxy explains: proxy/commit.go), also in a session that has no
 * temporary schema yet (review h41).
 */
static Oid
locked_buffer(void)
{
	Oid			relid = RangeVarGetRelid(makeRangeVar("pg_temp", "tashkent_writeset", -1), RowExclusiveLock, true);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"pg_temp.tashkent_writeset\" does not exist")));
	return relid;
}

/*
 * open_buffer opens pg_temp.tashkent_writeset for appending, with the
 * checks the INSERT this replaced made (the right to insert) and more: the
 * buffer's owner and shape. The collect checks the owner too; this
 * function does not rely on it (review h39).
 */
static void
open_buffer(WritesetBuffer *b)
{
	Oid			relid = locked_buffer();
	AclResult	acl = pg_class_aclcheck(relid, GetUserId(), ACL_INSERT);

	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_TABLE, "tashkent_writeset");
	b->rel = table_open(relid, NoLock);
	check_buffer_owner(b->rel);
	check_buffer_shape(b->rel);
	for (int i = 0; i < 2; i++)
	{
		Node	   *def = build_column_default(b->rel, i + 1);

		if (def == NULL)
			not_the_buffer();
		b->defaults[i] = ExecInitExpr(expression_planner((Expr *) def), NULL);
	}
	b->econtext = CreateStandaloneExprContext();
}

static void
close_buffer(WritesetBuffer *b)
{
	if (b->rel == NULL)
		return;
	FreeExprContext(b->econtext, true);
	table_close(b->rel, NoLock);	/* the lock is kept to the end of the transaction */
	b->rel = NULL;
}

/*
 * append_batch appends the batch's events to the buffer, in order, each
 * with the next seq and the transaction's id from the buffer's defaults:
 * the rows an INSERT into it would make, without starting an INSERT for
 * every statement (perf put about 8% of all CPU on that INSERT under
 * pgbench -c 16: docs/BENCHMARKS.md, session 12). The heap insert marks the
 * command's id used; the statements that read the buffer later (the
 * collect, a nested capture's PL/pgSQL) see the rows, as they saw an
 * INSERT's.
 */
static void
append_batch(Capture *c)
{
	Datum		values[BUFFER_COLUMNS];
	bool		nulls[BUFFER_COLUMNS] = {false};
	MemoryContext caller;

	if (c->n == 0)
		return;
	if (c->buffer.rel == NULL)
		open_buffer(&c->buffer);
	caller = MemoryContextSwitchTo(c->batchContext);
	values[BUFFER_TBL] = c->table;
	for (int i = 0; i < c->n; i++)
	{
		HeapTuple	tuple;

		for (int d = 0; d < 2; d++)
		{
			values[d] = ExecEvalExprSwitchContext(c->buffer.defaults[d], c->buffer.econtext, &nulls[d]);
			if (nulls[d])
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("tashkent capture: a default of pg_temp.tashkent_writeset is NULL")));
		}
		values[BUFFER_OP] = c->ops[i];
		values[BUFFER_KEY] = c->keys[i];
		values[BUFFER_ROW] = c->rows[i];
		nulls[BUFFER_ROW] = c->rowNulls[i];
		tuple = heap_form_tuple(RelationGetDescr(c->buffer.rel), values, nulls);
		simple_heap_insert(c->buffer.rel, tuple);
		heap_freetuple(tuple);
		ResetExprContext(c->buffer.econtext);
	}
	MemoryContextSwitchTo(caller);
	c->n = 0;
	MemoryContextReset(c->batchContext);
}

/*
 * key_of prints the key of the slot's row as a one-element JSON array, in
 * the batch's context.
 */
static char *
key_of(Capture *c)
{
	bool		isnull;
	Datum		value = slot_getattr(c->slot, c->keyAttr, &isnull);
	MemoryContext caller = MemoryContextSwitchTo(c->batchContext);
	StringInfoData key;

	initStringInfo(&key);
	appendStringInfoChar(&key, '[');
	if (isnull)					/* not in a primary key; printed as to_json would */
		appendStringInfoString(&key, "null");
	else if (c->keyForm == KEY_NUMBER)
		appendStringInfoString(&key, OutputFunctionCall(&c->keyOut, value));
	else
		escape_json(&key, OutputFunctionCall(&c->keyOut, value));
	appendStringInfoChar(&key, ']');
	MemoryContextSwitchTo(caller);
	return key.data;
}

static Datum
row_of(Capture *c)
{
	return CStringGetTextDatum(OutputFunctionCall(&c->rowOut, ExecFetchSlotHeapTupleDatum(c->slot)));
}

/* add appends one event, op and key; withRow also records the slot's row. */
static void
add(Capture *c, const char *op, const char *key, bool withRow)
{
	MemoryContext caller = MemoryContextSwitchTo(c->batchContext);

	c->ops[c->n] = CStringGetTextDatum(op);
	c->keys[c->n] = CStringGetTextDatum(key);
	c->rowNulls[c->n] = !withRow;
	c->rows[c->n] = withRow ? row_of(c) : (Datum) 0;
	c->n++;
	MemoryContextSwitchTo(caller);
	if (c->n == c->capacity)
		append_batch(c);
}

/*
 * open_rows positions a read pointer of its own at the start of a
 * transition table (other triggers of the statement read it too), as a
 * scan of it in SQL does.
 */
static void
open_rows(Tuplestorestate *transition)
{
	tuplestore_select_read_pointer(transition, tuplestore_alloc_read_pointer(transition, EXEC_FLAG_REWIND));
	tuplestore_rescan(transition);
}

static bool
next_row(Capture *c, Tuplestorestate *transition)
{
	return tuplestore_gettupleslot(transition, true, false, c->slot);
}

static void
capture_all(Capture *c, Tuplestorestate *transition, const char *op, bool withRow)
{
	if (transition == NULL)
		return;
	open_rows(transition);
	while (next_row(c, transition))
		add(c, op, key_of(c), withRow);
}

/*
 * capture_update captures an UPDATE of at most one row (handled_here):
 * the keeping letter if the key stayed, else a delete of the old key and
 * an upsert of the new one, as capture_key_plpgsql's two paths do.
 */
static void
capture_update(Capture *c, TriggerData *trigger)
{
	const char *keeping = trigger->tg_trigger->tgnargs > 1 ? trigger->tg_trigger->tgargs[1] : "U";
	char	   *oldKey;
	char	   *newKey;

	if (rows_in(trigger->tg_newtable) == 0 || rows_in(trigger->tg_oldtable) == 0)
		return;
	open_rows(trigger->tg_oldtable);
	if (!next_row(c, trigger->tg_oldtable))
		return;
	oldKey = key_of(c);
	open_rows(trigger->tg_newtable);
	if (!next_row(c, trigger->tg_newtable))
		return;
	newKey = key_of(c);
	/* The slot holds the new row. */
	if (strcmp(oldKey, newKey) == 0)
		add(c, keeping, newKey, true);
	else
	{
		add(c, "D", oldKey, false);
		add(c, "U", newKey, true);
	}
}

Datum
tashkent_capture_key(PG_FUNCTION_ARGS)
{
	TriggerData *trigger;
	Relation	rel;
	Capture    *c;
	Oid			keyOutput;
	bool		keyVarlena;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tashkent.capture_key() is a trigger function")));
	trigger = (TriggerData *) fcinfo->context;
	if (!TRIGGER_FIRED_AFTER(trigger->tg_event) || !TRIGGER_FIRED_FOR_STATEMENT(trigger->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tashkent.capture_key() must fire AFTER, FOR EACH STATEMENT")));

	c = palloc0(sizeof(Capture));
	if (!handled_here(trigger, &c->keyAttr, &c->keyForm))
		return capture_in_plpgsql(fcinfo);

	rel = trigger->tg_relation;
	c->slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsMinimalTuple);
	getTypeOutputInfo(TupleDescAttr(RelationGetDescr(rel), c->keyAttr - 1)->atttypid, &keyOutput, &keyVarlena);
	fmgr_info(keyOutput, &c->keyOut);
	fmgr_info(F_RECORD_OUT, &c->rowOut);
	c->table = CStringGetTextDatum(quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
															  RelationGetRelationName(rel)));
	c->batchContext = AllocSetContextCreate(CurrentMemoryContext, "tashkent capture batch", ALLOCSET_DEFAULT_SIZES);
	/* An UPDATE that moved its key has two events for one row. */
	c->capacity = Min(rows_in(trigger->tg_newtable) + rows_in(trigger->tg_oldtable), BATCH_ROWS);
	c->ops = palloc(sizeof(Datum) * c->capacity);
	c->keys = palloc(sizeof(Datum) * c->capacity);
	c->rows = palloc(sizeof(Datum) * c->capacity);
	c->rowNulls = palloc(sizeof(bool) * c->capacity);

	if (TRIGGER_FIRED_BY_INSERT(trigger->tg_event))
		capture_all(c, trigger->tg_newtable, "U", true);
	else if (TRIGGER_FIRED_BY_DELETE(trigger->tg_event))
		capture_all(c, trigger->tg_oldtable, "D", false);
	else
		capture_update(c, trigger);
	append_batch(c);
	close_buffer(&c->buffer);
	ExecDropSingleTupleTableSlot(c->slot);
	MemoryContextDelete(c->batchContext);
	return PointerGetDatum(NULL);
}

/*
 * tashkent_take_writeset is tashkent.take_writeset (sql.go) in C: the
 * collect the proxy runs at every COMMIT. The PL/pgSQL function runs one
 * statement whose plan (a DELETE ... RETURNING in a CTE, four ordered
 * array_agg, each with a sort of its own, and the checks as subplans) the
 * executor builds and tears down at every call: perf put it at about 0.3
 * ms of the backend's CPU per TPC-B commit (docs/BENCHMARKS.md, session
 * 13). This function scans the buffer once, deletes what it reads, and
 * returns the same four arrays.
 *
 * What it does, as the PL/pgSQL function: it checks that the caller holds
 * the database's record token (the proxy binds it) and that the buffer is
 * tashkent_capture's; otherwise tashkent.check_collector(p_token) decides
 * (it raises, or lets a superuser's session through), and a buffer of
 * another owner is refused all the same. The checks come before the
 * delete: a refused caller does not get the PL/pgSQL function's WARNING
 * that counts the rows earlier transactions left. Every row visible in the buffer
 * is deleted; the current transaction's rows are returned in seq order;
 * the others, left by a transaction that committed without collecting
 * them, are counted in a WARNING, in tashkent.warn_stale_writeset's words.
 * Without rows the four arrays are NULL, as array_agg over no rows.
 */
PG_FUNCTION_INFO_V1(tashkent_take_writeset);

/* One row of the current transaction, its values copied out of the buffer. */
typedef struct TakenRow
{
	int64		seq;
	Datum		values[4];		/* tbl, op, key, row */
	bool		nulls[4];
} TakenRow;

static int
taken_row_order(const void *a, const void *b)
{
	int64		x = ((const TakenRow *) a)->seq;
	int64		y = ((const TakenRow *) b)->seq;

	return (x > y) - (x < y);
}

/* holds_record_token: p_token is the database's record token. */
static bool
holds_record_token(text *token)
{
	Oid			relid = RangeVarGetRelid(makeRangeVar("tashkent", "record_token", -1), AccessShareLock, false);
	Relation	rel = table_open(relid, NoLock);
	TableScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relam != HEAP_TABLE_AM_OID
		|| RelationGetDescr(rel)->natts < 1 || TupleDescAttr(RelationGetDescr(rel), 0)->atttypid != TEXTOID)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tashkent: tashkent.record_token is not the table tashkent installs")));
	scan = table_beginscan(rel, GetActiveSnapshot(), 0, NULL);
	while (!found && (tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		stored = heap_getattr(tuple, 1, RelationGetDescr(rel), &isnull);

		if (!isnull)
			found = DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, stored, PointerGetDatum(token)));
	}
	table_endscan(scan);
	table_close(rel, NoLock);	/* locked to the end of the transaction, as a query's */
	return found;
}

/*
 * let_collector_decide calls tashkent.check_collector(p_token), which
 * raises unless the session may collect.
 */
static void
let_collector_decide(FunctionCallInfo fcinfo)
{
	Oid			argTypes[1] = {TEXTOID};
	List	   *name = list_make2(makeString("tashkent"), makeString("check_collector"));
	FmgrInfo	check;

	LOCAL_FCINFO(call, 1);

	fmgr_info(LookupFuncName(name, 1, argTypes, false), &check);
	InitFunctionCallInfoData(*call, &check, 1, InvalidOid, NULL, NULL);
	call->args[0] = fcinfo->args[0];	/* p_token, NULL or not */
	FunctionCallInvoke(call);
}

/*
 * take_rows deletes every row of the buffer its snapshot sees, and returns
 * the current transaction's, copied (detoasted) before the delete, and
 * how many others it deleted.
 */
static TakenRow *
take_rows(Relation rel, int *n, int64 *stale)
{
	TupleDesc	desc = RelationGetDescr(rel);
	FullTransactionId current = GetTopFullTransactionIdIfAny();
	TableScanDesc scan = table_beginscan(rel, GetActiveSnapshot(), 0, NULL);
	HeapTuple	tuple;
	int			capacity = 16;
	TakenRow   *rows = palloc(sizeof(TakenRow) * capacity);

	*n = 0;
	*stale = 0;
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		xid = heap_getattr(tuple, BUFFER_XID + 1, desc, &isnull);

		if (isnull || !FullTransactionIdIsValid(current)
			|| U64FromFullTransactionId(DatumGetFullTransactionId(xid)) != U64FromFullTransactionId(current))
			(*stale)++;
		else
		{
			TakenRow   *r;

			if (*n == capacity)
			{
				capacity *= 2;
				rows = repalloc(rows, sizeof(TakenRow) * capacity);
			}
			r = &rows[(*n)++];
			r->seq = DatumGetInt64(heap_getattr(tuple, BUFFER_SEQ + 1, desc, &isnull));
			if (isnull)			/* the buffer's seq is NOT NULL (bigserial) */
				not_the_buffer();
			for (int i = 0; i < 4; i++)
			{
				Datum		value = heap_getattr(tuple, BUFFER_TBL + 1 + i, desc, &r->nulls[i]);

				r->values[i] = r->nulls[i] ? (Datum) 0 : PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
			}
		}
		simple_heap_delete(rel, &tuple->t_self);
	}
	table_endscan(scan);
	return rows;
}

/* column_array is the rows' values of one column, in order, as text[]. */
static Datum
column_array(TakenRow *rows, int n, int column)
{
	Datum	   *values = palloc(sizeof(Datum) * n);
	bool	   *nulls = palloc(sizeof(bool) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};

	for (int i = 0; i < n; i++)
	{
		values[i] = rows[i].values[column];
		nulls[i] = rows[i].nulls[column];
	}
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
}

Datum
tashkent_take_writeset(PG_FUNCTION_ARGS)
{
	Relation	rel;
	TupleDesc	resultDesc;
	Datum		result[4] = {0};
	bool		resultNulls[4] = {true, true, true, true};
	TakenRow   *rows;
	int			n;
	int64		stale;

	if (get_call_result_type(fcinfo, NULL, &resultDesc) != TYPEFUNC_COMPOSITE || resultDesc->natts != 4)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("tashkent.take_writeset must return four text arrays")));

	/*
	 * A statement of its own, as the PL/pgSQL function's was: it sees what
	 * the calling statement wrote before this call, and a second call in
	 * the same statement sees the first one's deletes (review h41: with
	 * the caller's snapshot it failed with "tuple already updated by
	 * self"). SPI would take a new snapshot in READ COMMITTED; the
	 * caller's with a new command id sees the same here, since only this
	 * backend writes its temporary buffer and record_token is written
	 * once, by Install (review h42).
	 */
	CommandCounterIncrement();
	if (ActiveSnapshotSet())
		PushCopiedSnapshot(GetActiveSnapshot());
	else
		PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	rel = table_open(locked_buffer(), NoLock);
	if (PG_ARGISNULL(0) || rel->rd_rel->relowner != GetUserId() || !holds_record_token(PG_GETARG_TEXT_PP(0)))
		let_collector_decide(fcinfo);
	check_buffer_owner(rel);	/* check_collector refused it already */
	check_buffer_shape(rel);
	rows = take_rows(rel, &n, &stale);
	table_close(rel, NoLock);
	PopActiveSnapshot();
	if (stale > 0)
		ereport(WARNING,
				(errmsg("tashkent: discarded " INT64_FORMAT " writeset rows of an earlier transaction that committed without collecting them",
						stale)));
	if (n > 0)
	{
		qsort(rows, n, sizeof(TakenRow), taken_row_order);
		for (int column = 0; column < 4; column++)
		{
			result[column] = column_array(rows, n, column);
			resultNulls[column] = false;
		}
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(resultDesc), result, resultNulls)));
}
