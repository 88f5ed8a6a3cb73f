package ddlcapture_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Features whose effect would stay on one replica are refused with
// 0A000, as statements and as function calls wherever the executor runs
// them: SQL, PL/pgSQL, views, prepared statements.
func TestUnreplicatedFeaturesAreRefused(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY); CREATE SEQUENCE s; PREPARE q AS SELECT 1 AS x`)
	f.captured()
	for _, sql := range []string{
		`LISTEN ch`,
		`NOTIFY ch, 'payload'`,
		`SELECT pg_notify('ch', 'payload')`,
		`SELECT lo_creat(-1)`,
		`SELECT lo_create(0)`,
		`SELECT lo_from_bytea(0, '\x00')`,
		`SELECT lo_import('/etc/hostname')`,
		`SELECT lo_get(1)`,
		`SELECT lo_unlink(1)`,
		`COMMENT ON LARGE OBJECT 1 IS 'x'`,
		`GRANT SELECT ON LARGE OBJECT 1 TO PUBLIC`,
		`ALTER LARGE OBJECT 1 OWNER TO postgres`,
		`SELECT pg_advisory_lock(1)`,
		`SELECT pg_advisory_xact_lock(1, 2)`,
		`SELECT pg_try_advisory_lock_shared(1)`,
		`SELECT pg_advisory_unlock_all()`,
		`SELECT setval('s', 10)`,
		`SELECT setval('s', 10, false)`,
		`SELECT pg_catalog.setval('s'::regclass, 10)`,
		`SELECT id FROM t WHERE pg_try_advisory_xact_lock(id)`,
		`SELECT count(*) FROM (SELECT pg_notify('ch', x::text) FROM generate_series(1, 3) AS x) AS s`,
		`DO $$BEGIN PERFORM pg_advisory_xact_lock(7); END$$`,
		`DO $$DECLARE v bigint; BEGIN v := setval('s', 3); END$$`,
		`DO $$BEGIN EXECUTE 'NOTIFY ch'; END$$`,
		`CREATE TABLE made AS EXECUTE q`,
		`PREPARE p2 AS SELECT 1 AS x INTO made`,
		`EXPLAIN ANALYZE CREATE TABLE made AS SELECT 1 AS x`,
		`EXPLAIN (ANALYZE) SELECT 1 AS x INTO made`,
	} {
		e := f.fail(f.c, sql, pgcode.FeatureNotSupported)
		if e.Hint == "" {
			t.Errorf("%s: no hint", sql)
		}
	}

	// Hidden in a function or a view, the call is refused all the same.
	f.exec(f.c, `CREATE FUNCTION locker(k bigint) RETURNS void LANGUAGE plpgsql AS $$BEGIN PERFORM pg_advisory_lock(k); END$$;
		CREATE VIEW locked AS SELECT pg_try_advisory_lock(1) AS got`)
	f.captured()
	f.fail(f.c, `SELECT locker(1)`, pgcode.FeatureNotSupported)
	f.fail(f.c, `SELECT * FROM locked`, pgcode.FeatureNotSupported)
	// An operator is a function call too (OpExpr), and so is a prepared
	// statement's.
	f.exec(f.c, `CREATE OPERATOR ### (FUNCTION = pg_try_advisory_lock, LEFTARG = int, RIGHTARG = int)`)
	f.fail(f.c, `SELECT 1 ### 2`, pgcode.FeatureNotSupported)
	if _, err := f.c.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, 5); err == nil || !strings.Contains(err.Error(), pgcode.FeatureNotSupported) {
		t.Errorf("extended protocol: pg_advisory_lock($1): %v, want 0A000", err)
	}
	f.captured()

	// Harmless and allowed: UNLISTEN; a temporary table from EXECUTE; EXPLAIN
	// without ANALYZE; nextval and ALTER SEQUENCE ... RESTART.
	f.exec(f.c, `UNLISTEN *; CREATE TEMP TABLE tq AS EXECUTE q; EXPLAIN CREATE TABLE plan AS SELECT 1`)
	f.exec(f.c, `SELECT nextval('s'); ALTER SEQUENCE s RESTART WITH 100`)
	f.expectCaptured("allowed statements", `ALTER SEQUENCE s RESTART WITH 100`)

	// Maintenance lets them through (on this replica only).
	f.exec(f.c, `SET tashkent.maintenance = on; SELECT setval('s', 5); SELECT pg_advisory_lock(1); SELECT pg_advisory_unlock(1); RESET tashkent.maintenance`)
	f.expectCaptured("maintenance")
}

// INSERT, UPDATE, DELETE and COPY FROM on a system catalog are refused
// (42501), superusers included, unless tashkent.maintenance is on.
func TestCatalogWritesAreRefused(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY)`)
	f.captured()
	for _, sql := range []string{
		`UPDATE pg_trigger SET tgenabled = 'D'`,
		`UPDATE pg_catalog.pg_class SET relhastriggers = false WHERE oid = 't'::regclass`,
		`DELETE FROM pg_description WHERE false`,
		`INSERT INTO pg_description SELECT * FROM pg_description WHERE false`,
		`WITH x AS (UPDATE pg_trigger SET tgenabled = 'D' RETURNING 1) SELECT count(*) FROM x`,
		`DO $$BEGIN UPDATE pg_event_trigger SET evtenabled = 'D'; END$$`,
		`COPY pg_description FROM STDIN`,
	} {
		e := f.fail(f.c, sql, pgcode.InsufficientPrivilege)
		if !strings.Contains(e.Message, "system catalog") {
			t.Errorf("%s: %s", sql, e.Message)
		}
	}
	f.exec(f.c, `SELECT count(*) FROM pg_trigger; SELECT * FROM pg_class FOR UPDATE LIMIT 1; EXPLAIN UPDATE pg_trigger SET tgenabled = 'D'`)
	f.exec(f.c, `SET tashkent.maintenance = on; UPDATE pg_description SET description = description WHERE false; RESET tashkent.maintenance`)
	f.exec(f.c, `UPDATE t SET id = id`)
	f.expectCaptured("catalog writes")
}

// The read path stays cheap: a SELECT, and BEGIN/COMMIT/SET/SHOW around
// it, make no catalog lookup for tashkent (the one lookup the hooks could
// make, tk_database_replicated, scans pg_extension's name index; DDL does,
// which shows the measure works).
func TestReadsMakeNoCatalogLookup(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)`)
	const scans = `SELECT pg_stat_get_xact_numscans('pg_extension_name_index'::regclass)`
	f.exec(f.c, `BEGIN`)
	before := scalar[int64](t, f.c, scans)
	for i := 0; i < 20; i++ {
		f.exec(f.c, `SELECT abs(v) + 1, now() FROM t WHERE id = 1; SHOW work_mem; SET LOCAL work_mem = '8MB'; SAVEPOINT s; RELEASE s`)
		if scalar[int32](t, f.c, `SELECT v FROM t WHERE id = $1`, 1) != 1 {
			t.Fatal("wrong row")
		}
	}
	if after := scalar[int64](t, f.c, scans); after != before {
		t.Errorf("reads scanned pg_extension's name index %d times", after-before)
	}
	f.exec(f.c, `CREATE TEMP TABLE x (id int)`)
	if after := scalar[int64](t, f.c, scans); after == before {
		t.Errorf("a DDL statement did not scan pg_extension's name index: the measure shows nothing")
	}
	f.exec(f.c, `COMMIT`)
}
