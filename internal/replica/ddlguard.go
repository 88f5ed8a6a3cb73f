package replica

import (
	"context"
	"fmt"
	"strings"
)

// The DDL guard. Replicated DDL runs on the other replicas in the proxies'
// administrative sessions, as a superuser, and so does whatever code it
// reaches there (a column default, a CHECK constraint, an index
// expression) and whatever it leaves behind for the appliers, which apply
// writesets as a superuser (a trigger set ENABLE ALWAYS fires there). DDL
// by a role that is not a superuser would therefore let that role run code
// as a superuser on the other replicas, so the database refuses it, with
// SQLSTATE 42501, unless the proxy declares such roles trusted
// (SetDDLTrust, the proxy's --trust-ddl-roles).
//
// The database refuses it rather than the proxy, because the proxy sees
// only the statements a client sends: DDL inside a DO block, a function or
// a procedure reaches the database without it (and is not replicated
// either), and in a pipeline the proxy's view of the role can be stale.
// The event triggers below see every DDL command, with the role it runs
// as: current_user, which inside a SECURITY DEFINER function is the
// function's owner, as PostgreSQL's own privilege checks have it. They run
// as that role (SECURITY INVOKER), so they judge the role and nothing
// else; they fire in every session_replication_role (ALWAYS), so a
// direct connection to the replica's PostgreSQL is refused too.
//
// DDL on temporary objects (reported in schema pg_temp, or a trigger,
// rule, policy or statistics object of a temporary table) stays on the
// replica and is allowed. Whether an object is temporary is read from the catalog
// (ddl_object_is_temporary), never from its identity's text: a quoted
// name can contain any text, and matching "% on pg_temp.%" let
// public."f on pg_temp.x"() and a trigger "t on pg_temp.x" of a
// persistent table through (review h33, finding 1). tashkent's own DDL (on_ddl's triggers, Install, the appliers)
// runs as a superuser.
//
// The guard also notes, in a client's session through the proxy (capture
// on), the top-level statement under which DDL on a persistent object ran:
// current_query(), with the first such command, in the transaction-local
// setting ClientDDLSetting. The proxy replicates DDL as the statements the
// client sends, so DDL that a DO block, a function, a procedure or a
// trigger ran would stay on this replica, and a later write to what it
// made or changed would stop the other replicas' appliers. At COMMIT the
// proxy reads the notes (CollectEndSQL) and refuses the transaction if a
// noted statement is not one it replicates as DDL. The notes are a safety
// net against mistakes, not a security boundary: only roles trusted with
// DDL get this far, and they could clear the setting.
const ddlGuardTemplate = `
-- ddl_trust says whether DDL by roles that are not superusers is allowed
-- (SetDDLTrust). Every role may read it: the guard runs as the role.
CREATE TABLE IF NOT EXISTS tashkent.ddl_trust (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	trust_roles boolean NOT NULL
);
REVOKE ALL ON tashkent.ddl_trust FROM PUBLIC;
GRANT SELECT ON tashkent.ddl_trust TO PUBLIC;

CREATE OR REPLACE FUNCTION tashkent.role_may_replicate_ddl() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) current_user), false)
		OR coalesce((SELECT t.trust_roles FROM tashkent.ddl_trust AS t), false)
$fn$;

CREATE OR REPLACE FUNCTION tashkent.refuse_untrusted_ddl(p_what text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	RAISE EXCEPTION USING
		ERRCODE = '42501',
		MESSAGE = format('tashkent replicates DDL only from superusers: role %I is not one', current_user),
		DETAIL = format('The statement %s. The other replicas run replicated DDL as a superuser, so code it reaches (a default, a constraint, an index expression, a trigger) would run there with superuser rights.', p_what),
		HINT = 'Run DDL as a superuser, or start the proxies with --trust-ddl-roles if every role that can run DDL is trusted as a superuser. DDL on temporary objects is allowed.';
END
$fn$;

-- ddl_object_is_temporary says whether a command's object (as
-- pg_event_trigger_ddl_commands reports it) is temporary: a trigger, rule
-- or policy by its table, anything else by its schema.
CREATE OR REPLACE FUNCTION tashkent.ddl_object_is_temporary(p_classid oid, p_objid oid, p_schema text) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT coalesce(CASE p_classid
		WHEN 'pg_catalog.pg_trigger'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid WHERE t.oid = p_objid)
		WHEN 'pg_catalog.pg_rewrite'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_rewrite AS r JOIN pg_class AS c ON c.oid = r.ev_class WHERE r.oid = p_objid)
		WHEN 'pg_catalog.pg_policy'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_policy AS p JOIN pg_class AS c ON c.oid = p.polrelid WHERE p.oid = p_objid)
		WHEN 'pg_catalog.pg_statistic_ext'::regclass THEN (SELECT c.relpersistence = 't' OR p_schema = 'pg_temp'
			FROM pg_statistic_ext AS x JOIN pg_class AS c ON c.oid = x.stxrelid WHERE x.oid = p_objid)
		ELSE p_schema = 'pg_temp'
	END, false)
$fn$;

-- note_client_ddl adds the current top-level statement to the
-- transaction's notes (see ClientDDLSetting), with the first command it
-- ran on a persistent object. current_query() is the text the proxy sent:
-- one statement of a simple query, or a prepared statement's whole text.
--
-- A statement that begins with a DDL verb is not noted: it is DDL the
-- client sent, which the proxy replicates (its own nested DDL with it).
-- So a schema load of thousands of DDL statements in one transaction
-- keeps the notes empty, and each note costs what a few notes cost: the
-- statements noted are those that hide DDL (DO, CALL, SELECT f(), an
-- INSERT whose trigger runs DDL), few per transaction. CREATE TEMP ... is
-- noted all the same: the proxy keeps it local, so DDL on persistent
-- objects under it (CREATE TEMP TABLE t AS SELECT f(), where f creates a
-- table; review h36) would not be replicated. A statement's
-- firings come one after the other: the last note is the only one to
-- compare with. tashkent's capture triggers on a new table are created
-- (and reported) before the table's own command ends; the note then names
-- the table's command instead, which tells the user more.
CREATE OR REPLACE FUNCTION tashkent.note_client_ddl(p_what text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_query text := coalesce(current_query(), '');
	v_notes jsonb;
	v_last jsonb;
	c_ours constant text := 'CREATE TRIGGER changes tashkent\_capture%';
	-- white space and comments before a statement's first word
	c_lead constant text := '(?:\s|/\*(?:[^*]|\*+[^*/])*\*+/|--[^\n]*(?:\n|$))*';
BEGIN
	IF upper(substring(v_query from '^' || c_lead || '([A-Za-z]+)'))
			IN ('CREATE', 'ALTER', 'DROP', 'GRANT', 'REVOKE', 'COMMENT', 'SECURITY', 'REFRESH', 'IMPORT', 'REASSIGN')
		AND v_query !~* ('^' || c_lead || 'create\s+(?:(?:global|local)\s+)?temp(?:orary)?\M') THEN
		RETURN;
	END IF;
	v_notes := coalesce(nullif(current_setting('$CLIENT_DDL_SETTING', true), '')::jsonb, '[]'::jsonb);
	v_last := v_notes->-1;
	IF v_last IS NULL OR v_last->>'query' IS DISTINCT FROM v_query THEN
		v_notes := v_notes || jsonb_build_array(jsonb_build_object('query', v_query, 'ddl', p_what));
	ELSIF v_last->>'ddl' LIKE c_ours AND p_what NOT LIKE c_ours THEN
		v_notes := jsonb_set(v_notes, '{-1,ddl}', to_jsonb(p_what));
	ELSE
		RETURN;
	END IF;
	PERFORM set_config('$CLIENT_DDL_SETTING', v_notes::text, true);
END
$fn$;

-- guard_ddl is both event triggers' function: at ddl_command_end it looks
-- at the objects the command created or changed, at sql_drop at those it
-- dropped.
CREATE OR REPLACE FUNCTION tashkent.guard_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_what text;
	v_client boolean := current_setting('tashkent.capture', true) OPERATOR(pg_catalog.=) 'on';
BEGIN
	IF NOT v_client AND tashkent.role_may_replicate_ddl() THEN
		RETURN;
	END IF;
	IF TG_EVENT OPERATOR(pg_catalog.=) 'sql_drop' THEN
		SELECT format('%s drops %s %s', TG_TAG, d.object_type, d.object_identity) INTO v_what
		FROM pg_catalog.pg_event_trigger_dropped_objects() AS d
		WHERE NOT d.is_temporary
			-- A temporary table's rules, triggers and policies are not
			-- is_temporary; their address names their table's schema.
			AND NOT (d.object_type IN ('rule', 'trigger', 'policy') AND d.address_names[1] OPERATOR(pg_catalog.=) 'pg_temp')
		LIMIT 1;
	ELSE
		SELECT format('%s changes %s', d.command_tag, coalesce(d.object_identity, d.object_type)) INTO v_what
		FROM pg_catalog.pg_event_trigger_ddl_commands() AS d
		WHERE NOT tashkent.ddl_object_is_temporary(d.classid, d.objid, d.schema_name)
		LIMIT 1;
	END IF;
	IF v_what IS NULL THEN
		RETURN;
	END IF;
	IF NOT tashkent.role_may_replicate_ddl() THEN
		PERFORM tashkent.refuse_untrusted_ddl(v_what);
	END IF;
	IF v_client THEN
		PERFORM tashkent.note_client_ddl(v_what);
	END IF;
END
$fn$;

DROP EVENT TRIGGER IF EXISTS tashkent_guard_ddl;
CREATE EVENT TRIGGER tashkent_guard_ddl ON ddl_command_end EXECUTE FUNCTION tashkent.guard_ddl();
ALTER EVENT TRIGGER tashkent_guard_ddl ENABLE ALWAYS;
DROP EVENT TRIGGER IF EXISTS tashkent_guard_drop;
CREATE EVENT TRIGGER tashkent_guard_drop ON sql_drop EXECUTE FUNCTION tashkent.guard_ddl();
ALTER EVENT TRIGGER tashkent_guard_drop ENABLE ALWAYS;
`

// ClientDDLSetting is the transaction-local setting in which the DDL guard
// notes the statements under which a client's DDL ran (see above): a JSON
// array of {"query": current_query(), "ddl": the first command on a
// persistent object}.
const ClientDDLSetting = "tashkent.client_ddl"

// ddlGuardSQL is the guard, with its setting's name.
var ddlGuardSQL = strings.ReplaceAll(ddlGuardTemplate, "$CLIENT_DDL_SETTING", ClientDDLSetting)

// ClientDDLNote is one entry of ClientDDLSetting.
type ClientDDLNote struct {
	Query string `json:"query"`
	DDL   string `json:"ddl"`
}

// SetDDLTrust records whether this database lets roles that are not
// superusers run DDL (see the DDL guard above). Run it on a superuser's
// connection after Install; it is local to the replica (nothing in the
// tashkent schema is replicated).
func SetDDLTrust(ctx context.Context, q Querier, trustRoles bool) error {
	const sql = `INSERT INTO tashkent.ddl_trust (trust_roles) VALUES ($1)
		ON CONFLICT (id) DO UPDATE SET trust_roles = EXCLUDED.trust_roles`
	if _, err := q.Exec(ctx, sql, trustRoles); err != nil {
		return fmt.Errorf("replica: record whether DDL of roles that are not superusers is trusted: %w", err)
	}
	return nil
}
