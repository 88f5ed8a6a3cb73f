-- connect: authenticated as PGUSER, to PGDATABASE, on a PostgreSQL 15 server.
SELECT (SELECT 'FAIL: current_user is ' || current_user WHERE current_user <> :'USER')::int;
SELECT (SELECT 'FAIL: current_database() is ' || current_database() WHERE current_database() <> :'DBNAME')::int;
SELECT (SELECT 'FAIL: server_version_num is ' || current_setting('server_version_num')
        WHERE current_setting('server_version_num')::int / 10000 <> 15)::int;
-- psql's SERVER_VERSION_NUM comes from the server_version ParameterStatus.
SELECT (SELECT 'FAIL: psql SERVER_VERSION_NUM is ' || :'SERVER_VERSION_NUM' WHERE :SERVER_VERSION_NUM / 10000 <> 15)::int;
