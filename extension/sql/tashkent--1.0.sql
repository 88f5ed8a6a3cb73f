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

-- The row trigger that captures the writes of replicated tables
-- (src/capture.c). It is installed on every permanent table.
CREATE FUNCTION tashkent.capture() RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'tashkent_capture';

-- DDL generation (agent)
-- The agent's applier caches table definitions (internal/replica,
-- Applier) and checks, in each apply transaction, that no DDL committed
-- since it read them. ddl_log gets a row per transaction that ran DDL; a
-- row rather than a sequence, so that it becomes visible with the catalog
-- change.
CREATE TABLE tashkent.ddl_log (
	gen bigserial PRIMARY KEY,
	at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- check_ddl_generation raises TK001 when the newest generation is not the
-- one the applier cached.
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

-- note_ddl logs a generation for every DDL command on a permanent object,
-- the applier's own included (ENABLE ALWAYS: it runs with
-- session_replication_role = replica); as its owner, since the role that
-- ran the DDL may not write the table.
CREATE FUNCTION tashkent.note_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	IF EXISTS (SELECT FROM pg_event_trigger_ddl_commands() AS c
			WHERE c.schema_name IS NULL OR c.schema_name !~ '^pg_temp') THEN
		INSERT INTO tashkent.ddl_log DEFAULT VALUES;
	END IF;
END
$fn$;
REVOKE ALL ON FUNCTION tashkent.note_ddl() FROM PUBLIC;

CREATE EVENT TRIGGER tashkent_note_ddl ON ddl_command_end EXECUTE FUNCTION tashkent.note_ddl();
ALTER EVENT TRIGGER tashkent_note_ddl ENABLE ALWAYS;

GRANT USAGE ON SCHEMA tashkent TO PUBLIC;
