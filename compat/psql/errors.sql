-- errors: SQLSTATEs reach the client, and the session goes on.
\set t :prefix '_errors'
CREATE TABLE :"t" (id int PRIMARY KEY);
INSERT INTO :"t" VALUES (1);
\set ON_ERROR_STOP 0
INSERT INTO :"t" VALUES (1);
\set ON_ERROR_STOP 1
SELECT (SELECT 'FAIL: duplicate key gave ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '23505')::int;
\set ON_ERROR_STOP 0
SELECT 1/0;
\set ON_ERROR_STOP 1
SELECT (SELECT 'FAIL: division by zero gave ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '22012')::int;
\set ON_ERROR_STOP 0
SELECT * FROM compat_no_such_table;
\set ON_ERROR_STOP 1
SELECT (SELECT 'FAIL: missing table gave ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '42P01')::int;
\set ON_ERROR_STOP 0
SELEC 1;
\set ON_ERROR_STOP 1
SELECT (SELECT 'FAIL: syntax error gave ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '42601')::int;
BEGIN;
\set ON_ERROR_STOP 0
INSERT INTO :"t" VALUES (1);
SELECT 1;
\set ON_ERROR_STOP 1
ROLLBACK;
SELECT (SELECT 'FAIL: a statement in a failed block gave ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '25P02')::int;
SELECT 42 AS v \gset
SELECT (SELECT 'FAIL: the session after errors' WHERE :v <> 42)::int;
DROP TABLE :"t";
