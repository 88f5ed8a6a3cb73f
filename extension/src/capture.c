/*
 * capture.c: PLACEHOLDER until the row trigger lands.
 *
 * Keeps the DDL events that ddl.c captures, so that a transaction with DDL
 * is certified and its writeset (writeset.c's placeholder) carries them:
 * the tests of DDL capture read them from the agent's side. Row capture is
 * not here; the real capture.c replaces this file whole.
 */
#include "tashkent.h"

#include "fmgr.h"
#include "commands/trigger.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(tashkent_capture);

/* A DDL event and the subtransaction that captured it. */
typedef struct PendingDDL
{
	TkEvent		event;
	SubTransactionId subid;
} PendingDDL;

static List *pending = NIL;		/* of PendingDDL, in TopTransactionContext */
static uint64 ddl_label = 0;

Datum
tashkent_capture(PG_FUNCTION_ARGS)
{
	ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg("tashkent capture is not built yet")));
	PG_RETURN_NULL();
}

bool
tk_capture_pending(void)
{
	return pending != NIL;
}

bool
tk_capture_has_ddl(void)
{
	return pending != NIL;
}

uint64
tk_capture_ddl_label(void)
{
	return ddl_label;
}

void
tk_capture_ddl(const char *sql, int len, uint64 label)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	PendingDDL *p = palloc0(sizeof(PendingDDL));

	p->event.kind = TK_EVENT_DDL;
	p->event.cid = GetCurrentCommandId(true);
	p->event.row = pnstrdup(sql, len);
	p->event.rowlen = len;
	p->subid = GetCurrentSubTransactionId();
	pending = lappend(pending, p);
	MemoryContextSwitchTo(old);
	if (ddl_label == 0 || label < ddl_label)
		ddl_label = label;
}

List *
tk_capture_events(void)
{
	List	   *events = NIL;
	ListCell   *lc;

	foreach(lc, pending)
		events = lappend(events, &((PendingDDL *) lfirst(lc))->event);
	return events;
}

void
tk_capture_xact_end(void)
{
	pending = NIL;
	ddl_label = 0;
}

/* DDL that ROLLBACK TO SAVEPOINT undid is not replicated. */
void
tk_capture_subxact(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid)
{
	ListCell   *lc;

	foreach(lc, pending)
	{
		PendingDDL *p = lfirst(lc);

		if (p->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			p->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
			pending = foreach_delete_current(pending, lc);
	}
}
