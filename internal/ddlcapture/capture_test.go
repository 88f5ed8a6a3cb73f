package ddlcapture_test

import (
	"context"
	"testing"

	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// DDL is certified as its own text: one statement of a multi-statement
// string each, comments before it kept, white space around it not.
func TestDDLIsCapturedAsItsText(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE a (id int PRIMARY KEY)`)
	f.expectCaptured("one statement", `CREATE TABLE a (id int PRIMARY KEY)`)

	f.exec(f.c, "CREATE TABLE m1 (id int);\n  -- the second\n  CREATE TABLE m2 (id int) ; SELECT 1;\n\tALTER TABLE m1 ADD COLUMN v text\n")
	reqs := f.certified()
	if len(reqs) != 1 {
		t.Fatalf("a multi-statement string (one implicit transaction) asked for %d certifications, want 1", len(reqs))
	}
	want := []string{"CREATE TABLE m1 (id int)", "-- the second\n  CREATE TABLE m2 (id int)", "ALTER TABLE m1 ADD COLUMN v text"}
	if got := ddlTexts(reqs[0]); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("multi-statement string: captured %q, want %q", got, want)
	}

	f.exec(f.c, `BEGIN; CREATE TABLE b (id int); COMMENT ON TABLE b IS 'b'; COMMIT`)
	f.expectCaptured("a transaction block", `CREATE TABLE b (id int)`, `COMMENT ON TABLE b IS 'b'`)

	// The extended protocol (a prepared statement's text is the whole of it).
	if _, err := f.c.Exec(context.Background(), `CREATE TABLE ext (id int)`); err != nil {
		t.Fatal(err)
	}
	f.expectCaptured("extended protocol", `CREATE TABLE ext (id int)`)

	// Roles are replicated (they fire no event trigger).
	f.exec(f.c, `CREATE ROLE app; GRANT pg_read_all_data TO app; ALTER ROLE app NOLOGIN`)
	f.expectCaptured("roles", `CREATE ROLE app`, `GRANT pg_read_all_data TO app`, `ALTER ROLE app NOLOGIN`)

	// A statement that found nothing to do is replicated (harmless).
	f.exec(f.c, `DROP TABLE IF EXISTS nothing_here`)
	f.expectCaptured("DROP IF EXISTS of nothing", `DROP TABLE IF EXISTS nothing_here`)

	// Local statements: no certification.
	for _, sql := range []string{
		`SET work_mem = '8MB'; SHOW work_mem; RESET work_mem; DISCARD PLANS`,
		`VACUUM a`, `ANALYZE a`, `CHECKPOINT`, `REINDEX TABLE a`, `CLUSTER`, `LOAD 'plpgsql'`,
		`BEGIN; LOCK TABLE a; SET CONSTRAINTS ALL DEFERRED; DECLARE cur CURSOR FOR SELECT 1; FETCH cur; CLOSE cur; COMMIT`,
		`PREPARE p AS SELECT 1; EXECUTE p; DEALLOCATE p`,
		`COPY a TO STDOUT`, `EXPLAIN SELECT 1`, `UNLISTEN *`, `DO $$BEGIN PERFORM 1; END$$`,
		`CREATE DATABASE other`, `ALTER DATABASE other SET work_mem = '1MB'`, `COMMENT ON DATABASE other IS 'x'`,
		`DROP DATABASE other`, `ALTER SYSTEM SET work_mem = '4MB'`,
	} {
		f.exec(f.c, sql)
	}
	if reqs := f.certified(); len(reqs) != 0 {
		t.Errorf("local statements asked for certification: %v", reqs)
	}
}

// DDL inside DO blocks, functions and procedures is captured, each
// statement as it runs; the DO, CALL or SELECT that ran it is not.
func TestDDLInsideCodeIsCaptured(t *testing.T) {
	f := start(t)
	f.exec(f.c, `DO $$BEGIN CREATE TABLE d1 (x int); EXECUTE 'CREATE TABLE d2 (x int)'; END$$`)
	f.expectCaptured("DO block", `CREATE TABLE d1 (x int)`, `CREATE TABLE d2 (x int)`)

	f.exec(f.c, `CREATE FUNCTION mk(n text) RETURNS void LANGUAGE plpgsql AS $$BEGIN EXECUTE format('CREATE TABLE %I (id int)', n); END$$`)
	f.captured()
	f.exec(f.c, `SELECT mk('f1')`)
	f.expectCaptured("PL/pgSQL function", `CREATE TABLE f1 (id int)`)

	f.exec(f.c, "CREATE FUNCTION mk_sql() RETURNS void LANGUAGE sql AS $$ CREATE TABLE s1 (id int);\n CREATE TABLE s2 (id int) $$")
	f.captured()
	f.exec(f.c, `SELECT mk_sql()`)
	f.expectCaptured("SQL function", `CREATE TABLE s1 (id int)`, `CREATE TABLE s2 (id int)`)

	f.exec(f.c, `CREATE PROCEDURE pr() LANGUAGE plpgsql AS $$BEGIN CREATE TABLE p1 (id int); END$$`)
	f.captured()
	f.exec(f.c, `CALL pr()`)
	f.expectCaptured("procedure", `CREATE TABLE p1 (id int)`)

	// Only the outermost statement: nested DDL runs again with its text.
	f.exec(f.c, `CREATE SCHEMA sch CREATE TABLE t1 (id int) CREATE VIEW v1 AS SELECT * FROM t1`)
	f.expectCaptured("CREATE SCHEMA with subcommands", `CREATE SCHEMA sch CREATE TABLE t1 (id int) CREATE VIEW v1 AS SELECT * FROM t1`)
	f.exec(f.c, `CREATE FUNCTION audit() RETURNS event_trigger LANGUAGE plpgsql AS $$
		DECLARE r record;
		BEGIN
			FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE TABLE' AND object_identity NOT LIKE '%\_audit' LOOP
				EXECUTE format('CREATE TABLE %s_audit (at timestamptz)', r.object_identity);
			END LOOP;
		END$$;
		CREATE EVENT TRIGGER audit ON ddl_command_end EXECUTE FUNCTION audit()`)
	f.captured()
	f.exec(f.c, `CREATE TABLE orders (id int)`)
	f.expectCaptured("event trigger's DDL", `CREATE TABLE orders (id int)`)
	if !scalar[bool](t, f.c, `SELECT to_regclass('public.orders_audit') IS NOT NULL`) {
		t.Errorf("the event trigger did not run")
	}
	f.exec(f.c, `DROP EVENT TRIGGER audit`)
	f.captured()

	// A DDL statement's function runs its DDL again on every replica.
	f.exec(f.c, `CREATE TABLE made AS SELECT 1 AS r FROM mk('inner_made')`)
	f.expectCaptured("DDL run by a DDL statement's query", `CREATE TABLE made AS SELECT 1 AS r FROM mk('inner_made')`)
}

// DDL undone by ROLLBACK TO SAVEPOINT, or by an exception block, is not
// replicated.
func TestDDLUndoneIsNotCaptured(t *testing.T) {
	f := start(t)
	f.exec(f.c, `BEGIN; SAVEPOINT s; CREATE TABLE gone (id int); ROLLBACK TO s; CREATE TABLE kept (id int); COMMIT`)
	f.expectCaptured("savepoint", `CREATE TABLE kept (id int)`)
	f.exec(f.c, `DO $$BEGIN
		BEGIN CREATE TABLE gone2 (id int); RAISE EXCEPTION 'undo'; EXCEPTION WHEN OTHERS THEN NULL; END;
		CREATE TABLE kept2 (id int);
	END$$`)
	f.expectCaptured("exception block", `CREATE TABLE kept2 (id int)`)
}

// DDL is certified from the version its snapshot saw, taken before it
// ran: a REPEATABLE READ transaction's DDL from the transaction's
// snapshot, even when the replica committed versions since.
func TestDDLIsCertifiedFromItsSnapshot(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE base (id int)`) // version 1
	f.certified()
	other := f.a.Connect("postgres")
	f.exec(f.c, `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1`)
	f.exec(other, `CREATE TABLE later (id int)`) // version 2
	f.exec(f.c, `CREATE TABLE mine (id int); COMMIT`)
	reqs := f.certified()
	if len(reqs) != 2 || reqs[0].StartVersion != 1 || reqs[1].StartVersion != 1 {
		t.Fatalf("certifications %+v: want version 2 from 1, then the RR transaction's DDL from 1 (its snapshot)", reqs)
	}
	if got := ddlTexts(reqs[1]); len(got) != 1 || got[0] != `CREATE TABLE mine (id int)` {
		t.Errorf("RR transaction captured %q", got)
	}

	// A refusal rolls the DDL back.
	f.a.SetDecide(func(r agenttest.Request, next uint64) wire.Decision {
		return wire.Decision{Kind: wire.Abort, AbortReason: 1, Detail: "conflict"}
	})
	f.fail(f.c, `CREATE TABLE refused (id int)`, pgcode.SerializationFailure)
	if scalar[bool](t, f.c, `SELECT to_regclass('public.refused') IS NOT NULL`) {
		t.Errorf("a DDL refused by the certifier stayed")
	}
}
