package guarantees_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// DDL undone by ROLLBACK TO SAVEPOINT is not replicated; DDL kept by
// RELEASE is (Postgres-R(SI) §5.1: the DDL a transaction replicates is
// the DDL it commits), in both protocols.
func TestDDLUndoneBySavepointRollbackIsNotReplicated(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	modes := map[string]func(*pgx.Conn, string) error{"simple": simple, "extended": extended}
	for name, run := range modes {
		conn := c.Connect(0)
		for _, st := range []string{
			"BEGIN",
			"CREATE TABLE kept_%[1]s (id int PRIMARY KEY)",
			"SAVEPOINT a",
			"CREATE TABLE undone_%[1]s (id int PRIMARY KEY)",
			"SAVEPOINT inner_sp",
			"CREATE TABLE undone_inner_%[1]s (id int PRIMARY KEY)",
			"ROLLBACK TO SAVEPOINT a",
			"SAVEPOINT a", // a name used again: ROLLBACK TO and RELEASE mean the latest
			"CREATE TABLE released_%[1]s (id int PRIMARY KEY)",
			"RELEASE SAVEPOINT a",
			"SAVEPOINT b",
			"CREATE TABLE undone_again_%[1]s (id int PRIMARY KEY)",
			"ROLLBACK TO b",
			"INSERT INTO kept_%[1]s VALUES (1)",
			"COMMIT",
		} {
			st = forMode(st, name)
			if err := run(conn, st); err != nil {
				t.Fatalf("%s: %s: %v", name, st, err)
			}
		}
	}
	c.converge()
	for name := range modes {
		for table, want := range map[string]int{"kept": 1, "released": 1, "undone": 0, "undone_inner": 0, "undone_again": 0} {
			if got := c.countOn(1, `SELECT count(*) FROM pg_class WHERE relname = $1`, table+"_"+name); got != want {
				t.Errorf("%s: replica 2 has %d tables %s_%s, want %d", name, got, table, name, want)
			}
		}
	}
}

// forMode puts the protocol's name into sql where it asks for it.
func forMode(sql, mode string) string {
	if strings.Contains(sql, "%[1]s") {
		return fmt.Sprintf(sql, mode)
	}
	return sql
}

// A deferred constraint is checked at COMMIT, before certification: a
// transaction that violates it fails there (23503), as on PostgreSQL, and
// nothing of it reaches any replica (remote writesets are applied without
// constraint checks, so it must never be certified).
func TestDeferredConstraintFailingAtCommitIsNotReplicated(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	a := c.Connect(0)
	execSQL(t, a, `CREATE TABLE parent (id int PRIMARY KEY)`)
	execSQL(t, a, `CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)`)
	before := c.Durable()
	tx := beginWith(t, a, `INSERT INTO child VALUES (1, 42)`)
	if err := tx.Commit(context.Background()); sqlState(err) != "23503" {
		t.Fatalf("COMMIT of an orphan row: %v, want 23503 foreign_key_violation", err)
	}
	if after := c.Durable(); after != before {
		t.Fatalf("the failed transaction was certified: the certifier went from version %d to %d", before, after)
	}
	c.converge()
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM child`); n != 0 {
			t.Fatalf("replica %d holds the orphan row", i+1)
		}
	}
}

// DDL that runs inside a DO block, a function, a procedure or a trigger is
// captured from the parse tree where it runs (extension/src/ddl.c) and
// replicated in the global order like DDL the client sends; so is a DDL
// statement's own nested DDL (a serial column's sequence, CREATE SCHEMA's
// elements), once. DDL inside code that a rolled-back savepoint undid is
// not replicated.
func TestDDLInsideCodeIsReplicated(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	ctx := context.Background()
	conn := c.Connect(0)
	for _, sql := range []string{
		`CREATE TABLE public.marks (id int PRIMARY KEY)`,
		`CREATE FUNCTION public.make_table(n text) RETURNS void LANGUAGE plpgsql AS $$
			BEGIN EXECUTE format('CREATE TABLE public.%I (id int PRIMARY KEY)', n); END $$`,
		`CREATE PROCEDURE public.make_table_proc(n text) LANGUAGE plpgsql AS $$
			BEGIN EXECUTE format('CREATE TABLE public.%I (id int PRIMARY KEY)', n); END $$`,
		`CREATE FUNCTION public.make_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN EXECUTE format('CREATE TABLE IF NOT EXISTS public.%I (id int PRIMARY KEY)', 'made_' || NEW.id); RETURN NEW; END $$`,
		`CREATE TABLE public.partitioned_by_hand (id int PRIMARY KEY)`,
		`CREATE TRIGGER make BEFORE INSERT ON public.partitioned_by_hand FOR EACH ROW EXECUTE FUNCTION public.make_on_insert()`,
	} {
		execSQL(t, conn, sql)
	}
	for _, tc := range []struct {
		name, sql string
		mode      pgx.QueryExecMode
	}{
		{"DO block", `DO $$BEGIN EXECUTE 'CREATE TABLE public.by_do (id int PRIMARY KEY)'; END$$`, pgx.QueryExecModeSimpleProtocol},
		{"function in a block", `BEGIN; SELECT public.make_table('by_function'); COMMIT`, pgx.QueryExecModeSimpleProtocol},
		{"function outside a block", `SELECT public.make_table('by_autocommit')`, pgx.QueryExecModeExec},
		{"procedure", `CALL public.make_table_proc('by_procedure')`, pgx.QueryExecModeSimpleProtocol},
		{"DO block beside DDL", `BEGIN; CREATE TABLE public.beside (id int PRIMARY KEY);
			DO $$BEGIN EXECUTE 'ALTER TABLE public.marks ADD COLUMN added int'; END$$; COMMIT`, pgx.QueryExecModeSimpleProtocol},
		{"trigger", `INSERT INTO public.partitioned_by_hand VALUES (7)`, pgx.QueryExecModeExec},
		{"serial column", `CREATE TABLE public.with_serial (id serial PRIMARY KEY, v text)`, pgx.QueryExecModeSimpleProtocol},
		{"schema elements", `CREATE SCHEMA app CREATE TABLE things (id int PRIMARY KEY) CREATE VIEW thing_ids AS SELECT id FROM things`, pgx.QueryExecModeSimpleProtocol},
		{"undone by a savepoint", `BEGIN; SAVEPOINT s; DO $$BEGIN EXECUTE 'CREATE TABLE public.undone (id int PRIMARY KEY)'; END$$;
			ROLLBACK TO SAVEPOINT s; INSERT INTO public.marks VALUES (1); COMMIT`, pgx.QueryExecModeSimpleProtocol},
		{"DROP in a DO block", `DO $$BEGIN EXECUTE 'DROP TABLE public.by_do'; END$$`, pgx.QueryExecModeSimpleProtocol},
	} {
		if _, err := conn.Exec(ctx, tc.sql, tc.mode); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	// A write conflicts with every DDL version it did not see: replica 2
	// writes once it holds them.
	c.awaitDurable(1)
	execSQL(t, conn, `INSERT INTO public.with_serial (v) VALUES ('x')`)
	execSQL(t, c.Connect(1), `INSERT INTO public.with_serial (v) VALUES ('y')`)
	c.converge()
	for i := range 2 {
		for _, name := range []string{"by_function", "by_autocommit", "by_procedure", "beside", "made_7", "with_serial", "with_serial_id_seq", "things", "thing_ids"} {
			if c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = $1`, name) != 1 {
				t.Errorf("replica %d lacks %s", i+1, name)
			}
		}
		for _, name := range []string{"undone", "by_do"} {
			if c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = $1`, name) != 0 {
				t.Errorf("replica %d has %s", i+1, name)
			}
		}
		if c.countOn(i, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.marks'::regclass AND attname = 'added'`) != 1 {
			t.Errorf("replica %d lacks the column the DO block added", i+1)
		}
	}
}

// DDL and writes of one transaction are replicated together, in the order
// they ran: a table created and written in one transaction arrives with
// its rows, and a column added after some rows were written arrives
// between them.
func TestDDLAndWritesOfOneTransactionArriveInTheirOrder(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	conn := c.Connect(0)
	if err := simple(conn, `BEGIN;
		CREATE TABLE fresh (id int PRIMARY KEY, v text);
		INSERT INTO fresh VALUES (1, 'before');
		ALTER TABLE fresh ADD COLUMN w int DEFAULT 7;
		INSERT INTO fresh VALUES (2, 'after', 8);
		UPDATE fresh SET v = 'updated' WHERE id = 1;
		COMMIT`); err != nil {
		t.Fatal(err)
	}
	c.converge()
	if got := c.textOn(1, `SELECT string_agg(id || ':' || v || ':' || w, ' ' ORDER BY id) FROM fresh`); got != "1:updated:7 2:after:8" {
		t.Fatalf("replica 2 holds %q", got)
	}
}
