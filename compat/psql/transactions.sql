-- transactions: COMMIT, ROLLBACK, savepoints, and COMMIT of a failed block.
\set t :prefix '_tx'
CREATE TABLE :"t" (id int PRIMARY KEY, v text);
BEGIN;
INSERT INTO :"t" VALUES (1, 'a');
SAVEPOINT s1;
INSERT INTO :"t" VALUES (2, 'b');
\set ON_ERROR_STOP 0
INSERT INTO :"t" VALUES (1, 'dup');
\set ON_ERROR_STOP 1
ROLLBACK TO SAVEPOINT s1;
SELECT (SELECT 'FAIL: duplicate in a savepoint gave SQLSTATE ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '23505')::int;
INSERT INTO :"t" VALUES (3, 'c');
COMMIT;
SELECT string_agg(id::text, ',' ORDER BY id) AS ids FROM :"t" \gset
SELECT (SELECT 'FAIL: rows after ROLLBACK TO SAVEPOINT ' || :'ids' WHERE :'ids' <> '1,3')::int;
BEGIN ISOLATION LEVEL REPEATABLE READ;
INSERT INTO :"t" VALUES (4, 'd');
DELETE FROM :"t" WHERE id = 1;
ROLLBACK;
SELECT string_agg(id::text, ',' ORDER BY id) AS ids FROM :"t" \gset
SELECT (SELECT 'FAIL: rows after ROLLBACK ' || :'ids' WHERE :'ids' <> '1,3')::int;
START TRANSACTION;
INSERT INTO :"t" VALUES (5, 'e');
SAVEPOINT s1;
INSERT INTO :"t" VALUES (6, 'f');
RELEASE SAVEPOINT s1;
END;
BEGIN;
INSERT INTO :"t" VALUES (7, 'g');
\set ON_ERROR_STOP 0
SELECT 1/0;
\set ON_ERROR_STOP 1
COMMIT;
SELECT string_agg(id::text, ',' ORDER BY id) AS ids FROM :"t" \gset
SELECT (SELECT 'FAIL: rows at the end ' || :'ids' WHERE :'ids' <> '1,3,5,6')::int;
DROP TABLE :"t";
