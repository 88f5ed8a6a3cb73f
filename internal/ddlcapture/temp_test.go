package ddlcapture_test

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// DDL that touches temporary objects only stays on this replica: judged
// by what the statement touched in the catalog, not by its text.
func TestDDLOnTemporaryObjectsStaysLocal(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE perm (id int PRIMARY KEY, v int); CREATE TYPE perm_t AS (a int)`)
	f.captured()
	for _, sql := range []string{
		`CREATE TEMP TABLE tmp (id int PRIMARY KEY, v int)`,
		`CREATE TABLE pg_temp.tmp2 (id int)`,
		`CREATE TEMP TABLE IF NOT EXISTS tmp (id int)`, // exists: reports nothing, declared TEMP
		`CREATE TEMP VIEW tv AS SELECT 1 AS x`,
		`CREATE VIEW implicit_tv AS SELECT * FROM tmp`, // PostgreSQL makes it temporary
		`CREATE TEMP SEQUENCE ts`,
		`ALTER SEQUENCE ts RESTART WITH 5`,
		`CREATE INDEX ON tmp (v)`,
		`CREATE UNIQUE INDEX tmp_v ON tmp (v)`,
		`ALTER TABLE tmp ADD COLUMN w text`,
		`ALTER TABLE tmp RENAME COLUMN w TO w2`,
		`CREATE FUNCTION pg_temp.trg() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$`,
		`CREATE TRIGGER tt BEFORE INSERT ON tmp FOR EACH ROW EXECUTE FUNCTION pg_temp.trg()`,
		`ALTER TABLE tmp DISABLE TRIGGER ALL`,
		`CREATE POLICY tp ON tmp USING (true)`,
		`CREATE RULE tr AS ON DELETE TO tmp DO INSTEAD NOTHING`,
		`CREATE STATISTICS tstat ON id, v FROM tmp`, // in schema public, of a temporary table
		`COMMENT ON TABLE tmp IS 'temporary'`,
		`COMMENT ON COLUMN tmp.v IS 'a column'`,
		`COMMENT ON TRIGGER tt ON tmp IS 'a trigger'`,
		`GRANT SELECT ON tmp TO PUBLIC`,
		`REVOKE SELECT ON tmp FROM PUBLIC`,
		`CREATE TYPE pg_temp.tty AS (a int)`,
		`GRANT USAGE ON TYPE pg_temp.tty TO PUBLIC`,
		`CREATE TEMP TABLE tlike (LIKE perm)`,
		`CREATE TEMP TABLE tctas AS SELECT * FROM perm`,
		`SELECT * INTO TEMP tinto FROM perm`,
		`EXPLAIN ANALYZE CREATE TEMP TABLE texplain AS SELECT 1`,
		`DROP STATISTICS tstat`,
		`DROP RULE tr ON tmp`,
		`DROP POLICY tp ON tmp`,
		`DROP TRIGGER tt ON tmp`,
		`DROP INDEX tmp_v`,
		`ALTER TABLE tmp DROP COLUMN w2`,
		`DROP VIEW implicit_tv, tv`,
		`DROP FUNCTION pg_temp.trg()`,
		`DROP TABLE tmp, tmp2`,
		`SET search_path = pg_temp, public; CREATE TABLE unqualified (id int); DROP TABLE unqualified; RESET search_path`,
	} {
		f.exec(f.c, sql)
		if got := f.captured(); len(got) != 0 {
			t.Errorf("%s: captured %q, want nothing (temporary objects only)", sql, got)
		}
	}

	// A permanent table shadowed by a temporary one of the same name: the
	// statement acts on the temporary one.
	f.exec(f.c, `CREATE TEMP TABLE perm (id int)`)
	f.exec(f.c, `ALTER TABLE perm ADD COLUMN shadow int`)
	f.expectCaptured("ALTER TABLE of a shadowing temporary table")
	f.exec(f.c, `ALTER TABLE public.perm ADD COLUMN real int`)
	f.expectCaptured("ALTER TABLE of the permanent table", `ALTER TABLE public.perm ADD COLUMN real int`)
}

// DDL that acts on temporary and permanent objects at once is refused:
// neither running it here alone nor on every replica is right.
func TestDDLOnTemporaryAndPermanentObjectsIsRefused(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE perm (id int); CREATE TABLE perm2 (id int); CREATE TEMP TABLE tmp (id int)`)
	f.captured()
	for _, sql := range []string{
		`DROP TABLE tmp, perm`,
		`GRANT SELECT ON tmp, perm TO PUBLIC`,
		// a temporary table whose query creates a permanent one
		`CREATE FUNCTION mk() RETURNS int LANGUAGE plpgsql AS $$BEGIN CREATE TABLE made (id int); RETURN 1; END$$; ` +
			`CREATE TEMP TABLE tx AS SELECT mk()`,
	} {
		f.fail(f.c, sql, pgcode.FeatureNotSupported)
	}
	f.expectCaptured("refused statements")
	if !scalar[bool](t, f.c, `SELECT to_regclass('public.perm') IS NOT NULL AND to_regclass('pg_temp.tmp') IS NOT NULL`) {
		t.Errorf("a refused DROP dropped a table")
	}
}

// A permanent object whose text names a temporary one is refused: the
// other replicas would run the text without it.
func TestPermanentObjectNamingATemporaryOneIsRefused(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE perm (id int); CREATE TEMP TABLE tmp (id int); CREATE TEMP SEQUENCE tseq; CREATE TYPE pg_temp.tty AS (a int)`)
	f.captured()
	for _, sql := range []string{
		`CREATE TABLE copy AS SELECT * FROM tmp`,
		`CREATE TABLE copy AS SELECT * FROM perm WHERE id IN (SELECT id FROM tmp)`,
		`SELECT * INTO copy FROM tmp`,
		`CREATE TABLE shaped (LIKE tmp)`,
		`CREATE TABLE typed (a pg_temp.tty)`,
		`CREATE TABLE defaulted (id bigint DEFAULT nextval('tseq'))`,
		`ALTER TABLE perm ADD COLUMN n bigint DEFAULT nextval('tseq')`,
		`CREATE FUNCTION reads() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM tmp; END`,
		`CREATE TEMP TABLE child () INHERITS (perm)`,
		`CREATE TEMP TABLE child2 (id int); ALTER TABLE child2 INHERIT perm`,
	} {
		f.fail(f.c, sql, pgcode.FeatureNotSupported)
	}
	f.expectCaptured("refused statements")
}
