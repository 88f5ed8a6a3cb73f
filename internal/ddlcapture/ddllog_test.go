package ddlcapture_test

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// tashkent.ddl_log gets a row for each DDL command that changes a
// permanent object, in every session (the applier's too), so that the
// applier's cached table definitions are checked with
// tashkent.check_ddl_generation(gen) (TK001 when stale).
func TestDDLGenerationLog(t *testing.T) {
	f := start(t)
	gen := func() int64 { return scalar[int64](t, f.c, `SELECT coalesce(max(gen), 0) FROM tashkent.ddl_log`) }
	g0 := gen()
	f.exec(f.c, `SELECT tashkent.check_ddl_generation(`+itoa(g0)+`)`)
	f.exec(f.c, `CREATE TEMP TABLE tmp (id int); ALTER TABLE tmp ADD COLUMN v int; DROP TABLE tmp`)
	if gen() != g0 {
		t.Errorf("DDL on temporary objects changed the generation")
	}
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY)`)
	g1 := gen()
	if g1 <= g0 {
		t.Fatalf("CREATE TABLE left the generation at %d", g1)
	}
	f.fail(f.c, `SELECT tashkent.check_ddl_generation(`+itoa(g0)+`)`, pgcode.DDLGenerationChanged)
	f.exec(f.c, `DROP TABLE t`)
	if gen() <= g1 {
		t.Errorf("DROP TABLE left the generation at %d", g1)
	}

	applier := f.a.Connect("postgres")
	f.a.RegisterApplier(applier)
	g2 := gen()
	v := scalar[int64](t, f.c, `SELECT tashkent.committed_version()`) + 1
	f.exec(applier, `BEGIN; SELECT tashkent.apply_versions(`+itoa(v)+`, `+itoa(v)+`); CREATE TABLE applied (id int); COMMIT`)
	if gen() <= g2 {
		t.Errorf("the applier's DDL left the generation at %d", g2)
	}
	f.expectCaptured("DDL", `CREATE TABLE t (id int PRIMARY KEY)`, `DROP TABLE t`)
}
