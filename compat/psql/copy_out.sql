-- copy_out: COPY TO STDOUT, written to files by psql, and read back.
\set t :prefix '_copyout'
\set t2 :prefix '_copyout2'
\set f :tmpdir '/copyout.tsv'
CREATE TABLE :"t" (id int PRIMARY KEY, name text);
CREATE TABLE :"t2" (id int PRIMARY KEY, name text);
INSERT INTO :"t" SELECT g, 'n' || g FROM generate_series(1, 500) g;
-- COPY TO STDOUT into a file (\g), then \copy from that file (written to a
-- file first: \copy does not interpolate variables).
COPY :"t" TO STDOUT \g :f
\set cmd :tmpdir '/copyout_cmd.sql'
\o :cmd
\qecho '\\copy' :"t2" 'FROM' :'f'
\o
\i :cmd
SELECT count(*) AS n FROM :"t" a JOIN :"t2" b USING (id, name) \gset
SELECT (SELECT 'FAIL: rows copied out and back ' || :n WHERE :n <> 500)::int;
-- COPY TO STDOUT into the query output (\o), then the file read back.
\set f2 :tmpdir '/copyout.csv'
\o :f2
COPY (SELECT g, g * 2 FROM generate_series(1, 3) g) TO STDOUT WITH (FORMAT csv, HEADER);
\o
\set content `cat :'f2' | tr '\n' ';'`
SELECT (SELECT 'FAIL: CSV out ' || :'content' WHERE :'content' <> 'g,?column?;1,2;2,4;3,6;')::int;
DROP TABLE :"t", :"t2";
