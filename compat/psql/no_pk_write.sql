-- no_pk_write: tashkent refuses writes to a table without a primary key
-- (55000); PostgreSQL itself takes them. -v target=direct|cluster.
\set t :prefix '_nopk'
CREATE TABLE :"t" (a int);
SELECT :'target' = 'cluster' AS through_cluster \gset
\if :through_cluster
\set ON_ERROR_STOP 0
INSERT INTO :"t" VALUES (1);
\set ON_ERROR_STOP 1
SELECT (SELECT 'FAIL: a write to a table without a primary key gave ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '55000')::int;
\else
INSERT INTO :"t" VALUES (1);
\endif
SELECT 1 AS v \gset
DROP TABLE :"t";
