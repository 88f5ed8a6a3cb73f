/*
 * writeset.c: a transaction's captured events (capture.c) collapsed into
 * its writeset and encoded as tashkent.certifier.v1.Writeset
 * (api/certifierpb/certifier.proto), the bytes the agent forwards to the
 * certifier (Tashkent §6.2: the writeset is what certification compares
 * and what every other replica applies).
 *
 * Collapse:
 *
 *   - One change per (table, key): the last one (an insert then updates is
 *     one upsert of the final row; anything then a delete is a delete),
 *     placed where the key first appeared. keeps_row only if every event of
 *     the key was a keeping update.
 *   - A TRUNCATE removes its table's earlier row changes and stays, in
 *     place, as a barrier: later row changes of the table follow it.
 *   - DDL stays in place too, and is a barrier for every table: a key's
 *     changes before and after it are not merged, since the rows before it
 *     are in the old shape of the table (the applier runs each side of it
 *     separately).
 *   - Unique index values (OP_UNIQUE_KEY): one per (index, values), after
 *     the row changes, sorted. A TRUNCATE does not remove them.
 *   - References (OP_REFERENCE): one per (parent, key), last, sorted, but
 *     for those the writeset writes itself as a row change or unique value
 *     (a write conflicts with everything a reference to it would).
 *   - Rows of a table without a primary key (OP_INSERT_ROW, OP_DELETE_ROW)
 *     have no key to collapse on: each stays, in place. Equal rows cannot
 *     be told apart, so a table's rows are a multiset, and what a
 *     transaction does to one is the rows it deleted of those that were
 *     there and the rows it inserted and left; the order among them does
 *     not matter (the applier deletes, then inserts). So a DELETE_ROW of a
 *     row the transaction inserted earlier (same text, no TRUNCATE nor DDL
 *     between) removes that insert and is dropped itself: an insert then
 *     updates then a delete leave nothing. TRUNCATE removes them as it
 *     removes row changes.
 *
 * "Last" is by the order the changes happened in: by command id, then
 * deletes before upserts (an UPDATE that swaps two keys fires delete 1,
 * upsert 2, delete 2, upsert 1 under one command id: both keys end up
 * upserted), then the order capture saw them. One case is not ordered by
 * command ids: a statement nested in a BEFORE trigger runs under a later
 * command id than the statement whose trigger runs it, but before that
 * statement's change (an "upsert by trigger" that deletes the old row
 * before the INSERT goes on). Where command ids and the firing order
 * disagree about a key, its final state is read from the table instead
 * (tk_capture_row_state): the row version one of its upserts wrote is
 * still current, or none is and the key was deleted. For rows of a table
 * without a primary key that case cannot change the multiset: at worst a
 * row deleted and an equal one inserted cancel out, which leaves the same
 * rows.
 *
 * A writeset can come out empty (a transaction that inserted rows into a
 * table without a primary key and deleted them again): commit.c commits
 * it without certification, as a transaction that wrote nothing.
 */
#include "tashkent.h"

#include "common/hashfn.h"
#include "utils/memutils.h"

/* Which set a (table, key) belongs to. */
typedef enum KeySet
{
	SET_ROW,					/* row changes (per DDL and TRUNCATE generation) */
	SET_UNIQUE,
	SET_REFERENCE,
	SET_WRITTEN,				/* row changes left in the writeset */
	SET_INSERTED				/* rows of a keyless table inserted (per DDL
								 * and TRUNCATE generation), by their text */
} KeySet;

typedef struct ChangeKey
{
	const char *table;
	const char *key;
	int			keylen;
	uint32		ddl_gen;		/* SET_ROW: DDL events before it */
	uint32		truncate_gen;	/* SET_ROW: TRUNCATEs of the table before it */
	KeySet		set;
} ChangeKey;

/*
 * A (table, key) of the writeset. Entries move as the table grows (and on
 * insertion: simplehash is open addressing), so what collapse knows of a
 * row change's key is kept in its slot.
 */
typedef struct KeyEntry
{
	ChangeKey	k;
	uint32		hash;
	char		status;
	int			slot;			/* SET_ROW: its change, in slots;
								 * SET_INSERTED: the last insert of the row
								 * not yet cancelled, or -1 */
} KeyEntry;

static uint32
hash_change_key(const ChangeKey *k)
{
	uint32		h = hash_bytes((const unsigned char *) k->table, strlen(k->table));

	h = hash_combine(h, hash_bytes((const unsigned char *) k->key, k->keylen));
	h = hash_combine(h, hash_uint32(k->ddl_gen));
	h = hash_combine(h, hash_uint32(k->truncate_gen));
	return hash_combine(h, hash_uint32((uint32) k->set));
}

static bool
change_keys_equal(const ChangeKey *a, const ChangeKey *b)
{
	return a->set == b->set && a->ddl_gen == b->ddl_gen
		&& a->truncate_gen == b->truncate_gen && a->keylen == b->keylen
		&& memcmp(a->key, b->key, a->keylen) == 0 && strcmp(a->table, b->table) == 0;
}

#define SH_PREFIX keytab
#define SH_ELEMENT_TYPE KeyEntry
#define SH_KEY_TYPE ChangeKey
#define SH_KEY k
#define SH_HASH_KEY(tb, key) hash_change_key(&(key))
#define SH_EQUAL(tb, a, b) change_keys_equal(&(a), &(b))
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) ((a)->hash)
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* A change of the writeset, in place: a row change, TRUNCATE or DDL. */
typedef struct Slot
{
	const TkEvent *event;		/* NULL: removed by a TRUNCATE */
	/* row changes: */
	bool		keeping;		/* every event a keeping update */
	bool		disordered;		/* firing order contradicts command ids */
	CommandId	cid;			/* the command id of the latest events */
	uint32		cid_max_seq;	/* the last fired of them */
	uint32		earlier_max_seq;	/* the last fired of earlier commands */
	int			first;			/* its events, in order: indexes in sorted */
	int			last;
	/* INSERT_ROW: the previous insert of an equal row, or -1 */
	int			prev_insert;
} Slot;

/* A table some TRUNCATE emptied, and how many times. */
typedef struct Truncated
{
	const char *table;
	uint32		gen;
} Truncated;

typedef struct Collapse
{
	const TkEvent **sorted;
	int			nsorted;
	int		   *next;			/* per sorted event: its key's next event */
	keytab_hash *keys;
	Slot	   *slots;
	int			nslots;
	const TkEvent **unique;
	int			nunique;
	const TkEvent **refs;
	int			nrefs;
	Truncated  *truncated;
	int			ntruncated;
	uint32		ddl_gen;
	bool		disordered;
} Collapse;

static bool
is_row_change(const TkEvent *e)
{
	return e->kind == TK_EVENT_UPSERT || e->kind == TK_EVENT_KEEPING_UPSERT
		|| e->kind == TK_EVENT_DELETE;
}

static bool
is_keyless_change(const TkEvent *e)
{
	return e->kind == TK_EVENT_INSERT_ROW || e->kind == TK_EVENT_DELETE_ROW;
}

static bool
is_delete(const TkEvent *e)
{
	return e->kind == TK_EVENT_DELETE || e->kind == TK_EVENT_DELETE_ROW;
}

/* The order changes happened in: command id, deletes first, firing order. */
static int
compare_order(const TkEvent *a, const TkEvent *b)
{
	int			ra = is_delete(a) ? 0 : 1;
	int			rb = is_delete(b) ? 0 : 1;

	if (a->cid != b->cid)
		return a->cid < b->cid ? -1 : 1;
	if (ra != rb)
		return ra - rb;
	return a->seq < b->seq ? -1 : (a->seq > b->seq ? 1 : 0);
}

static int
compare_order_qsort(const void *a, const void *b)
{
	return compare_order(*(const TkEvent *const *) a, *(const TkEvent *const *) b);
}

/* Bytewise, as Go's strings.Compare and bytes.Compare. */
static int
compare_table_key(const void *pa, const void *pb)
{
	const TkEvent *a = *(const TkEvent *const *) pa;
	const TkEvent *b = *(const TkEvent *const *) pb;
	int			c = strcmp(a->table, b->table);

	if (c != 0)
		return c;
	c = memcmp(a->key, b->key, Min(a->keylen, b->keylen));
	if (c != 0)
		return c;
	return a->keylen < b->keylen ? -1 : (a->keylen > b->keylen ? 1 : 0);
}

static ChangeKey
change_key(const TkEvent *e, KeySet set)
{
	ChangeKey	k;

	k.table = e->table;
	k.key = e->key;
	k.keylen = e->keylen;
	k.ddl_gen = 0;
	k.truncate_gen = 0;
	k.set = set;
	return k;
}

static uint32
truncate_gen(Collapse *c, const char *table)
{
	for (int i = 0; i < c->ntruncated; i++)
		if (strcmp(c->truncated[i].table, table) == 0)
			return c->truncated[i].gen;
	return 0;
}

static void
collapse_truncate(Collapse *c, const TkEvent *e)
{
	int			i;

	for (i = 0; i < c->ntruncated; i++)
		if (strcmp(c->truncated[i].table, e->table) == 0)
			break;
	if (i == c->ntruncated)
	{
		c->truncated[i].table = e->table;
		c->truncated[i].gen = 0;
		c->ntruncated++;
	}
	c->truncated[i].gen++;
	for (int s = 0; s < c->nslots; s++)
	{
		const TkEvent *prev = c->slots[s].event;

		if (prev != NULL && (is_row_change(prev) || is_keyless_change(prev))
			&& strcmp(prev->table, e->table) == 0)
			c->slots[s].event = NULL;
	}
	c->slots[c->nslots++].event = e;
}

static void
collapse_row_change(Collapse *c, int i)
{
	const TkEvent *e = c->sorted[i];
	ChangeKey	k = change_key(e, SET_ROW);
	KeyEntry   *entry;
	Slot	   *slot;
	bool		found;

	k.ddl_gen = c->ddl_gen;
	if (c->ntruncated > 0)
		k.truncate_gen = truncate_gen(c, e->table);
	entry = keytab_insert(c->keys, k, &found);
	if (!found)
	{
		entry->slot = c->nslots++;
		slot = &c->slots[entry->slot];
		slot->keeping = true;
		slot->cid = e->cid;
		slot->cid_max_seq = e->seq;
		slot->first = i;
	}
	else
	{
		slot = &c->slots[entry->slot];
		if (e->cid != slot->cid)
		{
			slot->earlier_max_seq = Max(slot->earlier_max_seq, slot->cid_max_seq);
			slot->cid = e->cid;
			slot->cid_max_seq = e->seq;
		}
		else
			slot->cid_max_seq = Max(slot->cid_max_seq, e->seq);
		/* an earlier command's change of the key fired after this one */
		if (e->seq < slot->earlier_max_seq)
			slot->disordered = c->disordered = true;
		c->next[slot->last] = i;
	}
	slot->last = i;
	c->next[i] = -1;
	slot->keeping = slot->keeping && e->kind == TK_EVENT_KEEPING_UPSERT;
	slot->event = e;
}

/* The key of an inserted row of a keyless table, in the current generations. */
static ChangeKey
inserted_key(Collapse *c, const TkEvent *e, const char *row, int rowlen)
{
	ChangeKey	k;

	k.table = e->table;
	k.key = row;
	k.keylen = rowlen;
	k.ddl_gen = c->ddl_gen;
	k.truncate_gen = c->ntruncated > 0 ? truncate_gen(c, e->table) : 0;
	k.set = SET_INSERTED;
	return k;
}

/*
 * collapse_keyless: a row change of a table without a primary key, kept in
 * place, but for a DELETE_ROW of a row inserted earlier: then both go.
 */
static void
collapse_keyless(Collapse *c, const TkEvent *e)
{
	KeyEntry   *entry;
	bool		found;

	if (e->kind == TK_EVENT_DELETE_ROW)
	{
		entry = keytab_lookup(c->keys, inserted_key(c, e, e->key, e->keylen));
		if (entry != NULL && entry->slot >= 0)
		{
			Slot	   *inserted = &c->slots[entry->slot];

			inserted->event = NULL;
			entry->slot = inserted->prev_insert;
			return;
		}
		c->slots[c->nslots++].event = e;
		return;
	}
	entry = keytab_insert(c->keys, inserted_key(c, e, e->row, e->rowlen), &found);
	c->slots[c->nslots].event = e;
	c->slots[c->nslots].prev_insert = found ? entry->slot : -1;
	entry->slot = c->nslots++;
}

static void
collapse_set_member(Collapse *c, const TkEvent *e, KeySet set)
{
	bool		found;

	(void) keytab_insert(c->keys, change_key(e, set), &found);
	if (found)
		return;
	if (set == SET_UNIQUE)
		c->unique[c->nunique++] = e;
	else
		c->refs[c->nrefs++] = e;
}

/*
 * settle_disordered: the final change of a key whose events' command ids
 * and firing order disagree: the upsert whose row version is current, or
 * else a delete. Where the table cannot tell (rewritten since), the order
 * by command id stands.
 */
static void
settle_disordered(Collapse *c, Slot *slot)
{
	const TkEvent *current = NULL;
	const TkEvent *delete = NULL;

	for (int i = slot->first; i >= 0; i = c->next[i])
	{
		const TkEvent *e = c->sorted[i];

		if (e->kind == TK_EVENT_DELETE)
		{
			delete = e;
			continue;
		}
		switch (tk_capture_row_state(e))
		{
			case TK_ROW_UNKNOWN:
				return;
			case TK_ROW_CURRENT:
				current = e;
				break;
			case TK_ROW_GONE:
				break;
		}
	}
	if (current != NULL)
		slot->event = current;
	else if (delete != NULL)
		slot->event = delete;
}

static void
collapse(Collapse *c, List *events)
{
	ListCell   *lc;
	int			i = 0;
	bool		ordered = true;
	int			nunique = 0;
	int			nrefs = 0;
	int			ntruncates = 0;

	c->nsorted = list_length(events);
	c->sorted = palloc(sizeof(TkEvent *) * c->nsorted);
	foreach(lc, events)
	{
		const TkEvent *e = lfirst(lc);

		c->sorted[i] = e;
		if (i > 0 && compare_order(c->sorted[i - 1], e) > 0)
			ordered = false;
		nunique += e->kind == TK_EVENT_UNIQUE_KEY;
		nrefs += e->kind == TK_EVENT_REFERENCE;
		ntruncates += e->kind == TK_EVENT_TRUNCATE;
		i++;
	}
	if (!ordered)
		qsort(c->sorted, c->nsorted, sizeof(TkEvent *), compare_order_qsort);

	c->next = palloc(sizeof(int) * c->nsorted);
	c->keys = keytab_create(CurrentMemoryContext, c->nsorted, NULL);
	c->slots = palloc0(sizeof(Slot) * c->nsorted);
	c->unique = palloc(sizeof(TkEvent *) * Max(nunique, 1));
	c->refs = palloc(sizeof(TkEvent *) * Max(nrefs, 1));
	c->truncated = palloc(sizeof(Truncated) * Max(ntruncates, 1));

	for (i = 0; i < c->nsorted; i++)
	{
		const TkEvent *e = c->sorted[i];

		switch (e->kind)
		{
			case TK_EVENT_UPSERT:
			case TK_EVENT_KEEPING_UPSERT:
			case TK_EVENT_DELETE:
				collapse_row_change(c, i);
				break;
			case TK_EVENT_TRUNCATE:
				collapse_truncate(c, e);
				break;
			case TK_EVENT_DDL:
				c->ddl_gen++;
				c->slots[c->nslots++].event = e;
				break;
			case TK_EVENT_UNIQUE_KEY:
				collapse_set_member(c, e, SET_UNIQUE);
				break;
			case TK_EVENT_REFERENCE:
				collapse_set_member(c, e, SET_REFERENCE);
				break;
			case TK_EVENT_INSERT_ROW:
			case TK_EVENT_DELETE_ROW:
				collapse_keyless(c, e);
				break;
		}
	}

	if (c->disordered)
		for (int s = 0; s < c->nslots; s++)
			if (c->slots[s].event != NULL && c->slots[s].disordered)
				settle_disordered(c, &c->slots[s]);
}

/* The references the writeset does not write itself, sorted. */
static void
drop_written_references(Collapse *c)
{
	int			kept = 0;

	if (c->nrefs == 0)
		return;
	for (int s = 0; s < c->nslots; s++)
	{
		bool		found;

		if (c->slots[s].event != NULL && is_row_change(c->slots[s].event))
			(void) keytab_insert(c->keys, change_key(c->slots[s].event, SET_WRITTEN), &found);
	}
	for (int r = 0; r < c->nrefs; r++)
	{
		const TkEvent *e = c->refs[r];

		if (keytab_lookup(c->keys, change_key(e, SET_WRITTEN)) == NULL
			&& keytab_lookup(c->keys, change_key(e, SET_UNIQUE)) == NULL)
			c->refs[kept++] = e;
	}
	c->nrefs = kept;
	qsort(c->refs, c->nrefs, sizeof(TkEvent *), compare_table_key);
}

/* ---- protobuf wire format ---- */

static int
varint_size(uint64 v)
{
	int			n = 1;

	while (v >= 0x80)
	{
		v >>= 7;
		n++;
	}
	return n;
}

static void
put_varint(StringInfo out, uint64 v)
{
	while (v >= 0x80)
	{
		appendStringInfoCharMacro(out, (char) ((v & 0x7f) | 0x80));
		v >>= 7;
	}
	appendStringInfoCharMacro(out, (char) v);
}

/* A length-delimited field: tag (field << 3 | 2), length, bytes. */
static void
put_bytes(StringInfo out, int field, const char *data, int len)
{
	put_varint(out, (uint64) (field << 3 | 2));
	put_varint(out, (uint64) len);
	appendBinaryStringInfo(out, data, len);
}

static int
bytes_field_size(int len)
{
	return 1 + varint_size((uint64) len) + len;
}

/*
 * put_change: Writeset.changes (field 1), a Change: table = 1, op = 2,
 * key = 3, row = 4, keeps_row = 5, role = 6. Empty fields are left out,
 * as proto3 encoders leave out defaults. A DDL change's key is the
 * search_path the statement ran under, its role the role that ran it
 * (tk_capture_ddl); a DELETE_ROW's key is the old row.
 */
static void
put_change(StringInfo out, const TkEvent *e, int op, bool keeps_row)
{
	int			tablelen = e->table ? strlen(e->table) : 0;
	int			keylen = op == TK_OP_TRUNCATE ? 0 : e->keylen;	/* DDL: its search_path */
	int			rowlen = op == TK_OP_UPSERT || op == TK_OP_DDL || op == TK_OP_INSERT_ROW ? e->rowlen : 0;
	int			rolelen = op == TK_OP_DDL && e->role ? strlen(e->role) : 0;
	int			size = 1 + varint_size(op);

	if (tablelen > 0)
		size += bytes_field_size(tablelen);
	if (keylen > 0)
		size += bytes_field_size(keylen);
	if (rowlen > 0)
		size += bytes_field_size(rowlen);
	if (keeps_row)
		size += 2;
	if (rolelen > 0)
		size += bytes_field_size(rolelen);

	put_varint(out, 1 << 3 | 2);
	put_varint(out, (uint64) size);
	if (tablelen > 0)
		put_bytes(out, 1, e->table, tablelen);
	put_varint(out, 2 << 3 | 0);
	put_varint(out, (uint64) op);
	if (keylen > 0)
		put_bytes(out, 3, e->key, keylen);
	if (rowlen > 0)
		put_bytes(out, 4, e->row, rowlen);
	if (keeps_row)
	{
		put_varint(out, 5 << 3 | 0);
		put_varint(out, 1);
	}
	if (rolelen > 0)
		put_bytes(out, 6, e->role, rolelen);
}

static int
op_of(const TkEvent *e)
{
	switch (e->kind)
	{
		case TK_EVENT_UPSERT:
		case TK_EVENT_KEEPING_UPSERT:
			return TK_OP_UPSERT;
		case TK_EVENT_DELETE:
			return TK_OP_DELETE;
		case TK_EVENT_TRUNCATE:
			return TK_OP_TRUNCATE;
		case TK_EVENT_DDL:
			return TK_OP_DDL;
		case TK_EVENT_UNIQUE_KEY:
			return TK_OP_UNIQUE_KEY;
		case TK_EVENT_REFERENCE:
			return TK_OP_REFERENCE;
		case TK_EVENT_INSERT_ROW:
			return TK_OP_INSERT_ROW;
		case TK_EVENT_DELETE_ROW:
			return TK_OP_DELETE_ROW;
	}
	elog(ERROR, "unknown capture event kind %d", (int) e->kind);
	return 0;
}

/*
 * tk_writeset_encode: the writeset of events (tk_capture_events), encoded,
 * appended to out. Called at PRE_COMMIT, inside the transaction: settling
 * a disordered key reads its table.
 */
void
tk_writeset_encode(List *events, StringInfo out)
{
	MemoryContext work = AllocSetContextCreate(CurrentMemoryContext, "tashkent writeset",
											   ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(work);
	Collapse	c;

	memset(&c, 0, sizeof(c));
	if (events != NIL)
	{
		collapse(&c, events);
		qsort(c.unique, c.nunique, sizeof(TkEvent *), compare_table_key);
		drop_written_references(&c);
	}
	MemoryContextSwitchTo(old);

	for (int s = 0; s < c.nslots; s++)
	{
		const TkEvent *e = c.slots[s].event;

		if (e == NULL)
			continue;
		put_change(out, e, op_of(e), e->kind == TK_EVENT_KEEPING_UPSERT && c.slots[s].keeping);
	}
	for (int u = 0; u < c.nunique; u++)
		put_change(out, c.unique[u], TK_OP_UNIQUE_KEY, false);
	for (int r = 0; r < c.nrefs; r++)
		put_change(out, c.refs[r], TK_OP_REFERENCE, false);
	MemoryContextDelete(work);
}

/*
 * tk_writeset_put_event: one event as a change of its own, uncollapsed:
 * how a streamed transaction (stream.c) writes its changes.
 */
void
tk_writeset_put_event(StringInfo out, const TkEvent *event)
{
	put_change(out, event, op_of(event), event->kind == TK_EVENT_KEEPING_UPSERT);
}

/*
 * tk_writeset_put_table: a change that names a whole table (TK_OP_TABLE_WRITE,
 * TK_OP_TRUNCATE), key and row empty: what a streamed transaction is
 * certified on.
 */
void
tk_writeset_put_table(StringInfo out, const char *table, int op)
{
	TkEvent		e;

	memset(&e, 0, sizeof(e));
	e.table = table;
	put_change(out, &e, op, false);
}
