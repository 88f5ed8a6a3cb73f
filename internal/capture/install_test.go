package capture_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// triggers lists the tashkent triggers of every table in the database:
// "table trigger enabled".
func (f *fixture) triggers(db string) []string {
	f.t.Helper()
	conn := f.conn
	if db != "postgres" {
		conn = f.agent.Connect(db)
	}
	return f.query(conn, `SELECT c.relname || ' ' || t.tgname || ' ' || t.tgenabled::text
		FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		WHERE t.tgfoid = 'tashkent.capture()'::regprocedure ORDER BY 1`)
}

// Every permanent table gets exactly the two capture triggers, ENABLE
// ALWAYS: those there at CREATE EXTENSION, and those created or changed
// later, by any role.
func TestTriggerInstallation(t *testing.T) {
	ctx := context.Background()
	f := start(t,
		`CREATE DATABASE other`,
		`CREATE ROLE app`,
		`GRANT CREATE ON SCHEMA public TO app`,
		`INSERT INTO tashkent.ddl_trust (trust_roles) VALUES (true)`) // app's DDL is replicated
	other := f.agent.Connect("other")
	f.exec(other, `CREATE TABLE before (id int PRIMARY KEY)`)
	f.exec(other, `CREATE TABLE before_nopk (a int)`)
	f.exec(other, `CREATE TABLE before_root (id int PRIMARY KEY) PARTITION BY RANGE (id)`)
	f.exec(other, `CREATE TABLE before_part PARTITION OF before_root FOR VALUES FROM (0) TO (10)`)
	f.exec(other, `CREATE EXTENSION tashkent`)
	want := []string{
		"before tashkent_capture A", "before tashkent_capture_truncate A",
		"before_nopk tashkent_capture A", "before_nopk tashkent_capture_truncate A",
		"before_part tashkent_capture A", "before_part tashkent_capture_truncate A",
	}
	if got := f.triggers("other"); !slices.Equal(got, want) {
		t.Errorf("after CREATE EXTENSION:\n got  %q\n want %q", got, want)
	}

	for _, sql := range []string{
		`CREATE TABLE plain (id int PRIMARY KEY)`,
		`CREATE TABLE ctas AS SELECT 1 AS id`,
		`SELECT 1 AS id INTO selinto`,
		`CREATE UNLOGGED TABLE unlogged (id int PRIMARY KEY)`,
		`CREATE TABLE root (id int PRIMARY KEY) PARTITION BY RANGE (id)`,
		`CREATE TABLE part1 PARTITION OF root FOR VALUES FROM (0) TO (10)`,
		`CREATE TABLE part2 (id int PRIMARY KEY)`,
		`ALTER TABLE root ATTACH PARTITION part2 FOR VALUES FROM (10) TO (20)`,
		`ALTER TABLE root DETACH PARTITION part1`,
		`CREATE TEMP TABLE temp (id int PRIMARY KEY)`,
		`SET tashkent.maintenance = on; CREATE TABLE tashkent.internal (id int PRIMARY KEY); RESET tashkent.maintenance`,
		`CREATE MATERIALIZED VIEW mv AS SELECT 1`,
		`SET ROLE app; CREATE TABLE owned (id int PRIMARY KEY); RESET ROLE`,
	} {
		// The DDL itself is replicated (internal/ddlcapture); the triggers
		// its event trigger installs are not.
		for _, w := range f.writesets(f.conn, sql) {
			for _, c := range w {
				if !strings.HasPrefix(c, "DDL ") || strings.Contains(c, "TRIGGER") {
					t.Errorf("%s certified %q", sql, c)
				}
			}
		}
	}
	want = nil
	for _, table := range []string{"ctas", "owned", "part1", "part2", "plain", "selinto", "unlogged"} {
		want = append(want, table+" tashkent_capture A", table+" tashkent_capture_truncate A")
	}
	if got := f.triggers("postgres"); !slices.Equal(got, want) {
		t.Errorf("after DDL:\n got  %q\n want %q", got, want)
	}

	// The new tables' writes are captured, a role's included; that role
	// cannot manage the triggers itself.
	f.expect(`INSERT INTO ctas VALUES (2)`, `INSERT_ROW public.ctas (2)`)
	f.exec(f.conn, `ALTER TABLE ctas ADD PRIMARY KEY (id)`)
	f.expect(`INSERT INTO ctas VALUES (3)`, `UPSERT public.ctas [3] (3)`)
	f.expect(`SET ROLE app; INSERT INTO owned VALUES (1); RESET ROLE`, `UPSERT public.owned [1] (1)`)
	for _, sql := range []string{
		`SET ROLE app; SELECT tashkent.ensure_capture('owned'::regclass)`,
		`SET ROLE app; DROP TRIGGER tashkent_capture ON owned`,
		`SET ROLE app; DROP TRIGGER tashkent_capture_truncate ON owned`,
	} {
		if _, err := f.conn.Exec(ctx, sql); pgcode.Of(err) != pgcode.InsufficientPrivilege {
			t.Errorf("%s: %v, want 42501", sql, err)
		}
		f.exec(f.conn, `RESET ROLE`)
	}
	// Renaming or disabling a capture trigger is refused (ddl.c's
	// protections); the table's owner may drop the table.
	for _, sql := range []string{
		`SET ROLE app; ALTER TRIGGER tashkent_capture ON owned RENAME TO mine`,
		`ALTER TABLE owned DISABLE TRIGGER tashkent_capture`,
		`ALTER TABLE owned ENABLE REPLICA TRIGGER tashkent_capture_truncate`,
	} {
		if _, err := f.conn.Exec(ctx, sql); pgcode.Of(err) != pgcode.InsufficientPrivilege {
			t.Errorf("%s: %v, want 42501", sql, err)
		}
		f.exec(f.conn, `RESET ROLE`)
	}
	f.exec(f.conn, `SET ROLE app; CREATE TABLE gone (id int PRIMARY KEY); DROP TABLE gone; RESET ROLE`)
	if got := f.triggers("postgres"); !slices.Equal(got, want) {
		t.Errorf("after the owner's attempts:\n got  %q\n want %q", got, want)
	}
}
