/*
 * protect.c: replication's own objects cannot be switched off by DDL.
 *
 * A table's writes reach the other replicas only through tashkent's
 * capture triggers (named tashkent_*), and DDL only while tashkent's
 * event triggers run. Disabling, dropping or renaming them, or enabling
 * them in another mode (ENABLE REPLICA fires only in sessions that are
 * replicas, ENABLE ALWAYS also in the applier), would leave writes on one
 * replica with no error; dropping the extension or its schema would stop
 * replication of the database altogether. These statements are refused
 * with 42501, superusers included, unless tashkent.maintenance is on (a
 * repair on this replica only, logged; see tashkent.c).
 *
 * Objects of schema tashkent (its functions above all) are protected the
 * same way, from what the event triggers report (tk_protect_own_objects).
 *
 * Only at the outermost DDL level (ddl.c): tashkent's own trigger
 * installation runs such statements nested in the DDL that creates or
 * alters a table. Writes to the system catalogs that would do the same
 * (UPDATE pg_trigger SET tgenabled = 'D') are refused by guard.c.
 */
#include "tashkent.h"

#include "access/genam.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_event_trigger.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"

#define OWN_PREFIX "tashkent_"
#define OWN_NAME "tashkent"

static bool
own_trigger_name(const char *name)
{
	return name != NULL && strncmp(name, OWN_PREFIX, strlen(OWN_PREFIX)) == 0;
}

static void
refuse(const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("cannot %s: tashkent replicates this database with it", what),
			 errdetail("Without it, writes or DDL of this replica would not reach the others, and no error would say so."),
			 errhint("Triggers and event triggers named tashkent_* and the tashkent schema are tashkent's. For a repair on this replica only, a superuser can SET tashkent.maintenance = on (logged).")));
}

/* Whether relid, or a table that inherits from it, has a capture trigger. */
static bool
has_own_trigger(Oid relid)
{
	List	   *rels = find_all_inheritors(relid, NoLock, NULL);
	Relation	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ListCell   *lc;
	bool		found = false;

	foreach(lc, rels)
	{
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tup;

		ScanKeyInit(&key, Anum_pg_trigger_tgrelid, BTEqualStrategyNumber, F_OIDEQ,
					ObjectIdGetDatum(lfirst_oid(lc)));
		scan = systable_beginscan(tgrel, TriggerRelidNameIndexId, true, NULL, 1, &key);
		while (!found && (tup = systable_getnext(scan)) != NULL)
			found = own_trigger_name(NameStr(((Form_pg_trigger) GETSTRUCT(tup))->tgname));
		systable_endscan(scan);
	}
	table_close(tgrel, AccessShareLock);
	return found;
}

/* ALTER TABLE ... ENABLE/DISABLE TRIGGER of a capture trigger, or ALL/USER. */
static void
check_alter_table(AlterTableStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);
		Oid			relid;

		switch (cmd->subtype)
		{
			case AT_EnableTrig:
			case AT_EnableAlwaysTrig:
			case AT_EnableReplicaTrig:
			case AT_DisableTrig:
				if (own_trigger_name(cmd->name))
					refuse(psprintf("change how trigger %s fires", cmd->name));
				break;
			case AT_EnableTrigAll:
			case AT_DisableTrigAll:
			case AT_EnableTrigUser:
			case AT_DisableTrigUser:
				relid = RangeVarGetRelid(stmt->relation, NoLock, true);
				if (OidIsValid(relid) && has_own_trigger(relid))
					refuse(psprintf("enable or disable every trigger of %s", stmt->relation->relname));
				break;
			default:
				break;
		}
	}
}

/* An event trigger of the extension (renamed ones included). */
static bool
own_event_trigger(const char *name)
{
	Oid			oid = get_event_trigger_oid(name, true);
	Oid			ext = get_extension_oid(OWN_NAME, true);

	return OidIsValid(oid) && OidIsValid(ext) && getExtensionOfObject(EventTriggerRelationId, oid) == ext;
}

static void
check_drop(DropStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->objects)
	{
		Node	   *object = lfirst(lc);

		switch (stmt->removeType)
		{
			case OBJECT_TRIGGER:
				if (own_trigger_name(strVal(llast((List *) object))))
					refuse(psprintf("drop trigger %s", strVal(llast((List *) object))));
				break;
			case OBJECT_EVENT_TRIGGER:
				if (own_event_trigger(strVal(object)))
					refuse(psprintf("drop event trigger %s", strVal(object)));
				break;
			case OBJECT_EXTENSION:
			case OBJECT_SCHEMA:
				if (strcmp(strVal(object), OWN_NAME) == 0)
					refuse(psprintf("drop %s tashkent", stmt->removeType == OBJECT_SCHEMA ? "schema" : "extension"));
				break;
			default:
				return;
		}
	}
}

static void
check_rename(RenameStmt *stmt)
{
	switch (stmt->renameType)
	{
		case OBJECT_TRIGGER:
			if (own_trigger_name(stmt->subname) || own_trigger_name(stmt->newname))
				refuse(psprintf("rename trigger %s", stmt->subname));
			break;
		case OBJECT_EVENT_TRIGGER:
			if (own_event_trigger(strVal(stmt->object)))
				refuse(psprintf("rename event trigger %s", strVal(stmt->object)));
			break;
		case OBJECT_SCHEMA:
			if (strcmp(stmt->subname, OWN_NAME) == 0)
				refuse("rename schema tashkent");
			break;
		default:
			break;
	}
}

/*
 * CREATE OR REPLACE FUNCTION of a function in schema tashkent would change
 * what the capture trigger or an event trigger runs. Judged before it
 * runs, by the schema the function would be created in: afterwards, the
 * event trigger that judges other objects of the schema
 * (tk_protect_own_objects) could already be the replaced function.
 */
static void
check_create_function(CreateFunctionStmt *stmt)
{
	char	   *name;
	Oid			namespace = QualifiedNameGetCreationNamespace(stmt->funcname, &name);

	if (namespace == get_namespace_oid(OWN_NAME, true) && !creating_extension)
		refuse(psprintf("create or replace function tashkent.%s", name));
}

/*
 * tk_protect_replication refuses DDL that would switch replication off,
 * and returns for any other statement.
 */
void
tk_protect_replication(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_AlterTableStmt:
			check_alter_table((AlterTableStmt *) stmt);
			break;
		case T_DropStmt:
			check_drop((DropStmt *) stmt);
			break;
		case T_RenameStmt:
			check_rename((RenameStmt *) stmt);
			break;
		case T_AlterEventTrigStmt:
			if (own_event_trigger(((AlterEventTrigStmt *) stmt)->trigname))
				refuse(psprintf("alter event trigger %s", ((AlterEventTrigStmt *) stmt)->trigname));
			break;
		case T_AlterOwnerStmt:
			if (((AlterOwnerStmt *) stmt)->objectType == OBJECT_EVENT_TRIGGER &&
				own_event_trigger(strVal(((AlterOwnerStmt *) stmt)->object)))
				refuse(psprintf("alter event trigger %s", strVal(((AlterOwnerStmt *) stmt)->object)));
			break;
		case T_CreateFunctionStmt:
			check_create_function((CreateFunctionStmt *) stmt);
			break;
		case T_AlterObjectDependsStmt:
			{
				AlterObjectDependsStmt *depends = (AlterObjectDependsStmt *) stmt;

				/*
				 * The trigger would go with the extension, in a DROP
				 * EXTENSION. The parser gives its name as a one-element list.
				 */
				if (depends->objectType == OBJECT_TRIGGER && !depends->remove &&
					IsA(depends->object, List) &&
					own_trigger_name(strVal(llast(castNode(List, depends->object)))))
					refuse(psprintf("make trigger %s depend on an extension",
									strVal(llast(castNode(List, depends->object)))));
			}
			break;
		case T_AlterObjectSchemaStmt:
			{
				AlterObjectSchemaStmt *move = (AlterObjectSchemaStmt *) stmt;

				/* tables there are not replicated: their triggers are removed */
				if ((move->objectType == OBJECT_TABLE || move->objectType == OBJECT_FOREIGN_TABLE) &&
					strcmp(move->newschema, "information_schema") == 0)
					refuse("move a replicated table into schema information_schema");
			}
			break;
		case T_AlterExtensionContentsStmt:
			if (strcmp(((AlterExtensionContentsStmt *) stmt)->extname, OWN_NAME) == 0)
				refuse("add objects to or drop objects from extension tashkent");
			break;
		default:
			break;
	}
}

/*
 * tk_protect_own_objects refuses a command that created, changed or
 * dropped an object of schema tashkent (what the event triggers of
 * sql/tashkent--1.0.sql report): CREATE OR REPLACE FUNCTION
 * tashkent.capture() returning NULL, or a replaced event trigger
 * function, would switch capture off as surely as a disabled trigger.
 * The extension's own scripts (CREATE/ALTER EXTENSION tashkent) and the
 * applier may; anyone else only with tashkent.maintenance on.
 */
void
tk_protect_own_objects(void)
{
	if (tk_maintenance || creating_extension || tk_backend_is_applier)
		return;
	refuse("change an object of schema tashkent");
}

/* tk_sets_maintenance_on: SET [LOCAL] tashkent.maintenance to a true value. */
bool
tk_sets_maintenance_on(Node *stmt)
{
	VariableSetStmt *set;
	A_Const    *con;
	bool		on = false;

	if (!IsA(stmt, VariableSetStmt))
		return false;
	set = (VariableSetStmt *) stmt;
	if (set->kind != VAR_SET_VALUE || set->name == NULL ||
		strcmp(set->name, "tashkent.maintenance") != 0 || set->args == NIL)
		return false;
	con = linitial_node(A_Const, set->args);
	if (con->isnull)
		return false;
	if (IsA(&con->val, String))
		return parse_bool(strVal(&con->val), &on) && on;
	if (IsA(&con->val, Integer))
		return intVal(&con->val) != 0;
	return false;
}

/* tk_log_maintenance_on logs that this session now bypasses replication. */
void
tk_log_maintenance_on(void)
{
	ereport(LOG,
			(errmsg("tashkent.maintenance set on by role \"%s\": this session's writes and DDL stay on this replica until it is set off",
					GetUserNameFromId(GetUserId(), false))));
}
