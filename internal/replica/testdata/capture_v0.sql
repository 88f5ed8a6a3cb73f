-- The writeset capture functions as they were before the capture cost work
-- (sql.go as of commit 756a0fb), the reference TestCaptureSameEventsAsBefore compares
-- today's capture with: same events, same key and row text, same order.
-- FUNCNAME stands for the function the test replaces with this body.
CREATE OR REPLACE FUNCTION FUNCNAME() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET IntervalStyle = 'postgres'
SET bytea_output = 'hex'
SET DateStyle = 'ISO, YMD'
SET extra_float_digits = '1'
AS $fn$
DECLARE
	v_tbl text := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
	v_sep int := array_position(TG_ARGV, '');
	v_pk text[] := CASE WHEN v_sep IS NULL THEN TG_ARGV ELSE TG_ARGV[0:v_sep - 1] END;
	v_pk1 text := TG_ARGV[0];
	v_one boolean := coalesce(v_sep, TG_NARGS) = 1;
	v_rows boolean;
	v_1lab text[];
	v_1flag text[];
	v_1col text[];
	v_nlab text[];
	v_nflag text[];
	v_nst int[];
	v_nn int[];
	v_ncol text[];
	v_i int;
	v_n int;
BEGIN
	IF current_setting('tashkent.capture', true) IS DISTINCT FROM 'on' THEN
		IF TG_OP = 'TRUNCATE' THEN
			v_rows := true;
		ELSIF TG_OP = 'INSERT' THEN
			v_rows := EXISTS (SELECT FROM tashkent_new);
		ELSE
			v_rows := EXISTS (SELECT FROM tashkent_old);
		END IF;
		IF v_rows THEN
			RAISE EXCEPTION USING
				ERRCODE = '55000',
				MESSAGE = format('cannot %s %s: writes must go through the tashkent proxy',
					CASE TG_OP WHEN 'INSERT' THEN 'insert into' WHEN 'DELETE' THEN 'delete from' ELSE lower(TG_OP) END, v_tbl),
				DETAIL = 'This session did not set up tashkent''s writeset capture, so the change would not reach the other replicas.',
				HINT = 'Connect to the tashkent proxy instead of to PostgreSQL directly; writes must go through the tashkent proxy.';
		END IF;
		RETURN NULL;
	END IF;

	IF TG_OP = 'INSERT' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
		SELECT v_tbl, 'U', CASE WHEN v_one THEN '[' || (s.j -> v_pk1)::text || ']'
	ELSE '[' || array_to_string(ARRAY(
		SELECT (s.j -> u.c)::text FROM unnest(v_pk) WITH ORDINALITY AS u(c, o) ORDER BY u.o), ',') || ']' END, s.r
		FROM (SELECT to_json(tashkent_n.*) AS j, (tashkent_n.*)::text AS r FROM tashkent_new AS tashkent_n) AS s;
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
		WITH nw AS (
			SELECT CASE WHEN v_one THEN '[' || (s.j -> v_pk1)::text || ']'
	ELSE '[' || array_to_string(ARRAY(
		SELECT (s.j -> u.c)::text FROM unnest(v_pk) WITH ORDINALITY AS u(c, o) ORDER BY u.o), ',') || ']' END AS k, s.r
			FROM (SELECT to_json(tashkent_n.*) AS j, (tashkent_n.*)::text AS r FROM tashkent_new AS tashkent_n) AS s
		), od AS (
			SELECT CASE WHEN v_one THEN '[' || (s.j -> v_pk1)::text || ']'
	ELSE '[' || array_to_string(ARRAY(
		SELECT (s.j -> u.c)::text FROM unnest(v_pk) WITH ORDINALITY AS u(c, o) ORDER BY u.o), ',') || ']' END AS k
			FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
		)
		SELECT v_tbl, 'D', od.k, NULL FROM od WHERE NOT EXISTS (SELECT FROM nw WHERE nw.k = od.k)
		UNION ALL
		SELECT v_tbl, 'U', nw.k, nw.r FROM nw;
	ELSIF TG_OP = 'DELETE' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT v_tbl, 'D', CASE WHEN v_one THEN '[' || (s.j -> v_pk1)::text || ']'
	ELSE '[' || array_to_string(ARRAY(
		SELECT (s.j -> u.c)::text FROM unnest(v_pk) WITH ORDINALITY AS u(c, o) ORDER BY u.o), ',') || ']' END
		FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s;
	ELSIF TG_OP = 'TRUNCATE' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op) VALUES (v_tbl, 'T');
	END IF;
	IF v_sep IS NULL OR TG_OP = 'TRUNCATE' THEN
		RETURN NULL;
	END IF;

	-- Single-column unique indexes.
	v_n := TG_ARGV[v_sep + 1]::int;
	IF v_n > 0 THEN
		v_1lab := TG_ARGV[v_sep + 2:v_sep + 1 + v_n];
		v_1flag := TG_ARGV[v_sep + 2 + v_n:v_sep + 1 + 2 * v_n];
		v_1col := TG_ARGV[v_sep + 2 + 2 * v_n:v_sep + 1 + 3 * v_n];
		IF TG_OP = 'INSERT' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT uk.tbl, 'K', uk.key
		FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
		CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, '[' || (s.j -> u.col)::text || ']' AS key
	FROM unnest(v_1lab, v_1flag, v_1col) AS u(lab, flag, col)
	WHERE NOT (u.flag = 's' AND (s.j -> u.col)::text = 'null')) AS uk;
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT coalesce(nu.tbl, ou.tbl), 'K', coalesce(nu.key, ou.key)
		FROM (SELECT uk.tbl, uk.key
			FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
			CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, '[' || (s.j -> u.col)::text || ']' AS key
	FROM unnest(v_1lab, v_1flag, v_1col) AS u(lab, flag, col)
	WHERE NOT (u.flag = 's' AND (s.j -> u.col)::text = 'null')) AS uk) AS nu
		FULL JOIN (SELECT uk.tbl, uk.key
			FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
			CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, '[' || (s.j -> u.col)::text || ']' AS key
	FROM unnest(v_1lab, v_1flag, v_1col) AS u(lab, flag, col)
	WHERE NOT (u.flag = 's' AND (s.j -> u.col)::text = 'null')) AS uk) AS ou
		ON ou.tbl = nu.tbl AND ou.key = nu.key
		WHERE nu.key IS NULL OR ou.key IS NULL;
	ELSE
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT uk.tbl, 'K', uk.key
		FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
		CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, '[' || (s.j -> u.col)::text || ']' AS key
	FROM unnest(v_1lab, v_1flag, v_1col) AS u(lab, flag, col)
	WHERE NOT (u.flag = 's' AND (s.j -> u.col)::text = 'null')) AS uk;
	END IF;
	END IF;

	-- Wider unique indexes.
	v_i := v_sep + 2 + 3 * v_n;
	IF v_i >= TG_NARGS THEN
		RETURN NULL;
	END IF;
	WHILE v_i < TG_NARGS LOOP
		v_n := TG_ARGV[v_i + 2]::int;
		v_nlab := v_nlab || TG_ARGV[v_i];
		v_nflag := v_nflag || TG_ARGV[v_i + 1];
		v_nst := v_nst || (coalesce(cardinality(v_ncol), 0) + 1);
		v_nn := v_nn || v_n;
		v_ncol := v_ncol || TG_ARGV[v_i + 3:v_i + 2 + v_n];
		v_i := v_i + 3 + v_n;
	END LOOP;
	IF TG_OP = 'INSERT' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT uk.tbl, 'K', uk.key
		FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
		CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, x.key
	FROM unnest(v_nlab, v_nflag, v_nst, v_nn) AS u(lab, flag, st, n)
	CROSS JOIN LATERAL (
		SELECT '[' || string_agg(e.v, ',' ORDER BY e.g) || ']' AS key, bool_or(e.v = 'null') AS hasnull
		FROM (SELECT g.g, (s.j -> v_ncol[g.g])::text AS v
			FROM generate_series(u.st, u.st + u.n - 1) AS g(g)) AS e) AS x
	WHERE NOT (u.flag = 's' AND x.hasnull)) AS uk;
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT coalesce(nu.tbl, ou.tbl), 'K', coalesce(nu.key, ou.key)
		FROM (SELECT uk.tbl, uk.key
			FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
			CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, x.key
	FROM unnest(v_nlab, v_nflag, v_nst, v_nn) AS u(lab, flag, st, n)
	CROSS JOIN LATERAL (
		SELECT '[' || string_agg(e.v, ',' ORDER BY e.g) || ']' AS key, bool_or(e.v = 'null') AS hasnull
		FROM (SELECT g.g, (s.j -> v_ncol[g.g])::text AS v
			FROM generate_series(u.st, u.st + u.n - 1) AS g(g)) AS e) AS x
	WHERE NOT (u.flag = 's' AND x.hasnull)) AS uk) AS nu
		FULL JOIN (SELECT uk.tbl, uk.key
			FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
			CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, x.key
	FROM unnest(v_nlab, v_nflag, v_nst, v_nn) AS u(lab, flag, st, n)
	CROSS JOIN LATERAL (
		SELECT '[' || string_agg(e.v, ',' ORDER BY e.g) || ']' AS key, bool_or(e.v = 'null') AS hasnull
		FROM (SELECT g.g, (s.j -> v_ncol[g.g])::text AS v
			FROM generate_series(u.st, u.st + u.n - 1) AS g(g)) AS e) AS x
	WHERE NOT (u.flag = 's' AND x.hasnull)) AS uk) AS ou
		ON ou.tbl = nu.tbl AND ou.key = nu.key
		WHERE nu.key IS NULL OR ou.key IS NULL;
	ELSE
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT uk.tbl, 'K', uk.key
		FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
		CROSS JOIN LATERAL (SELECT v_tbl || '#' || u.lab AS tbl, x.key
	FROM unnest(v_nlab, v_nflag, v_nst, v_nn) AS u(lab, flag, st, n)
	CROSS JOIN LATERAL (
		SELECT '[' || string_agg(e.v, ',' ORDER BY e.g) || ']' AS key, bool_or(e.v = 'null') AS hasnull
		FROM (SELECT g.g, (s.j -> v_ncol[g.g])::text AS v
			FROM generate_series(u.st, u.st + u.n - 1) AS g(g)) AS e) AS x
	WHERE NOT (u.flag = 's' AND x.hasnull)) AS uk;
	END IF;
	RETURN NULL;
END
$fn$;
