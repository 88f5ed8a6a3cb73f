package ddlcapture_test

import (
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// DDL that would be replicated is refused (42501) for a role that is not
// a superuser, wherever it runs, unless the agent trusts every role; DDL
// on temporary objects is not replicated and is allowed.
func TestDDLOfARoleThatIsNotASuperuserIsRefused(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE ROLE app LOGIN; GRANT CREATE ON SCHEMA public TO app;
		CREATE TABLE owned (id int PRIMARY KEY, v int); ALTER TABLE owned OWNER TO app;
		CREATE FUNCTION make_table() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN CREATE TABLE made_by_definer (id int); END$$`)
	f.captured()
	app := connectAs(t, f, "app")
	for _, sql := range []string{
		`CREATE TABLE app_t (id int)`,
		`ALTER TABLE owned ADD COLUMN w int`,
		`CREATE INDEX ON owned (v)`,
		`CREATE INDEX CONCURRENTLY owned_v ON owned (v)`, // refused before it builds anything
		`GRANT SELECT ON owned TO PUBLIC`,
		`COMMENT ON TABLE owned IS 'x'`,
		`DO $$BEGIN CREATE TABLE in_do (id int); END$$`,
		`ALTER ROLE app SET work_mem = '1MB'`, // fires no event trigger
		`DROP TABLE owned`,
	} {
		e := f.fail(app, sql, pgcode.InsufficientPrivilege)
		if !strings.Contains(e.Message, `role "app" is not one`) {
			t.Errorf("%s: %s", sql, e.Message)
		}
	}
	if n := scalar[int64](t, f.c, `SELECT count(*) FROM pg_indexes WHERE tablename = 'owned'`); n != 1 {
		t.Errorf("owned has %d indexes after the refusals, want its primary key only", n)
	}
	f.expectCaptured("refused DDL")

	// Temporary objects, and a superuser's function, are fine.
	f.exec(app, `CREATE TEMP TABLE mine (id int); CREATE INDEX ON mine (id); DROP TABLE mine`)
	f.exec(app, `SELECT make_table()`)
	f.expectCaptured("temporary objects, then a SECURITY DEFINER function of a superuser", `CREATE TABLE made_by_definer (id int)`)

	// Once the agent trusts every role.
	f.exec(f.c, `INSERT INTO tashkent.ddl_trust (trust_roles) VALUES (true)`)
	f.exec(app, `CREATE TABLE app_t (id int)`)
	f.expectCaptured("trusted roles", `CREATE TABLE app_t (id int)`)
}
