-- large_result: 100,000 rows in one result.
\o /dev/null
SELECT g, md5(g::text) FROM generate_series(1, 100000) g;
\o
SELECT (SELECT 'FAIL: rows ' || :'ROW_COUNT' WHERE :ROW_COUNT <> 100000)::int;
SELECT count(*) AS n, sum(length(h)) AS l FROM (SELECT md5(g::text) AS h FROM generate_series(1, 100000) g) s \gset
SELECT (SELECT 'FAIL: aggregate ' || :n || ' ' || :l WHERE (:n, :l) <> (100000, 3200000))::int;
