/* capture.c: placeholder until the row trigger lands. */
#include "tashkent.h"

#include "fmgr.h"
#include "commands/trigger.h"

PG_FUNCTION_INFO_V1(tashkent_capture);

static List *events = NIL;
static bool has_ddl = false;
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
	return events != NIL;
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

void
tk_capture_ddl(const char *sql, int len, uint64 label)
{
}

List *
tk_capture_events(void)
{
	return events;
}

void
tk_capture_xact_end(void)
{
	events = NIL;
	has_ddl = false;
	ddl_label = 0;
}

void
tk_capture_subxact(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid)
{
}
