-- statement_timeout: the server cancels a statement that runs too long (57014).
SET statement_timeout = 200;
SELECT clock_timestamp() AS started \gset
\set ON_ERROR_STOP 0
SELECT pg_sleep(5);
\set ON_ERROR_STOP 1
SELECT (SELECT 'FAIL: pg_sleep(5) gave ' || :'LAST_ERROR_SQLSTATE' WHERE :'LAST_ERROR_SQLSTATE' <> '57014')::int;
SELECT (SELECT 'FAIL: the timeout took ' || (clock_timestamp() - :'started')
        WHERE clock_timestamp() - :'started' > interval '3 seconds')::int;
RESET statement_timeout;
SHOW statement_timeout \gset
SELECT (SELECT 'FAIL: statement_timeout after RESET is ' || :'statement_timeout' WHERE :'statement_timeout' <> '0')::int;
