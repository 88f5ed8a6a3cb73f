-- cursor: FETCH_COUNT makes psql read a result through DECLARE CURSOR / FETCH, in batches.
\set FETCH_COUNT 5000
\o /dev/null
SELECT g FROM generate_series(1, 100000) g;
\o
\unset FETCH_COUNT
-- And by hand.
BEGIN;
DECLARE compat_cur CURSOR FOR SELECT g FROM generate_series(1, 100000) g;
\o /dev/null
FETCH 60000 FROM compat_cur;
\o
SELECT (SELECT 'FAIL: FETCH 60000 gave ' || :'ROW_COUNT' WHERE :ROW_COUNT <> 60000)::int;
\o /dev/null
FETCH ALL FROM compat_cur;
\o
SELECT (SELECT 'FAIL: FETCH ALL gave ' || :'ROW_COUNT' WHERE :ROW_COUNT <> 40000)::int;
CLOSE compat_cur;
COMMIT;
