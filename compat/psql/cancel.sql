-- cancel: the Go test sends psql SIGINT (Ctrl-C) while this runs; psql sends a
-- CancelRequest and the statement fails with 57014.
\set VERBOSITY verbose
SELECT pg_sleep(10);
