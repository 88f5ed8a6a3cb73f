-- prepared: SQL-level PREPARE / EXECUTE / DEALLOCATE (psql 15 has no protocol-level prepare).
\set t :prefix '_prepared'
CREATE TABLE :"t" (id int PRIMARY KEY, v text);
PREPARE compat_ins (int, text) AS INSERT INTO :"t" VALUES ($1, $2);
PREPARE compat_sel (int) AS SELECT v FROM :"t" WHERE id = $1;
EXECUTE compat_ins (1, 'one');
EXECUTE compat_ins (2, 'two');
BEGIN;
EXECUTE compat_ins (3, 'three');
COMMIT;
EXECUTE compat_sel (2) \gset
SELECT (SELECT 'FAIL: EXECUTE compat_sel(2) gave ' || :'v' WHERE :'v' <> 'two')::int;
SELECT count(*) AS n FROM pg_prepared_statements WHERE from_sql AND name LIKE 'compat_%' \gset
SELECT (SELECT 'FAIL: prepared statements ' || :n WHERE :n <> 2)::int;
DEALLOCATE compat_ins;
DEALLOCATE ALL;
SELECT count(*) AS n FROM :"t" \gset
SELECT (SELECT 'FAIL: rows ' || :n WHERE :n <> 3)::int;
DROP TABLE :"t";
