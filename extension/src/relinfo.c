/*
 * relinfo.c: what capture needs to know of a table, cached per relation.
 *
 * For every row it captures, capture.c needs the table's quoted name, how
 * each column prints, the primary key, the unique indexes it certifies
 * (OP_UNIQUE_KEY), the foreign keys whose parent rows it names
 * (OP_REFERENCE), and whether an UPDATE that keeps the primary key keeps
 * the row (Change.keeps_row). Working that out takes catalog lookups; a
 * TPC-B transaction writes four rows, so it is done once per relation and
 * kept in a hash keyed by relation OID, in the backend's memory.
 *
 * An entry is marked invalid by PostgreSQL's invalidation messages: a
 * relcache invalidation of the table itself (ALTER TABLE, CREATE INDEX, a
 * foreign key added on either side: PostgreSQL then changes the table's
 * triggers) or of a relation it depends on (one of its indexes or a parent
 * table, which a rename changes without touching the table), and any
 * change to a schema (ALTER SCHEMA RENAME changes the quoted names of all
 * its tables). An invalid entry is rebuilt at its next use; it is freed
 * only then, so that a capture call holding it is never left with freed
 * memory.
 *
 * The names follow the certifier's protocol (api/certifierpb): a table is
 * format('%I.%I', schema, table), a unique index value "<table>#<index>"
 * with the index name quoted by %I, and a foreign key names the parent row
 * exactly as capture of the parent names it, so that the certifier sees
 * the reference and the parent's own write as the same key.
 */
#include "tashkent.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/partition.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

typedef struct RelInfoEntry
{
	Oid			relid;
	TkRelInfo  *info;
} RelInfoEntry;

static HTAB *relinfos = NULL;

/* The entry used last: most statements write one table many times. */
static TkRelInfo *last_used = NULL;

/* Counts invalidations, so that a build that saw one is not trusted. */
static uint64 invalidations = 0;

static void
invalidate_rel(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS scan;
	RelInfoEntry *entry;

	invalidations++;
	hash_seq_init(&scan, relinfos);
	while ((entry = hash_seq_search(&scan)) != NULL)
	{
		TkRelInfo  *info = entry->info;

		if (info == NULL || !info->valid)
			continue;
		if (!OidIsValid(relid))
		{
			info->valid = false;
			continue;
		}
		for (int i = 0; i < info->ndeps; i++)
		{
			if (info->deps[i] == relid)
			{
				info->valid = false;
				break;
			}
		}
	}
}

static void
invalidate_all(Datum arg, int cacheid, uint32 hashvalue)
{
	invalidate_rel(arg, InvalidOid);
}

static void
init_relinfos(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(RelInfoEntry);
	ctl.hcxt = TopMemoryContext;
	relinfos = hash_create("tashkent relinfo", 64, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(invalidate_rel, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, invalidate_all, (Datum) 0);
}

static void
free_relinfo(TkRelInfo *info)
{
	for (int i = 0; i < info->nfkeys; i++)
		if (info->fkeys[i].plan != NULL)
			SPI_freeplan((SPIPlanPtr) info->fkeys[i].plan);
	MemoryContextDelete(info->context);
}

/*
 * json_kind: how to_json writes a value of the type: numbers bare, bool
 * as true/false, json as it is, anything else as a string. A domain
 * writes as its base type.
 */
static TkJsonKind
json_kind(Oid type)
{
	switch (getBaseType(type))
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case OIDOID:
		case FLOAT4OID:
		case FLOAT8OID:
		case NUMERICOID:
			return TK_JSON_NUMBER;
		case BOOLOID:
			return TK_JSON_BOOL;
		case JSONOID:
		case JSONBOID:
			return TK_JSON_RAW;
		default:
			return TK_JSON_STRING;
	}
}

static void
build_columns(TkRelInfo *info, TupleDesc desc)
{
	info->natts = desc->natts;
	info->columns = palloc0(sizeof(TkColumn) * Max(desc->natts, 1));
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		TkColumn   *col = &info->columns[i];
		Oid			func;
		bool		varlena;

		col->dropped = att->attisdropped;
		if (col->dropped)
			continue;
		getTypeOutputInfo(att->atttypid, &func, &varlena);
		/* in the entry's context: output functions cache in fn_extra */
		fmgr_info_cxt(func, &col->output, info->context);
		col->json = json_kind(att->atttypid);
	}
}

static void
fill_key(TkKey *key, Form_pg_index index, const char *label, int namelen)
{
	key->index = index->indexrelid;
	key->label = label;
	key->namelen = namelen;
	key->nulls_distinct = !index->indnullsnotdistinct;
	key->ncols = index->indnkeyatts;
	for (int i = 0; i < key->ncols; i++)
		key->attnums[i] = index->indkey.values[i];
}

/*
 * build_keys: the primary key, and the unique indexes certified as
 * OP_UNIQUE_KEY: valid, neither partial nor on expressions, as
 * ensure_triggers selected them before. Their INCLUDE columns are no part
 * of the key.
 */
static void
build_keys(TkRelInfo *info, Relation rel, List **deps)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	info->unique = palloc0(sizeof(TkKey) * Max(list_length(indexes), 1));
	foreach(lc, indexes)
	{
		Oid			indexoid = lfirst_oid(lc);
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(indexoid));
		Form_pg_index index;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for index %u", indexoid);
		index = (Form_pg_index) GETSTRUCT(tup);
		*deps = lappend_oid(*deps, indexoid);
		/* not RelationGetPrimaryKeyIndex: it leaves out deferrable keys */
		if (index->indisprimary)
		{
			info->has_pk = true;
			fill_key(&info->pk, index, info->name, strlen(info->name));
		}
		else if (index->indisunique && index->indisvalid
				 && heap_attisnull(tup, Anum_pg_index_indpred, NULL)
				 && heap_attisnull(tup, Anum_pg_index_indexprs, NULL))
		{
			char	   *label = psprintf("%s#%s", info->name,
										 quote_identifier(get_rel_name(indexoid)));

			fill_key(&info->unique[info->nunique++], index, label, strlen(info->name));
		}
		ReleaseSysCache(tup);
	}
	list_free(indexes);
}

/*
 * referenced_through_other_index: whether a foreign key references the
 * table through a unique index other than its primary key. Then an UPDATE
 * that keeps the primary key may still change a referenced value, so it
 * is no keeping update. The referencing side's constraints are found
 * through the action triggers PostgreSQL puts on the referenced table (so a
 * foreign key added or dropped invalidates this table's entry too).
 */
static bool
referenced_through_other_index(Relation rel, Oid pk)
{
	TriggerDesc *triggers = rel->trigdesc;

	if (triggers == NULL)
		return false;
	for (int i = 0; i < triggers->numtriggers; i++)
	{
		Trigger    *trigger = &triggers->triggers[i];
		HeapTuple	tup;
		bool		other;

		if (!OidIsValid(trigger->tgconstraint)
			|| RI_FKey_trigger_type(trigger->tgfoid) != RI_TRIGGER_PK)
			continue;
		tup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(trigger->tgconstraint));
		if (!HeapTupleIsValid(tup))
			continue;
		other = ((Form_pg_constraint) GETSTRUCT(tup))->conindid != pk;
		ReleaseSysCache(tup);
		if (other)
			return true;
	}
	return false;
}

/*
 * prints_alike: whether a referencing column's values print exactly as
 * the parent key column's equal values do, so that the referencing row's
 * own values name the parent's key (tashkent.reference_prints_alike, the
 * PL/pgSQL capture's rule): the same type and typmod among types whose
 * equality is identity of the printed value (numeric and char only with a
 * typmod, which fixes scale and padding), integers of any width, text and
 * varchar, under deterministic collations. Anything else (a domain, float
 * -0 = 0, timestamp against timestamptz, numeric 1.5 = 1.50) looks the
 * parent row up.
 */
static bool
prints_alike(Oid ctype, int32 cmod, Oid ccoll, Oid ptype, int32 pmod, Oid pcoll)
{
	bool		alike = false;

	if (ctype == ptype && cmod == pmod)
	{
		switch (ctype)
		{
			case INT2OID:
			case INT4OID:
			case INT8OID:
			case TEXTOID:
			case VARCHAROID:
			case UUIDOID:
			case BOOLOID:
			case DATEOID:
			case TIMESTAMPOID:
			case TIMESTAMPTZOID:
			case TIMEOID:
			case BYTEAOID:
			case OIDOID:
				alike = true;
				break;
			case NUMERICOID:
			case BPCHAROID:
				alike = cmod != -1;
				break;
			default:
				break;
		}
	}
	if ((ctype == INT2OID || ctype == INT4OID || ctype == INT8OID)
		&& (ptype == INT2OID || ptype == INT4OID || ptype == INT8OID))
		alike = true;
	if ((ctype == TEXTOID || ctype == VARCHAROID)
		&& (ptype == TEXTOID || ptype == VARCHAROID))
		alike = true;
	if (alike && OidIsValid(ccoll) && !get_collation_isdeterministic(ccoll))
		alike = false;
	if (alike && OidIsValid(pcoll) && !get_collation_isdeterministic(pcoll))
		alike = false;
	return alike;
}

static char *
qualified_rel_name(Oid relid)
{
	char	   *name = get_rel_name(relid);

	if (name == NULL)
		elog(ERROR, "cache lookup failed for relation %u", relid);
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)), name);
}

/*
 * lookup_query: the parent lookup of a foreign key whose values do not
 * print as the parent's (or whose parent is partitioned, where the
 * partition that holds the row names it): the referenced columns of the
 * parent row the values equal, by the foreign key's own equality
 * operators, and the partition it is in. Every name is qualified: it runs
 * under the session's search_path.
 */
static char *
lookup_query(TkForeignKey *fk, const AttrNumber *pattnums, const Oid *ops,
			 Oid *pcolls, char relkind)
{
	StringInfoData q;

	initStringInfo(&q);
	appendStringInfoString(&q, "SELECT p.tableoid");
	for (int i = 0; i < fk->ncols; i++)
		appendStringInfo(&q, ", p.%s",
						 quote_identifier(get_attname(fk->parent, pattnums[i], false)));
	appendStringInfo(&q, " FROM %s%s AS p WHERE ",
					 relkind == RELKIND_PARTITIONED_TABLE ? "" : "ONLY ",
					 qualified_rel_name(fk->parent));
	for (int i = 0; i < fk->ncols; i++)
	{
		HeapTuple	tup = SearchSysCache1(OPEROID, ObjectIdGetDatum(ops[i]));
		Form_pg_operator op;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for operator %u", ops[i]);
		op = (Form_pg_operator) GETSTRUCT(tup);
		appendStringInfo(&q, "%sp.%s OPERATOR(%s.%s) ($%d::%s",
						 i > 0 ? " AND " : "",
						 quote_identifier(get_attname(fk->parent, pattnums[i], false)),
						 quote_identifier(get_namespace_name(op->oprnamespace)),
						 NameStr(op->oprname), i + 1,
						 format_type_be_qualified(op->oprright));
		if (OidIsValid(pcolls[i]) && type_is_collatable(op->oprright))
		{
			HeapTuple	ctup = SearchSysCache1(COLLOID, ObjectIdGetDatum(pcolls[i]));
			Form_pg_collation coll;

			if (!HeapTupleIsValid(ctup))
				elog(ERROR, "cache lookup failed for collation %u", pcolls[i]);
			coll = (Form_pg_collation) GETSTRUCT(ctup);
			appendStringInfo(&q, " COLLATE %s",
							 quote_qualified_identifier(get_namespace_name(coll->collnamespace),
														NameStr(coll->collname)));
			ReleaseSysCache(ctup);
		}
		appendStringInfoChar(&q, ')');
		ReleaseSysCache(tup);
	}
	appendStringInfoString(&q, " LIMIT 1");
	return q.data;
}

/*
 * build_fkey: one foreign key of the table. Its columns are listed in the
 * order of the referenced index's key, the order the parent's key prints
 * in.
 */
static void
build_fkey(TkRelInfo *info, Relation rel, ForeignKeyCacheInfo *fkinfo,
		   Oid conindid, List **deps)
{
	TkForeignKey *fk = &info->fkeys[info->nfkeys];
	TupleDesc	desc = RelationGetDescr(rel);
	HeapTuple	tup;
	Form_pg_index index;
	char		relkind = get_rel_relkind(fkinfo->confrelid);
	AttrNumber	pattnums[INDEX_MAX_KEYS];
	Oid			ops[INDEX_MAX_KEYS];
	Oid			pcolls[INDEX_MAX_KEYS];
	bool		alike = relkind != RELKIND_PARTITIONED_TABLE;

	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(conindid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for index %u", conindid);
	index = (Form_pg_index) GETSTRUCT(tup);
	fk->parent = fkinfo->confrelid;
	fk->index = conindid;
	fk->index_is_pk = index->indisprimary;
	fk->ncols = index->indnkeyatts;
	for (int i = 0; i < fk->ncols; i++)
	{
		int			j;
		Oid			ptype;
		int32		pmod;
		Form_pg_attribute catt;

		pattnums[i] = index->indkey.values[i];
		for (j = 0; j < fkinfo->nkeys; j++)
			if (fkinfo->confkey[j] == pattnums[i])
				break;
		if (j == fkinfo->nkeys)
			elog(ERROR, "foreign key %u does not cover its index's column %d",
				 fkinfo->conoid, pattnums[i]);
		fk->attnums[i] = fkinfo->conkey[j];
		ops[i] = fkinfo->conpfeqop[j];
		catt = TupleDescAttr(desc, fk->attnums[i] - 1);
		fk->argtypes[i] = catt->atttypid;
		get_atttypetypmodcoll(fk->parent, pattnums[i], &ptype, &pmod, &pcolls[i]);
		if (!prints_alike(catt->atttypid, catt->atttypmod, catt->attcollation,
						  ptype, pmod, pcolls[i]))
			alike = false;
	}
	ReleaseSysCache(tup);

	if (alike)
	{
		char	   *parent = qualified_rel_name(fk->parent);

		fk->label = fk->index_is_pk ? parent :
			psprintf("%s#%s", parent, quote_identifier(get_rel_name(conindid)));
		fk->label_namelen = strlen(parent);
	}
	else
	{
		HeapTuple	reltup = SearchSysCache1(RELOID, ObjectIdGetDatum(fk->parent));

		if (!HeapTupleIsValid(reltup))
			elog(ERROR, "cache lookup failed for relation %u", fk->parent);
		fk->parent_owner = ((Form_pg_class) GETSTRUCT(reltup))->relowner;
		ReleaseSysCache(reltup);
		fk->query = lookup_query(fk, pattnums, ops, pcolls, relkind);
	}
	*deps = lappend_oid(*deps, fk->parent);
	*deps = lappend_oid(*deps, conindid);
	info->nfkeys++;
}

/*
 * build_fkeys: the table's foreign keys, but for the copies PostgreSQL
 * makes of one that references a partitioned table, one per partition of
 * it (same referencing table, a parent constraint): the top one covers
 * them, since its lookup finds the partition.
 */
static void
build_fkeys(TkRelInfo *info, Relation rel, List **deps)
{
	List	   *fkeys = RelationGetFKeyList(rel);
	ListCell   *lc;

	info->fkeys = palloc0(sizeof(TkForeignKey) * Max(list_length(fkeys), 1));
	foreach(lc, fkeys)
	{
		ForeignKeyCacheInfo *fkinfo = lfirst_node(ForeignKeyCacheInfo, lc);
		HeapTuple	tup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(fkinfo->conoid));
		Form_pg_constraint con;
		Oid			conindid;
		Oid			parentid;
		bool		copy = false;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for constraint %u", fkinfo->conoid);
		con = (Form_pg_constraint) GETSTRUCT(tup);
		conindid = con->conindid;
		parentid = con->conparentid;
		ReleaseSysCache(tup);
		if (OidIsValid(parentid))
		{
			HeapTuple	ptup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(parentid));

			if (HeapTupleIsValid(ptup))
			{
				copy = ((Form_pg_constraint) GETSTRUCT(ptup))->conrelid == fkinfo->conrelid;
				ReleaseSysCache(ptup);
			}
		}
		if (!copy)
			build_fkey(info, rel, fkinfo, conindid, deps);
	}
}

static TkRelInfo *
build_relinfo(Relation rel)
{
	MemoryContext context = AllocSetContextCreate(CacheMemoryContext, "tashkent relinfo",
												  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(context);
	TkRelInfo  *info = palloc0(sizeof(TkRelInfo));
	List	   *deps = list_make1_oid(RelationGetRelid(rel));
	uint64		seen = invalidations;
	int			i = 0;
	ListCell   *lc;

	info->relid = RelationGetRelid(rel);
	info->context = context;
	info->name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											RelationGetRelationName(rel));
	info->namelen = strlen(info->name);
	build_columns(info, RelationGetDescr(rel));
	build_keys(info, rel, &deps);
	build_fkeys(info, rel, &deps);
	info->keeping = !referenced_through_other_index(rel, info->pk.index);

	info->ndeps = list_length(deps);
	info->deps = palloc(sizeof(Oid) * info->ndeps);
	foreach(lc, deps)
		info->deps[i++] = lfirst_oid(lc);
	/* an invalidation seen while building: use it once, build it again */
	info->valid = invalidations == seen;
	MemoryContextSwitchTo(old);
	return info;
}

/*
 * tk_relinfo_get: the entry of rel, built if missing or invalid. rel is
 * open (capture runs in its trigger).
 */
TkRelInfo *
tk_relinfo_get(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	RelInfoEntry *entry;
	bool		found;

	if (last_used != NULL && last_used->relid == relid && last_used->valid
		&& last_used->natts == RelationGetDescr(rel)->natts)
		return last_used;
	if (relinfos == NULL)
		init_relinfos();
	entry = hash_search(relinfos, &relid, HASH_ENTER, &found);
	if (!found)
		entry->info = NULL;
	/* natts too: the arrays capture indexes by attribute number */
	if (entry->info == NULL || !entry->info->valid
		|| entry->info->natts != RelationGetDescr(rel)->natts)
	{
		TkRelInfo  *old = entry->info;

		entry->info = NULL;
		if (old != NULL)
		{
			if (old == last_used)
				last_used = NULL;
			free_relinfo(old);
		}
		entry->info = build_relinfo(rel);
	}
	last_used = entry->info;
	return entry->info;
}

/* tk_relinfo_get_oid: tk_relinfo_get for a relation not yet open here. */
TkRelInfo *
tk_relinfo_get_oid(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	TkRelInfo  *info = tk_relinfo_get(rel);

	table_close(rel, NoLock);
	return info;
}

/*
 * tk_relinfo_index_key: the key of info's table that a foreign key through
 * index names: its primary key (is_pk), or the certified unique index that
 * is index or, in a partition, descends from it. NULL if there is none.
 */
const TkKey *
tk_relinfo_index_key(TkRelInfo *info, Oid index, bool is_pk)
{
	if (is_pk)
		return info->has_pk ? &info->pk : NULL;
	for (int i = 0; i < info->nunique; i++)
	{
		if (info->unique[i].index == index)
			return &info->unique[i];
		if (list_member_oid(get_partition_ancestors(info->unique[i].index), index))
			return &info->unique[i];
	}
	return NULL;
}

/*
 * tk_relinfo_find_parent: the parent row that values (a row of fk's table,
 * deformed) reference through fk, looked up with the foreign key's own
 * equality, as PostgreSQL's check found it: its relation (the partition,
 * for a partitioned parent) and the referenced columns' values, copied
 * into the current memory context. False if there is none (a deferred
 * foreign key whose parent is inserted later: then the writeset writes the
 * parent, or the commit fails).
 *
 * It runs as the parent's owner, without row-level security, as the
 * foreign key's own check does: the writer need not be able to read the
 * parent, and no policy (user code) runs. It runs under the session's
 * print settings, not capture's pinned ones, for the same reason: a
 * timestamp compared with a timestamptz is taken in the session's time
 * zone, as the check took it.
 */
bool
tk_relinfo_find_parent(TkForeignKey *fk, const Datum *values, Oid *partition,
					   Datum *key)
{
	MemoryContext caller = CurrentMemoryContext;
	Datum		args[INDEX_MAX_KEYS];
	Oid			save_userid;
	int			save_sec_context;
	int			rc;
	bool		found;

	for (int i = 0; i < fk->ncols; i++)
		args[i] = values[fk->attnums[i] - 1];
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (fk->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(fk->query, fk->ncols, fk->argtypes);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s", fk->query,
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		fk->plan = plan;
	}
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(fk->parent_owner,
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_NOFORCE_RLS);
	rc = SPI_execute_plan((SPIPlanPtr) fk->plan, args, NULL, false, 1);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s", fk->query,
			 SPI_result_code_string(rc));
	found = SPI_processed > 0;
	if (found)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(caller);
		bool		isnull;

		*partition = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
		for (int i = 0; i < fk->ncols; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i + 1);
			Datum		v = SPI_getbinval(tup, desc, i + 2, &isnull);

			key[i] = isnull ? (Datum) 0 : datumCopy(v, att->attbyval, att->attlen);
		}
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	return found;
}
