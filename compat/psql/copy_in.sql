-- copy_in: COPY FROM STDIN with inline data, in and out of a transaction block, and \copy.
\set t :prefix '_copyin'
\pset tuples_only on
\pset format unaligned
CREATE TABLE :"t" (id int PRIMARY KEY, name text, amount numeric);
COPY :"t" (id, name, amount) FROM STDIN;
1	row 1\twith tab	0.25
2	row 2	0.5
3	\N	0.75
\.
BEGIN;
COPY :"t" FROM STDIN WITH (FORMAT csv);
4,"csv 4, quoted",4
5,csv 5,5
\.
COMMIT;
-- \copy: psql reads the data itself and sends it with COPY FROM STDIN. \copy
-- does not interpolate variables, so the command is written to a file first.
\set data :tmpdir '/copyin.tsv'
\set cmd :tmpdir '/copyin_cmd.sql'
\o :data
SELECT g || E'\tseq ' || g || E'\t1' FROM generate_series(1001, 2000) g;
\o :cmd
\qecho '\\copy' :"t" '(id, name, amount) FROM' :'data'
\o
\pset tuples_only off
\i :cmd
SELECT count(*) AS n, sum(id) AS s, sum(amount) AS a FROM :"t" \gset
SELECT (SELECT format('FAIL: count %s sum(id) %s sum(amount) %s', :'n', :'s', :'a')
        WHERE (:n, :s, :a) <> (1005, 15 + 1500500, 1010.5))::int;
SELECT name AS got FROM :"t" WHERE id = 1 \gset
SELECT (SELECT 'FAIL: escaped text ' || :'got' WHERE :'got' <> E'row 1\twith tab')::int;
-- A COPY that fails (duplicate key) changes nothing.
\set ON_ERROR_STOP 0
COPY :"t" (id, name) FROM STDIN;
5000	new
1	dup
\.
\set ON_ERROR_STOP 1
-- (psql sets neither ERROR nor LAST_ERROR_SQLSTATE for an error during COPY:
-- the row count below is the check.)
SELECT count(*) AS n FROM :"t" \gset
SELECT (SELECT 'FAIL: rows after a failed COPY ' || :n WHERE :n <> 1005)::int;
DROP TABLE :"t";
