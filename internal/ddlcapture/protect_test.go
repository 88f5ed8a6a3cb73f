package ddlcapture_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Statements that would switch replication off are refused with 42501,
// superusers included, unless tashkent.maintenance is on; setting it on
// is logged.
func TestReplicationProtectsItself(t *testing.T) {
	f := start(t)
	// The tables get their capture triggers (tashkent_capture and
	// tashkent_capture_truncate) when they are created.
	f.exec(f.c, `SET tashkent.maintenance = on;
		CREATE TABLE t (id int PRIMARY KEY);
		CREATE TABLE part (id int) PARTITION BY RANGE (id);
		CREATE TABLE part1 PARTITION OF part FOR VALUES FROM (0) TO (10);
		CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
		CREATE TRIGGER mine AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION noop();
		RESET tashkent.maintenance`)
	f.captured()
	refused := []string{
		`ALTER TABLE t DISABLE TRIGGER tashkent_capture`,
		`ALTER TABLE t DISABLE TRIGGER ALL`,
		`ALTER TABLE t DISABLE TRIGGER USER`,
		`ALTER TABLE t ENABLE TRIGGER ALL`,
		`ALTER TABLE t ENABLE REPLICA TRIGGER tashkent_capture`,
		`ALTER TABLE t ENABLE ALWAYS TRIGGER tashkent_capture`,
		`ALTER TABLE part DISABLE TRIGGER ALL`, // reaches its partition's
		`DROP TRIGGER tashkent_capture ON t`,
		`ALTER TRIGGER tashkent_capture ON t RENAME TO other`,
		`ALTER TRIGGER mine ON t RENAME TO tashkent_capture_x`,
		`DO $$BEGIN EXECUTE 'DROP TRIGGER tashkent_capture ON t'; END$$`,
		`ALTER EVENT TRIGGER tashkent_ddl_command_end DISABLE`,
		`ALTER EVENT TRIGGER tashkent_ddl_sql_drop ENABLE REPLICA`,
		`ALTER EVENT TRIGGER tashkent_sequences RENAME TO other`,
		`DROP EVENT TRIGGER tashkent_ddl_command_end`,
		`DROP EXTENSION tashkent`,
		`DROP SCHEMA tashkent CASCADE`,
		`ALTER SCHEMA tashkent RENAME TO other`,
		`ALTER EXTENSION tashkent DROP FUNCTION tashkent.check_ddl_generation(bigint)`,
	}
	for _, sql := range refused {
		f.fail(f.c, sql, pgcode.InsufficientPrivilege)
	}
	// A user's own trigger, by name.
	f.exec(f.c, `ALTER TABLE t DISABLE TRIGGER mine; ALTER TABLE t ENABLE TRIGGER mine;
		CREATE TABLE plain (id int); CREATE TRIGGER x AFTER INSERT ON plain FOR EACH ROW EXECUTE FUNCTION noop();
		ALTER TABLE plain DISABLE TRIGGER x`)
	f.expectCaptured("a user's triggers", `ALTER TABLE t DISABLE TRIGGER mine`, `ALTER TABLE t ENABLE TRIGGER mine`,
		`CREATE TABLE plain (id int)`, `CREATE TRIGGER x AFTER INSERT ON plain FOR EACH ROW EXECUTE FUNCTION noop()`,
		`ALTER TABLE plain DISABLE TRIGGER x`)

	// With maintenance on they run, on this replica only, and the SET is
	// logged. (A capture trigger disabled so is put back ENABLE ALWAYS at
	// once by the capture's event trigger, whoever runs the DDL.)
	f.exec(f.c, `SET tashkent.maintenance = on; ALTER TABLE t DISABLE TRIGGER tashkent_capture;
		ALTER TABLE t ENABLE TRIGGER tashkent_capture; ALTER EVENT TRIGGER tashkent_sequences DISABLE;
		RESET tashkent.maintenance`)
	if scalar[string](t, f.c, `SELECT evtenabled::text FROM pg_event_trigger WHERE evtname = 'tashkent_sequences'`) != "D" {
		t.Errorf("the maintenance statements did not run")
	}
	f.exec(f.c, `SET tashkent.maintenance = on; ALTER EVENT TRIGGER tashkent_sequences ENABLE ALWAYS; RESET tashkent.maintenance`)
	f.expectCaptured("maintenance")
	if !waitLog(t, f, `tashkent.maintenance set on by role "postgres"`, 3) {
		t.Errorf("SET tashkent.maintenance = on was not logged (three times)")
	}
	if scalar[string](t, f.c, `SELECT tgenabled::text FROM pg_trigger WHERE tgname = 'tashkent_capture' AND tgrelid = 't'::regclass`) != "A" {
		t.Errorf("the capture trigger was left other than ENABLE ALWAYS")
	}
	// Nobody else may set it.
	f.exec(f.c, `CREATE ROLE app LOGIN; GRANT CREATE ON SCHEMA public TO app`)
	app := connectAs(t, f, "app")
	f.fail(app, `SET tashkent.maintenance = on`, pgcode.InsufficientPrivilege)
}

// waitLog waits for n lines of the server's log to contain s.
func waitLog(t *testing.T, f *fixture, s string, n int) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(f.a.Server.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(b), s) >= n {
			return true
		}
	}
	return false
}
