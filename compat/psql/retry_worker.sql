-- retry_40001 worker: one increment of the counter in a REPEATABLE READ
-- transaction, reading the value and writing it plus one. The Go test runs two
-- workers at once (on two replicas of the cluster) and runs a worker again
-- when it failed with 40001 (psql prints the SQLSTATE with VERBOSITY verbose).
--   -v t=TABLE -v pre=SECONDS (before BEGIN) -v mid=SECONDS (between read and write)
\set VERBOSITY verbose
SELECT pg_sleep(:pre);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT n AS cur FROM :"t" WHERE id = 1 \gset
SELECT pg_sleep(:mid);
UPDATE :"t" SET n = :cur + 1 WHERE id = 1;
COMMIT;
