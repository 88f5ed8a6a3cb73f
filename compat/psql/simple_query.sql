-- simple_query: psql sends every statement as a simple Query; \; joins several into one.
\set t :prefix '_simple'
CREATE TABLE :"t" (id int PRIMARY KEY, name text);
INSERT INTO :"t" VALUES (1, 'one') \; INSERT INTO :"t" VALUES (2, 'two') \; UPDATE :"t" SET name = 'deux' WHERE id = 2;
SELECT string_agg(id || '=' || name, ',' ORDER BY id) AS got FROM :"t" \gset
SELECT (SELECT 'FAIL: table contents ' || :'got' WHERE :'got' <> '1=one,2=deux')::int;
SELECT 1 AS a \; SELECT 2 AS b \gset
SELECT (SELECT 'FAIL: \gset after a two-statement query gave b=' || :'b' WHERE :'b' <> '2')::int;
-- \gexec: statements produced by a query.
SELECT format('INSERT INTO %I VALUES (%s, %L)', :'t', g, 'g' || g) FROM generate_series(3, 5) g \gexec
SELECT count(*) AS n FROM :"t" \gset
SELECT (SELECT 'FAIL: rows after \gexec ' || :n WHERE :n <> 5)::int;
DROP TABLE :"t";
