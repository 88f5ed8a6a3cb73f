-- collect_writeset before the capture cost work (sql.go as of commit 756a0fb); see capture_v0.sql.
CREATE OR REPLACE FUNCTION tashkent.collect_writeset()
RETURNS TABLE (tbl text, op text, key text, "row" text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
	v_stale bigint;
BEGIN
	DELETE FROM pg_temp.tashkent_writeset AS w
	WHERE w.xid IS DISTINCT FROM pg_current_xact_id_if_assigned();
	GET DIAGNOSTICS v_stale = ROW_COUNT;
	IF v_stale > 0 THEN
		RAISE WARNING 'tashkent: discarded % writeset rows of an earlier transaction that committed without collecting them', v_stale;
	END IF;
	RETURN QUERY
		WITH d AS (DELETE FROM pg_temp.tashkent_writeset RETURNING *)
		SELECT d.tbl, d.op, d.key, d.row FROM d ORDER BY d.seq;
	IF pg_relation_size('pg_temp.tashkent_writeset') > 1048576 THEN
		TRUNCATE pg_temp.tashkent_writeset;
	END IF;
END
$fn$;
