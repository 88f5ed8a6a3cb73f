-- tashkent 1.0: replication of this database through the replica's agent.
-- Load the library at server start (shared_preload_libraries = 'tashkent')
-- and let the agent run CREATE EXTENSION tashkent; see docs/OPERATIONS.md.

\echo Use "CREATE EXTENSION tashkent" to load this file. \quit

-- The replica's version is this origin's progress: each commit of a
-- version carries it in its commit record (src/turn.c). Origins belong to
-- the whole server, like roles.
SELECT pg_catalog.pg_replication_origin_create('tashkent')
WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_replication_origin AS o WHERE o.roname OPERATOR(pg_catalog.=) 'tashkent');

-- committed_version: the highest version whose commit is visible on this
-- replica; every version below it is visible too. Any role may ask.
CREATE FUNCTION tashkent.committed_version() RETURNS bigint
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_committed_version';

-- The agent's functions. Only superusers may call them (no grants): the
-- agent connects as one.
CREATE FUNCTION tashkent.register_applier() RETURNS bigint
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_register_applier';

CREATE FUNCTION tashkent.apply_versions(first bigint, last bigint) RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_apply_versions';

CREATE FUNCTION tashkent.backends(OUT pid integer, OUT state text, OUT first bigint, OUT version bigint,
	OUT waiting_for bigint, OUT agent_generation bigint, OUT doomed text)
RETURNS SETOF record
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_backends';

CREATE FUNCTION tashkent.doom(pid integer, by_version bigint) RETURNS text
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_doom';

CREATE FUNCTION tashkent.set_admitting(admitting boolean, reason text) RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_set_admitting';

CREATE FUNCTION tashkent.status(OUT committed bigint, OUT floor bigint, OUT agent_generation bigint,
	OUT applier_pid integer, OUT admitting boolean, OUT admit_reason text)
RETURNS record
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_status';

REVOKE ALL ON FUNCTION tashkent.register_applier(), tashkent.apply_versions(bigint, bigint),
	tashkent.backends(), tashkent.doom(integer, bigint), tashkent.set_admitting(boolean, text),
	tashkent.status() FROM PUBLIC;

-- Capture triggers ---------------------------------------------------------
--
-- tashkent.capture() (src/capture.c) captures the writes of replicated
-- tables into the backend's memory: an AFTER INSERT OR UPDATE OR DELETE
-- row trigger, tashkent_capture, and an AFTER TRUNCATE statement trigger,
-- tashkent_capture_truncate, on every replicated table: every permanent
-- ordinary table (partitions included) outside pg_catalog,
-- information_schema, tashkent and pg_toast. Not on partitioned tables:
-- PostgreSQL would clone their row triggers onto the partitions, which
-- have their own, and a TRUNCATE of a partitioned table fires the TRUNCATE
-- triggers of each of its partitions. So a row is always captured under
-- the name of the partition that holds it, however it was written.
--
-- The triggers are ENABLE ALWAYS: they fire under session_replication_role
-- = replica too, which a client may set (the agent's applier, whose
-- writes must not be captured again, is known to capture.c instead).
--
-- Firing order: PostgreSQL fires a table's triggers of one event in name
-- order. tashkent_capture sorts after the foreign-key check triggers
-- (RI_ConstraintTrigger_*: upper case sorts first), so a parent that
-- capture looks up has been checked; against user triggers the order does
-- not matter: capture orders changes by their command ids, not by when its
-- trigger fired (see capture.c).
--
-- Writes to a table without a primary key are refused by the trigger
-- (SQLSTATE 55000), so the triggers do not depend on the key: adding or
-- dropping one changes nothing here.
CREATE FUNCTION tashkent.capture() RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'tashkent_capture';

-- ensure_capture gives one table exactly tashkent's capture triggers, or
-- none if it is not replicated (a temporary table, a schema left out),
-- and says what it did: 'unchanged', 'installed' or 'removed'. It runs
-- with its owner's rights, so that any role's new table gets them.
CREATE FUNCTION tashkent.ensure_capture(p_rel oid) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_rel regclass;
	v_right boolean;
	v_trg name;
BEGIN
	SELECT c.oid::regclass INTO v_rel
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = p_rel
		AND c.relkind = 'r'
		AND c.relpersistence <> 't'
		AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'tashkent', 'pg_toast')
		AND n.nspname NOT LIKE 'pg\_temp\_%'
		AND n.nspname NOT LIKE 'pg\_toast\_temp\_%';

	-- Right: the two triggers, as created below, enabled ALWAYS, and no
	-- other trigger of tashkent.capture (tgtype 29: ROW, INSERT, DELETE,
	-- UPDATE, AFTER; 32: STATEMENT, TRUNCATE, AFTER).
	SELECT coalesce(pg_catalog.array_agg(t.tgname::text ORDER BY t.tgname)
			= ARRAY['tashkent_capture', 'tashkent_capture_truncate']
		AND pg_catalog.bool_and(t.tgenabled = 'A' AND t.tgnargs = 0 AND t.tgqual IS NULL
			AND t.tgattr = ''::int2vector AND t.tgoldtable IS NULL AND t.tgnewtable IS NULL
			AND NOT t.tgdeferrable AND t.tgconstraint = 0
			AND t.tgtype = CASE t.tgname WHEN 'tashkent_capture' THEN 29 ELSE 32 END
			AND t.tgfoid = 'tashkent.capture()'::regprocedure), false)
	INTO v_right
	FROM pg_trigger t
	WHERE t.tgrelid = p_rel AND NOT t.tgisinternal
		AND (t.tgname IN ('tashkent_capture', 'tashkent_capture_truncate')
			OR t.tgfoid = 'tashkent.capture()'::regprocedure);
	IF v_rel IS NOT NULL AND v_right THEN
		RETURN 'unchanged';
	END IF;

	FOR v_trg IN
		SELECT t.tgname FROM pg_trigger t
		WHERE t.tgrelid = p_rel AND NOT t.tgisinternal AND t.tgparentid = 0
			AND (t.tgname IN ('tashkent_capture', 'tashkent_capture_truncate')
				OR t.tgfoid = 'tashkent.capture()'::regprocedure)
	LOOP
		EXECUTE format('DROP TRIGGER %I ON %s', v_trg, p_rel::regclass);
	END LOOP;
	IF v_rel IS NULL THEN
		RETURN 'removed';
	END IF;

	EXECUTE format('CREATE TRIGGER tashkent_capture AFTER INSERT OR UPDATE OR DELETE ON %s '
		'FOR EACH ROW EXECUTE FUNCTION tashkent.capture()', v_rel);
	EXECUTE format('CREATE TRIGGER tashkent_capture_truncate AFTER TRUNCATE ON %s '
		'FOR EACH STATEMENT EXECUTE FUNCTION tashkent.capture()', v_rel);
	-- One ALTER TABLE for both: it fires the event trigger below, which
	-- finds the table right.
	EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER tashkent_capture, '
		'ENABLE ALWAYS TRIGGER tashkent_capture_truncate', v_rel);
	RETURN 'installed';
END
$fn$;

-- capture_on_ddl keeps the triggers right as tables are created or
-- changed: a table created (CREATE TABLE, a partition, CREATE TABLE AS,
-- SELECT INTO), or altered (ATTACH and DETACH PARTITION, SET SCHEMA, SET
-- LOGGED, a capture trigger disabled or renamed...): every table of a
-- partition tree the command touched. Tables created with their rows
-- (CREATE TABLE AS) get the triggers after the rows: the statement's text,
-- replicated, makes them on the other replicas.
CREATE FUNCTION tashkent.capture_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	-- pg_partition_tree lists a partition tree's tables, nothing for a
	-- table outside one.
	PERFORM tashkent.ensure_capture(t.relid)
	FROM (SELECT CASE WHEN d.classid = 'pg_trigger'::regclass
				THEN (SELECT tg.tgrelid FROM pg_trigger tg WHERE tg.oid = d.objid)
				ELSE d.objid END AS relid
			FROM pg_event_trigger_ddl_commands() AS d
			WHERE d.classid IN ('pg_class'::regclass, 'pg_trigger'::regclass)
		UNION
		SELECT p.relid
			FROM pg_event_trigger_ddl_commands() AS d
			CROSS JOIN LATERAL pg_partition_tree(d.objid) AS p
			WHERE d.classid = 'pg_class'::regclass) AS t
	WHERE t.relid IS NOT NULL;
END
$fn$;

-- capture_on_drop refuses DROP TRIGGER of a capture trigger, but to a
-- superuser (and so to ensure_capture): a table's owner may drop its
-- triggers, and its writes would then never be replicated. Dropping the
-- table drops them too, which is no DROP TRIGGER. It runs with the
-- caller's rights, to know who the caller is; it only reads.
CREATE FUNCTION tashkent.capture_on_drop() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_trigger text;
BEGIN
	IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) THEN
		RETURN;
	END IF;
	SELECT d.object_identity INTO v_trigger
	FROM pg_event_trigger_dropped_objects() AS d
	WHERE d.object_type = 'trigger' AND d.original
		AND split_part(d.object_identity, ' on ', 1) IN ('tashkent_capture', 'tashkent_capture_truncate');
	IF v_trigger IS NOT NULL THEN
		RAISE EXCEPTION USING
			ERRCODE = '42501',
			MESSAGE = format('trigger %s replicates the table''s writes; only a superuser may drop it', v_trigger),
			HINT = 'Writes to the table are replicated while it exists.';
	END IF;
END
$fn$;

REVOKE ALL ON FUNCTION tashkent.capture(), tashkent.ensure_capture(oid), tashkent.capture_on_ddl()
	FROM PUBLIC;

CREATE EVENT TRIGGER tashkent_capture_on_ddl ON ddl_command_end
WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE', 'ALTER TRIGGER')
EXECUTE FUNCTION tashkent.capture_on_ddl();
ALTER EVENT TRIGGER tashkent_capture_on_ddl ENABLE ALWAYS;

CREATE EVENT TRIGGER tashkent_capture_on_drop ON sql_drop
WHEN TAG IN ('DROP TRIGGER')
EXECUTE FUNCTION tashkent.capture_on_drop();
ALTER EVENT TRIGGER tashkent_capture_on_drop ENABLE ALWAYS;

-- The tables that exist already.
SELECT tashkent.ensure_capture(c.oid) FROM pg_catalog.pg_class AS c
WHERE c.relkind OPERATOR(pg_catalog.=) 'r';

-- End of capture triggers ---------------------------------------------------

GRANT USAGE ON SCHEMA tashkent TO PUBLIC;
