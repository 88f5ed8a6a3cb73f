/*
 * writeset.c: PLACEHOLDER until the row trigger lands.
 *
 * Encodes the DDL events of the placeholder capture as a
 * tashkent.certifier.v1.Writeset holding one Change {op: OP_DDL, row: the
 * statement's text} per event, in order. The real writeset.c replaces
 * this file whole.
 */
#include "tashkent.h"

/* Protocol buffer wire types and the fields used here (certifier.proto). */
#define WIRE_VARINT 0
#define WIRE_BYTES 2
#define WRITESET_CHANGES 1
#define CHANGE_OP 2
#define CHANGE_ROW 4
#define OP_DDL 4

static void
put_varint(StringInfo out, uint64 v)
{
	while (v >= 0x80)
	{
		appendStringInfoChar(out, (char) ((v & 0x7f) | 0x80));
		v >>= 7;
	}
	appendStringInfoChar(out, (char) v);
}

static void
put_tag(StringInfo out, int field, int wiretype)
{
	put_varint(out, ((uint64) field << 3) | wiretype);
}

void
tk_writeset_encode(List *events, StringInfo out)
{
	ListCell   *lc;

	foreach(lc, events)
	{
		TkEvent    *e = lfirst(lc);
		StringInfoData change;

		if (e->kind != TK_EVENT_DDL)
			continue;
		initStringInfo(&change);
		put_tag(&change, CHANGE_OP, WIRE_VARINT);
		put_varint(&change, OP_DDL);
		put_tag(&change, CHANGE_ROW, WIRE_BYTES);
		put_varint(&change, e->rowlen);
		appendBinaryStringInfo(&change, e->row, e->rowlen);
		put_tag(out, WRITESET_CHANGES, WIRE_BYTES);
		put_varint(out, change.len);
		appendBinaryStringInfo(out, change.data, change.len);
		pfree(change.data);
	}
}
