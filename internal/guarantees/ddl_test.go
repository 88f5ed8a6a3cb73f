package guarantees_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
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
	if err := tx.Commit(context.Background()); pgcode.Of(err) != pgcode.ForeignKeyViolation {
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

// DDL is replicated as its text and run again on every replica; what it
// means there must be what it meant at the origin.
func TestDDLMeansTheSameOnEveryReplica(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	t.Run("unqualified names resolve by the origin's search_path", func(t *testing.T) { ddlUsesTheOriginsSearchPath(t, c) })
	t.Run("an enum value added and used at once", func(t *testing.T) { enumValueAddedAndUsedAtOnce(t, c) })
	t.Run("a write racing a schema rename is refused", func(t *testing.T) { writeRacingSchemaRenameIsRefused(t, c) })
	c.converge()
}

// DDL runs on the other replicas under the search_path it ran under at
// the origin (set for the session, or for the transaction), not the
// applier's: an unqualified name means the same schema everywhere.
func ddlUsesTheOriginsSearchPath(t *testing.T, c *cluster) {
	a := c.Connect(0)
	for _, sql := range []string{
		`CREATE SCHEMA app`,
		`SET search_path = app, public`,
		`CREATE TABLE items (id int PRIMARY KEY, name text)`,
		`CREATE INDEX items_name ON items (name)`,
		`ALTER TABLE items ADD COLUMN price int DEFAULT 0`,
		`INSERT INTO items VALUES (1, 'one', 5)`,
		`RESET search_path`,
		`BEGIN; SET LOCAL search_path = app; CREATE TABLE by_local_path (id int PRIMARY KEY); COMMIT`,
		`CREATE TABLE in_public (id int PRIMARY KEY)`,
	} {
		if err := simple(a, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	c.converge()
	for i := range c.DBs {
		got := c.textOn(i, `SELECT string_agg(n.nspname || '.' || c.relname, ' ' ORDER BY c.relname)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relname IN ('items', 'items_name', 'by_local_path', 'in_public')`)
		if want := "app.by_local_path public.in_public app.items app.items_name"; got != want {
			t.Errorf("replica %d holds %q, want %q", i+1, got, want)
		}
		if got := c.textOn(i, `SELECT string_agg(id || ':' || name || ':' || price, ' ') FROM app.items`); got != "1:one:5" {
			t.Errorf("replica %d: app.items holds %q", i+1, got)
		}
	}
}

// PostgreSQL refuses an enum value in the transaction that added it. A
// replica whose applier fell behind receives the version that adds a
// value and the versions that use it together; it applies them in
// separate transactions, cut after each DDL version, and converges. The
// applier of replica 2 is held up by a reader's lock for a moment, so
// that the versions arrive together.
func enumValueAddedAndUsedAtOnce(t *testing.T, c *cluster) {
	a := c.Connect(0)
	execSQL(t, a, `CREATE TABLE gate (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, a, `INSERT INTO gate VALUES (1, 0)`)
	execSQL(t, a, `CREATE TYPE mood AS ENUM ('calm')`)
	execSQL(t, a, `CREATE TABLE moods (id int PRIMARY KEY, m mood NOT NULL)`)
	c.converge()
	hold := beginWith(t, c.Connect(1), `LOCK TABLE gate IN SHARE MODE`)
	execSQL(t, a, `UPDATE gate SET n = 1`)
	for i, value := range []string{"glad", "sad", "mad"} {
		execSQL(t, a, `ALTER TYPE mood ADD VALUE '`+value+`'`)
		execSQL(t, a, `INSERT INTO moods VALUES ($1, $2)`, i, value)
	}
	hold.Rollback(context.Background())
	c.converge()
	if got := c.textOn(1, `SELECT string_agg(m::text, ' ' ORDER BY id) FROM moods`); got != "glad sad mad" {
		t.Fatalf("replica 2 holds moods %q", got)
	}
}

// ALTER SCHEMA ... RENAME takes no lock on the schema's tables, so it
// commits while a transaction that wrote into the schema is still open.
// That transaction is refused (40001): the rename is a DDL version it did
// not see, which conflicts with every write (Postgres-R(SI) §5.1); were it
// certified, the other replicas would apply its rows after the rename, to
// a table name that no longer exists there.
func writeRacingSchemaRenameIsRefused(t *testing.T, c *cluster) {
	ctx := context.Background()
	a := c.Connect(0)
	execSQL(t, a, `CREATE SCHEMA old_name`)
	execSQL(t, a, `CREATE TABLE old_name.t (id int PRIMARY KEY)`)
	c.converge()
	writer := beginWith(t, c.Connect(0), `INSERT INTO old_name.t VALUES (1)`)
	execSQL(t, a, `ALTER SCHEMA old_name RENAME TO new_name`)
	if err := writer.Commit(ctx); pgcode.Of(err) != pgcode.SerializationFailure {
		t.Fatalf("COMMIT of a write into a schema renamed meanwhile: %v, want 40001", err)
	}
	c.converge() // replica 2 has applied the rename
	execSQL(t, c.Connect(1), `INSERT INTO new_name.t VALUES (2)`)
	c.converge()
	for i := range c.DBs {
		if got := c.textOn(i, `SELECT string_agg(id::text, ' ') FROM new_name.t`); got != "2" {
			t.Errorf("replica %d: new_name.t holds %q, want 2", i+1, got)
		}
	}
}
