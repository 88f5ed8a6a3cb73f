-- no_pk_write: a table without a primary key takes inserts (equal rows
-- too), updates and deletes, on the cluster as on PostgreSQL.
\set t :prefix '_nopk'
CREATE TABLE :"t" (a int, b text);
INSERT INTO :"t" VALUES (1, 'x'), (1, 'x');
UPDATE :"t" SET b = 'y' WHERE ctid = (SELECT min(ctid) FROM :"t");
DELETE FROM :"t" WHERE b = 'x';
SELECT (SELECT 'FAIL: rows left: ' || r FROM (SELECT count(*)::text || min(b) AS r FROM :"t") AS s WHERE r <> '1y')::int;
SELECT 1 AS v \gset
DROP TABLE :"t";
