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

GRANT USAGE ON SCHEMA tashkent TO PUBLIC;
