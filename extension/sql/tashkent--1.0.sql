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

-- Read-your-writes across replicas (src/causal.c; docs/GUARANTEES.md). Any
-- role may call them: they read the session's own state or wait.
-- last_commit_version: the version of this session's last writing commit,
-- NULL if it made none.
CREATE FUNCTION tashkent.last_commit_version() RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_last_commit_version';

-- wait_for_version: returns this replica's version once it holds
-- `version`, so that the next snapshot taken here sees it; SQLSTATE TK004
-- after timeout_ms milliseconds. NULL in, NULL out: no wait.
CREATE FUNCTION tashkent.wait_for_version(version bigint, timeout_ms bigint DEFAULT 30000) RETURNS bigint
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_wait_for_version';

GRANT EXECUTE ON FUNCTION tashkent.last_commit_version(), tashkent.wait_for_version(bigint, bigint) TO PUBLIC;

-- A transaction's state under eventual durability (src/state.c;
-- docs/GUARANTEES.md). Any role may call them: they read shared memory or
-- ask the agent, and wait.
-- last_commit: this session's last writing commit, its version and the
-- epoch that certified it (NULLs if it made none): together they name the
-- transaction, also after a failure of the certifier reused the number.
CREATE FUNCTION tashkent.last_commit(OUT version bigint, OUT epoch bigint) RETURNS record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_last_commit';

-- durable_version: the certifier's durable version as this replica last
-- heard it (the durability feed); NULL if nothing since its server started.
CREATE FUNCTION tashkent.durable_version() RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_durable_version';

-- txn_state: 'durable', 'committed', 'failed' or 'unknown' for the
-- transaction committed as `version` in `epoch` (NULL: the epoch this
-- replica's history holds at the version). NULL version, NULL out.
CREATE FUNCTION tashkent.txn_state(version bigint, epoch bigint DEFAULT NULL) RETURNS text
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_txn_state';

-- wait_durable: 'durable' or 'failed' once the transaction is one or the
-- other; SQLSTATE TK004 after timeout_ms milliseconds. NULL version or
-- timeout, NULL out: no wait.
CREATE FUNCTION tashkent.wait_durable(version bigint, timeout_ms bigint DEFAULT 30000, epoch bigint DEFAULT NULL) RETURNS text
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_wait_durable';

GRANT EXECUTE ON FUNCTION tashkent.last_commit(), tashkent.durable_version(), tashkent.txn_state(bigint, bigint),
	tashkent.wait_durable(bigint, bigint, bigint) TO PUBLIC;

-- snapshot_version: the newest version the current snapshot holds (the
-- transaction's under REPEATABLE READ, the statement's under READ
-- COMMITTED).
CREATE FUNCTION tashkent.snapshot_version() RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_snapshot_version';

GRANT EXECUTE ON FUNCTION tashkent.snapshot_version() TO PUBLIC;

-- hold_commits: holds this replica's commits after `version` (0: after
-- the last one under way) for at most hold_ms, waits until every version
-- up to it is committed here and returns it, so that a snapshot taken
-- before release_commits() holds exactly that version (tashkent verify).
-- Superusers only (no grant): a hold stops this replica's commits.
CREATE FUNCTION tashkent.hold_commits(version bigint, hold_ms bigint DEFAULT 10000) RETURNS bigint
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_hold_commits';

CREATE FUNCTION tashkent.release_commits() RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'tashkent_release_commits';

REVOKE EXECUTE ON FUNCTION tashkent.hold_commits(bigint, bigint), tashkent.release_commits() FROM PUBLIC;

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

-- set_catch_up_target: while this replica catches up (flow control, the
-- agent's flowcontrol.go), its clients' transactions first wait until it
-- has committed `version` (0: none; causal.c).
CREATE FUNCTION tashkent.set_catch_up_target(version bigint) RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_set_catch_up_target';

-- set_write_refusal: while this replica cannot apply (its apply made no
-- progress for --refuse-writes-after), clients' writes are refused at
-- their first write with 57P03 and why; '' lifts it.
CREATE FUNCTION tashkent.set_write_refusal(why text) RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_set_write_refusal';

-- set_mode: the agent's durability placement, 'base', 'mw' or 'ed'
-- (safe.c); the agent sets it before it admits clients.
CREATE FUNCTION tashkent.set_mode(mode text) RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_set_mode';

CREATE FUNCTION tashkent.status(OUT committed bigint, OUT floor bigint, OUT agent_generation bigint,
	OUT applier_pid integer, OUT admitting boolean, OUT admit_reason text, OUT incarnation bigint)
RETURNS record
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_status';

REVOKE ALL ON FUNCTION tashkent.register_applier(), tashkent.apply_versions(bigint, bigint),
	tashkent.backends(), tashkent.doom(integer, bigint), tashkent.set_admitting(boolean, text),
	tashkent.set_catch_up_target(bigint), tashkent.set_write_refusal(text), tashkent.set_mode(text),
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
-- The triggers do not depend on the primary key: capture reads it from
-- its cache of the table (relinfo.c) at every row, so adding or dropping
-- one changes nothing here.
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

-- DDL: what a statement touched, and the applier's DDL generation
--
-- src/ddl.c replicates an outermost DDL statement as its text unless it
-- touched temporary objects only, and refuses one that touched both. It
-- learns what the statement touched from these event triggers, which
-- count the objects PostgreSQL reports by what the catalog says of them
-- (never by a name's text) and pass the counts to note_ddl_objects. They
-- fire in every session_replication_role (ENABLE ALWAYS): in the applier
-- too, which logs its DDL in ddl_log like any other session. SECURITY
-- DEFINER: DDL by any role must be able to report and log.

CREATE FUNCTION tashkent.note_ddl_objects(temporary integer, permanent integer, own integer) RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_note_ddl_objects';
REVOKE ALL ON FUNCTION tashkent.note_ddl_objects(integer, integer, integer) FROM PUBLIC;

-- One row per DDL command that changed a permanent object, inserted by
-- the event triggers below (in the applier too). The agent's applier
-- caches table definitions and checks max(gen), in its own snapshot,
-- before it trusts the cache (internal/replica/apply.go). A table rather
-- than a sequence: the row becomes visible when the DDL commits, together
-- with the catalog change.
CREATE TABLE tashkent.ddl_log (
	gen bigserial PRIMARY KEY,
	at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
REVOKE ALL ON tashkent.ddl_log FROM PUBLIC;

-- check_ddl_generation runs in every apply transaction, so it has no SET
-- clause (a SET clause costs every call a GUC nest level and a new search
-- path) and qualifies every name instead.
CREATE FUNCTION tashkent.check_ddl_generation(p_gen bigint) RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
	IF coalesce((SELECT pg_catalog.max(d.gen) FROM tashkent.ddl_log AS d), 0) OPERATOR(pg_catalog.<>) p_gen THEN
		RAISE EXCEPTION USING ERRCODE = 'TK001',
			MESSAGE = 'tashkent: table definitions changed since the applier cached them';
	END IF;
END
$fn$;

-- keyless_row_missing fails the apply transaction that calls it: a
-- version deletes a row of a table without a primary key that this
-- replica does not have (internal/replica/apply.go calls it with the
-- first such row), so the replica's data differs from the cluster's.
CREATE FUNCTION tashkent.keyless_row_missing(p_table text, p_row text) RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
	RAISE EXCEPTION USING ERRCODE = 'TK005',
		MESSAGE = pg_catalog.format('tashkent: table %s has no row %s to delete (a row of a table without a primary key is found by its whole text), or fewer such rows than the version deleted',
			p_table, pg_catalog.left(p_row, 200)),
		DETAIL = 'This replica''s data differs from the cluster''s.',
		HINT = 'Rebuild this replica from another one.';
END
$fn$;

-- object_is_temporary says whether an object that a DDL command reported
-- (or that one depends on) is temporary: a relation by its persistence; a
-- trigger, rule, policy, constraint, default or statistics object by its
-- table (a statistics object of a temporary table may sit in a permanent
-- schema); anything else by its schema.
CREATE FUNCTION tashkent.object_is_temporary(p_classid oid, p_objid oid) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT coalesce(CASE p_classid
		WHEN 'pg_catalog.pg_class'::regclass THEN
			(SELECT c.relpersistence = 't' FROM pg_class AS c WHERE c.oid = p_objid)
		WHEN 'pg_catalog.pg_trigger'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid WHERE t.oid = p_objid)
		WHEN 'pg_catalog.pg_rewrite'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_rewrite AS r JOIN pg_class AS c ON c.oid = r.ev_class WHERE r.oid = p_objid)
		WHEN 'pg_catalog.pg_policy'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_policy AS p JOIN pg_class AS c ON c.oid = p.polrelid WHERE p.oid = p_objid)
		WHEN 'pg_catalog.pg_attrdef'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_attrdef AS a JOIN pg_class AS c ON c.oid = a.adrelid WHERE a.oid = p_objid)
		WHEN 'pg_catalog.pg_statistic_ext'::regclass THEN (SELECT c.relpersistence = 't'
			FROM pg_statistic_ext AS x JOIN pg_class AS c ON c.oid = x.stxrelid WHERE x.oid = p_objid)
		WHEN 'pg_catalog.pg_constraint'::regclass THEN (SELECT CASE WHEN x.conrelid <> 0
				THEN (SELECT c.relpersistence = 't' FROM pg_class AS c WHERE c.oid = x.conrelid)
				ELSE pg_is_other_temp_schema(x.connamespace) OR x.connamespace = pg_my_temp_schema() END
			FROM pg_constraint AS x WHERE x.oid = p_objid)
		ELSE (SELECT i.schema = 'pg_temp' OR i.schema LIKE 'pg\_temp\_%' OR i.schema LIKE 'pg\_toast\_temp\_%'
			FROM pg_identify_object(p_classid, p_objid, 0) AS i)
	END, false)
$fn$;

-- ddl_command_end reports the objects a command created or changed. It
-- refuses two kinds of command that the other replicas could not run as
-- this one did:
--   - a temporary table that inherits from a permanent one (CREATE TEMP
--     TABLE ... INHERITS, ALTER TABLE ... INHERIT): a write to the parent
--     that reaches the child's rows would be captured as rows of the
--     parent, and the other replicas would hold rows that exist nowhere
--     here;
--   - a permanent object that depends on a temporary one (a column of a
--     temporary type, a default nextval('temporary sequence'), a rule or a
--     BEGIN ATOMIC body that reads a temporary table): its text names an
--     object the other replicas do not have.
CREATE FUNCTION tashkent.ddl_command_end() RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_temporary int;
	v_permanent int;
	v_own int;
	v_what text;
BEGIN
	SELECT count(*) FILTER (WHERE t.temporary), count(*) FILTER (WHERE NOT t.temporary),
		count(*) FILTER (WHERE d.schema_name = 'tashkent' AND NOT d.in_extension)
	INTO v_temporary, v_permanent, v_own
	FROM pg_event_trigger_ddl_commands() AS d,
		LATERAL (SELECT tashkent.object_is_temporary(d.classid, d.objid) AS temporary) AS t
	WHERE d.classid IS NOT NULL;	-- GRANT reports no objects: src/tempddl.c counts them

	SELECT format('%s inherits from %s', i.inhrelid::regclass, i.inhparent::regclass) INTO v_what
	FROM pg_event_trigger_ddl_commands() AS d
	JOIN pg_inherits AS i ON i.inhrelid = d.objid
	JOIN pg_class AS c ON c.oid = i.inhrelid
	JOIN pg_class AS p ON p.oid = i.inhparent
	WHERE d.classid = 'pg_class'::regclass AND c.relpersistence = 't' AND p.relpersistence <> 't'
	LIMIT 1;
	IF v_what IS NOT NULL THEN
		RAISE EXCEPTION USING ERRCODE = '0A000',
			MESSAGE = format('tashkent does not support a temporary table that inherits from a permanent one (%s)', v_what),
			DETAIL = 'Writes to the parent that reach the temporary table''s rows would be replicated as rows of the parent.',
			HINT = 'Create the temporary table with LIKE instead of INHERITS.';
	END IF;

	IF v_permanent > 0 THEN
		WITH o AS (
			SELECT d.classid, d.objid FROM pg_event_trigger_ddl_commands() AS d
			WHERE d.classid IS NOT NULL AND NOT tashkent.object_is_temporary(d.classid, d.objid)
		), part AS (
			SELECT o.classid, o.objid FROM o
			UNION SELECT 'pg_attrdef'::regclass, a.oid FROM o JOIN pg_attrdef AS a ON a.adrelid = o.objid
				WHERE o.classid = 'pg_class'::regclass
			UNION SELECT 'pg_constraint'::regclass, x.oid FROM o JOIN pg_constraint AS x ON x.conrelid = o.objid
				WHERE o.classid = 'pg_class'::regclass
			UNION SELECT 'pg_rewrite'::regclass, r.oid FROM o JOIN pg_rewrite AS r ON r.ev_class = o.objid
				WHERE o.classid = 'pg_class'::regclass
			UNION SELECT 'pg_trigger'::regclass, t.oid FROM o JOIN pg_trigger AS t ON t.tgrelid = o.objid
				WHERE o.classid = 'pg_class'::regclass
			UNION SELECT 'pg_policy'::regclass, p.oid FROM o JOIN pg_policy AS p ON p.polrelid = o.objid
				WHERE o.classid = 'pg_class'::regclass
		)
		SELECT format('%s depends on %s', pg_describe_object(part.classid, part.objid, 0),
				pg_describe_object(dep.refclassid, dep.refobjid, dep.refobjsubid)) INTO v_what
		FROM part JOIN pg_depend AS dep ON dep.classid = part.classid AND dep.objid = part.objid
		WHERE tashkent.object_is_temporary(dep.refclassid, dep.refobjid)
		LIMIT 1;
		IF v_what IS NOT NULL THEN
			RAISE EXCEPTION USING ERRCODE = '0A000',
				MESSAGE = format('tashkent cannot run this DDL: %s makes a permanent object that names a temporary one (%s)', TG_TAG, v_what),
				DETAIL = 'tashkent replicates DDL as its text, and the other replicas do not have this session''s temporary objects.',
				HINT = 'Make the new object temporary too (CREATE TEMP ...), or create it from permanent objects.';
		END IF;
		INSERT INTO tashkent.ddl_log DEFAULT VALUES;
	END IF;
	PERFORM tashkent.note_ddl_objects(v_temporary, v_permanent, v_own);
END
$fn$;

-- ddl_sql_drop reports the objects a command dropped: those it named
-- (original), not what went with them. By the time it runs they are gone
-- from the catalog: PostgreSQL says which were temporary (is_temporary,
-- from their schema); a trigger, rule, policy or default of a temporary
-- table has no schema of its own, and its address names its table's. A
-- statistics object no longer says its table: src/tempddl.c judged it
-- before the DROP ran.
CREATE FUNCTION tashkent.ddl_sql_drop() RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_temporary int;
	v_permanent int;
	v_own int;
BEGIN
	SELECT count(*) FILTER (WHERE t.temporary), count(*) FILTER (WHERE NOT t.temporary),
		count(*) FILTER (WHERE d.schema_name = 'tashkent')
	INTO v_temporary, v_permanent, v_own
	FROM pg_event_trigger_dropped_objects() AS d,
		LATERAL (SELECT d.is_temporary OR coalesce(d.address_names[1] = 'pg_temp', false) AS temporary) AS t
	WHERE d.original AND d.object_type <> 'statistics object';
	IF v_permanent > 0 THEN
		INSERT INTO tashkent.ddl_log DEFAULT VALUES;
	END IF;
	PERFORM tashkent.note_ddl_objects(v_temporary, v_permanent, v_own);
END
$fn$;

CREATE EVENT TRIGGER tashkent_ddl_command_end ON ddl_command_end
	EXECUTE FUNCTION tashkent.ddl_command_end();
ALTER EVENT TRIGGER tashkent_ddl_command_end ENABLE ALWAYS;
CREATE EVENT TRIGGER tashkent_ddl_sql_drop ON sql_drop
	EXECUTE FUNCTION tashkent.ddl_sql_drop();
ALTER EVENT TRIGGER tashkent_ddl_sql_drop ENABLE ALWAYS;

-- Sequences
--
-- A sequence is not replicated: nextval changes no row, so capture never
-- sees it, and each replica has its own. The rows it numbers are
-- replicated like any other, so two replicas whose sequences handed out
-- the same value would collide. As Galera and MySQL Group Replication do
-- with auto_increment_increment / auto_increment_offset, every sequence
-- on replica k of a cluster with stride s advances by s (-s descending)
-- and hands out only values congruent to k modulo s: replicas never meet,
-- with no coordination at nextval time.
--
-- The agent records k and s in replica_settings and runs
-- align_all_sequences(). Then the event trigger aligns each sequence a
-- DDL command creates or alters (CREATE SEQUENCE, SERIAL and identity
-- columns, ALTER SEQUENCE ... RESTART / INCREMENT, ALTER TABLE ... ALTER
-- COLUMN ... RESTART). It fires in the applier too (ENABLE ALWAYS), so
-- each replica aligns a replicated sequence with its own k.
--
-- Aligning runs ALTER SEQUENCE ... INCREMENT BY ±s RESTART WITH v, v the
-- first value congruent to k at or beyond the sequence's next value and
-- beyond the largest value of the column that owns it (rows from
-- elsewhere, a restored dump, are never handed out again). With
-- tashkent.maintenance on (the function's SET clause): it is this
-- replica's own change, never replicated, whoever calls it. setval() is
-- refused (src/guard.c): ALTER SEQUENCE ... RESTART is replicated and
-- realigned everywhere. A user's INCREMENT BY is replaced by ±s. Sessions
-- that cached values (CACHE > 1) keep handing them out, as in PostgreSQL.

-- This replica's place in the cluster: one row at most, local to the
-- replica (the tashkent schema is never replicated). The stride is at most
-- 1024: a SERIAL (int4) column still has about 2 million values per
-- replica.
CREATE TABLE tashkent.replica_settings (
	id              boolean PRIMARY KEY DEFAULT true CHECK (id),
	replica_index   int NOT NULL,
	sequence_stride int NOT NULL,
	CHECK (sequence_stride OPERATOR(pg_catalog.>=) 1 AND sequence_stride OPERATOR(pg_catalog.<=) 1024
		AND replica_index OPERATOR(pg_catalog.>=) 1 AND replica_index OPERATOR(pg_catalog.<=) sequence_stride)
);
REVOKE ALL ON tashkent.replica_settings FROM PUBLIC;

-- This replica's history: one row per run of versions certified in one
-- epoch (a single certifier's generation, or a group leader's Raft term),
-- from first_version up to the next row's first_version - 1. The agent
-- inserts a row when the first entry of a new epoch is delivered, before
-- that entry is applied, and deletes the rows above the replica's version
-- when it starts. It sends the rows when it opens its certifier stream,
-- and the certifier admits the replica only if this history is a prefix
-- of its log. Local to the replica (the tashkent schema is never
-- replicated); a copy taken from a donor carries the donor's history,
-- which is the copy's too.
CREATE TABLE tashkent.history (
	first_version bigint PRIMARY KEY CHECK (first_version OPERATOR(pg_catalog.>=) 1),
	epoch         bigint NOT NULL
);
REVOKE ALL ON tashkent.history FROM PUBLIC;

-- A rewind under way (src/rewind.c): the replica goes back from
-- from_version to target_version, taking back versions that failed (the
-- certifier lost them before they were durable, and numbers them anew).
-- One row at most: rewind_begin inserts it in the transaction that undoes
-- the rows, rewind_finish deletes it once the replica's version is
-- target_version. A row the agent finds at start means the server stopped
-- between the two: the agent calls rewind_finish again. Local to the
-- replica.
CREATE TABLE tashkent.rewind (
	id             boolean PRIMARY KEY DEFAULT true CHECK (id),
	target_version bigint NOT NULL CHECK (target_version OPERATOR(pg_catalog.>=) 0),
	from_version   bigint NOT NULL,
	began_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CHECK (from_version OPERATOR(pg_catalog.>=) target_version)
);
REVOKE ALL ON tashkent.rewind FROM PUBLIC;

-- rewind_begin: the current transaction of the agent's applier undoes
-- versions target+1..from_version (the replica's version) and inserts the
-- marker; refused (55006) while another backend is in the commit order.
-- rewind_finish: the replica's version becomes target, once that undo
-- committed; returns the version it went back from. Superusers only (no
-- grants).
CREATE FUNCTION tashkent.rewind_begin(target bigint, from_version bigint) RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_rewind_begin';

CREATE FUNCTION tashkent.rewind_finish(target bigint) RETURNS bigint
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_rewind_finish';

REVOKE ALL ON FUNCTION tashkent.rewind_begin(bigint, bigint), tashkent.rewind_finish(bigint) FROM PUBLIC;

-- The rewind fence (src/fence.c): from raise_rewind_fence, which the agent
-- calls before it ends the transactions in a rewind's way, to
-- lower_rewind_fence, clients' transactions in this database are refused
-- (57P03); the agent's sessions (tashkent.agent_session) go on.
-- Superusers only (no grants).
CREATE FUNCTION tashkent.raise_rewind_fence(target bigint) RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_raise_rewind_fence';

CREATE FUNCTION tashkent.lower_rewind_fence() RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'tashkent_lower_rewind_fence';

REVOKE ALL ON FUNCTION tashkent.raise_rewind_fence(bigint), tashkent.lower_rewind_fence() FROM PUBLIC;

-- align_sequence makes one sequence advance by ±stride and hand out only
-- values congruent to the replica index modulo the stride. Returns
-- 'unchanged', 'aligned', or NULL (no settings, or not a user sequence).
-- Arithmetic in numeric: bigint bounds must not overflow.
CREATE FUNCTION tashkent.align_sequence(p_seq oid) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET tashkent.maintenance = on
AS $fn$
DECLARE
	v_idx int;
	v_stride int;
	v_rel regclass;
	v_seq pg_sequence%ROWTYPE;
	v_last numeric;
	v_called boolean;
	v_dir int;
	v_cur numeric;
	v_next numeric;
	v_floor numeric;
	v_target numeric;
	v_col record;
BEGIN
	SELECT s.replica_index, s.sequence_stride INTO v_idx, v_stride FROM tashkent.replica_settings s;
	IF v_stride IS NULL THEN
		RETURN NULL;
	END IF;
	SELECT c.oid::regclass INTO v_rel
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = p_seq AND c.relkind = 'S' AND c.relpersistence <> 't'
		AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'tashkent');
	IF v_rel IS NULL THEN
		RETURN NULL;
	END IF;
	SELECT * INTO v_seq FROM pg_sequence WHERE seqrelid = p_seq;
	EXECUTE format('SELECT last_value, is_called FROM %s', v_rel) INTO v_last, v_called;
	v_dir := sign(v_seq.seqincrement);
	v_cur := CASE WHEN v_called THEN v_last + v_seq.seqincrement ELSE v_last END;
	v_next := v_cur;

	-- Values a column already holds are never handed out again: the
	-- column that owns the sequence (SERIAL, identity, OWNED BY), and every
	-- numeric column whose default calls it (nextval('s') without OWNED BY).
	-- The values another replica handed out with its own offset are in
	-- those columns too, which is what makes a copy, or a reused replica
	-- index, safe.
	FOR v_col IN
		SELECT a.attrelid::regclass AS tbl, quote_ident(a.attname) AS col
		FROM pg_depend d
		JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
		WHERE d.classid = 'pg_class'::regclass AND d.objid = p_seq
			AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0
		UNION
		SELECT a.attrelid::regclass, quote_ident(a.attname)
		FROM pg_depend d
		JOIN pg_attrdef ad ON ad.oid = d.objid
		JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
		JOIN pg_type t ON t.oid = a.atttypid
		WHERE d.classid = 'pg_attrdef'::regclass AND d.refclassid = 'pg_class'::regclass
			AND d.refobjid = p_seq AND NOT a.attisdropped
			AND (CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END)
				IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'numeric'::regtype)
	LOOP
		IF v_dir > 0 THEN
			EXECUTE format('SELECT max(%s)::numeric + 1 FROM %s', v_col.col, v_col.tbl) INTO v_floor;
			v_next := greatest(v_next, v_floor);
		ELSE
			EXECUTE format('SELECT min(%s)::numeric - 1 FROM %s', v_col.col, v_col.tbl) INTO v_floor;
			v_next := least(v_next, v_floor);
		END IF;
	END LOOP;

	IF abs(v_seq.seqincrement) = v_stride AND v_next = v_cur
		AND mod(mod(v_next - v_idx, v_stride) + v_stride, v_stride) = 0 THEN
		RETURN 'unchanged';
	END IF;
	IF v_dir > 0 THEN
		v_target := v_next + mod(mod(v_idx - v_next, v_stride) + v_stride, v_stride);
	ELSE
		v_target := v_next - mod(mod(v_next - v_idx, v_stride) + v_stride, v_stride);
	END IF;
	IF v_target > v_seq.seqmax OR v_target < v_seq.seqmin THEN
		RAISE EXCEPTION USING ERRCODE = '55000',
			MESSAGE = format('sequence %s has no value left for replica %s of stride %s', v_rel, v_idx, v_stride),
			HINT = 'Give the sequence a wider range (ALTER SEQUENCE ... MAXVALUE / MINVALUE, or AS bigint).';
	END IF;
	EXECUTE format('ALTER SEQUENCE %s INCREMENT BY %s RESTART WITH %s', v_rel, v_dir * v_stride, v_target);
	RETURN 'aligned';
END
$fn$;

-- align_relation_sequences aligns a sequence, or every sequence a table's
-- columns own (SERIAL, identity): what a DDL command on that relation may
-- have created or restarted.
CREATE FUNCTION tashkent.align_relation_sequences(p_rel oid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	IF NOT EXISTS (SELECT FROM tashkent.replica_settings) THEN
		RETURN;
	END IF;
	PERFORM tashkent.align_sequence(p_rel);
	PERFORM tashkent.align_sequence(d.objid)
	FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
	WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
		AND d.refobjid = p_rel AND d.deptype IN ('a', 'i');
END
$fn$;

-- align_all_sequences aligns every user sequence of the database: after
-- the agent sets replica_settings, and by hand after a setval() that
-- maintenance let through. Returns how many it changed.
CREATE FUNCTION tashkent.align_all_sequences() RETURNS int
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_n int := 0;
	v_seq oid;
BEGIN
	FOR v_seq IN SELECT c.oid FROM pg_class c WHERE c.relkind = 'S' ORDER BY c.oid LOOP
		IF tashkent.align_sequence(v_seq) = 'aligned' THEN
			v_n := v_n + 1;
		END IF;
	END LOOP;
	RETURN v_n;
END
$fn$;

CREATE FUNCTION tashkent.align_ddl_sequences() RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_rel oid;
BEGIN
	IF NOT EXISTS (SELECT FROM tashkent.replica_settings) THEN
		RETURN;
	END IF;
	FOR v_rel IN
		SELECT DISTINCT d.objid FROM pg_event_trigger_ddl_commands() AS d
		WHERE d.classid = 'pg_class'::regclass
	LOOP
		PERFORM tashkent.align_relation_sequences(v_rel);
	END LOOP;
END
$fn$;

-- They read any table's key column and restart any sequence with their
-- owner's rights: only the event trigger (as its owner) and superusers
-- may call them (PUBLIC gets EXECUTE on a new function by default).
REVOKE EXECUTE ON FUNCTION tashkent.align_sequence(oid), tashkent.align_relation_sequences(oid),
	tashkent.align_all_sequences() FROM PUBLIC;

CREATE EVENT TRIGGER tashkent_sequences ON ddl_command_end
	WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE', 'CREATE SCHEMA',
		'CREATE SEQUENCE', 'ALTER SEQUENCE')
	EXECUTE FUNCTION tashkent.align_ddl_sequences();
ALTER EVENT TRIGGER tashkent_sequences ENABLE ALWAYS;

-- DDL guard
--
-- The other replicas run replicated DDL as a superuser, so DDL by a role
-- that is not one would run code (a default, a constraint, an index
-- expression, a trigger) with superuser rights there. src/ddlguard.c
-- refuses such DDL (42501) where src/ddl.c decides to replicate it,
-- unless role_may_replicate_ddl() says the role may: a superuser, or every
-- role is trusted. The agent records the trust (its --trust-ddl-roles):
--   INSERT INTO tashkent.ddl_trust (trust_roles) VALUES (true)
--   ON CONFLICT (id) DO UPDATE SET trust_roles = EXCLUDED.trust_roles
-- Every role may read it: the guard asks as the role.
CREATE TABLE tashkent.ddl_trust (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	trust_roles boolean NOT NULL
);
REVOKE ALL ON tashkent.ddl_trust FROM PUBLIC;
GRANT SELECT ON tashkent.ddl_trust TO PUBLIC;

CREATE FUNCTION tashkent.role_may_replicate_ddl() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) current_user), false)
		OR coalesce((SELECT t.trust_roles FROM tashkent.ddl_trust AS t), false)
$fn$;
