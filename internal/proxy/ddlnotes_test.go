package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// DDL that runs inside a DO block, a function or a trigger is not a
// statement the proxy replicates; the DDL guard notes the statement it
// ran under, and the proxy refuses the transaction at COMMIT (0A000,
// rolled back) rather than let this replica's schema drift from the
// others' (ddlnotes.go). A DDL statement's own nested DDL (capture
// triggers, a serial column's sequence, schema elements) commits and
// reaches every replica; so does DDL on temporary objects, which stays
// local, and DDL a rolled-back savepoint undid.
func TestDDLInsideFunctionsIsRefusedAtCommit(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn := c.connect(0)
	for _, sql := range []string{
		`CREATE TABLE public.marks (id int PRIMARY KEY)`,
		`CREATE FUNCTION public.make_table(n text) RETURNS void LANGUAGE plpgsql AS $$
			BEGIN EXECUTE format('CREATE TABLE public.%I (id int PRIMARY KEY)', n); END $$`,
		`CREATE FUNCTION public.make_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN EXECUTE format('CREATE TABLE IF NOT EXISTS public.%I (id int PRIMARY KEY)', 'made_' || NEW.id); RETURN NEW; END $$`,
		`CREATE TABLE public.partitioned_by_hand (id int PRIMARY KEY)`,
		`CREATE TRIGGER make BEFORE INSERT ON public.partitioned_by_hand FOR EACH ROW EXECUTE FUNCTION public.make_on_insert()`,
	} {
		execSQL(t, conn, sql)
	}

	refused := []struct{ name, sql, object, detail string }{
		{"DO block", `DO $$BEGIN EXECUTE 'CREATE TABLE public.by_do (id int PRIMARY KEY)'; END$$`, "by_do",
			"CREATE TABLE changes public.by_do"},
		{"function in a block", `BEGIN; SELECT public.make_table('by_function'); COMMIT`, "by_function",
			"CREATE TABLE changes public.by_function"},
		{"function outside a block", `SELECT public.make_table('by_autocommit')`, "by_autocommit",
			"The statement SELECT public.make_table('by_autocommit') ran DDL"},
		{"DO block beside replicated DDL", `BEGIN; CREATE TABLE public.beside (id int PRIMARY KEY);
			DO $$BEGIN EXECUTE 'ALTER TABLE public.marks ADD COLUMN sneaky int'; END$$; COMMIT`, "beside",
			"ALTER TABLE changes public.marks"},
		{"DROP in a DO block", `DO $$BEGIN EXECUTE 'DROP TABLE public.marks'; END$$`, "",
			"DROP TABLE drops table public.marks"},
		{"trigger", `INSERT INTO public.partitioned_by_hand VALUES (7)`, "made_7", "CREATE TABLE changes public.made_7"},
		{"function under CREATE TEMP", `CREATE TEMP TABLE made_by_temp AS SELECT 1 AS one FROM (SELECT public.make_table('by_temp_ctas')) AS made`,
			"by_temp_ctas", "CREATE TABLE changes public.by_temp_ctas"},
	}
	for _, tc := range refused {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
			if strings.HasPrefix(tc.sql, "BEGIN") && mode != pgx.QueryExecModeSimpleProtocol {
				continue // a multi-statement string is for the simple protocol
			}
			_, err := conn.Exec(ctx, tc.sql, mode)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "0A000" ||
				!strings.Contains(pgErr.Message, "DDL inside a DO block, function, procedure or trigger is not replicated") ||
				!strings.Contains(pgErr.Detail, tc.detail) {
				t.Fatalf("%s (%v): %v, want 0A000 with %q in the detail", tc.name, mode, err, tc.detail)
			}
			if conn.PgConn().TxStatus() != 'I' {
				execSQL(t, conn, `ROLLBACK`)
			}
			if tc.object != "" && c.countOn(0, `SELECT count(*) FROM pg_class WHERE relname = '`+tc.object+`'`) != 0 {
				t.Fatalf("%s: the refused transaction left %s on replica 1", tc.name, tc.object)
			}
		}
	}
	if c.countOn(0, `SELECT count(*) FROM pg_attribute WHERE attname = 'sneaky'`) != 0 ||
		c.countOn(0, `SELECT count(*) FROM pg_class WHERE relname = 'marks'`) != 1 {
		t.Fatal("a refused DO block's ALTER or DROP stayed on replica 1")
	}

	// DDL the client sends is not noted, so a transaction of many DDL
	// statements (a schema load) keeps the notes empty; a DO block that
	// runs DDL is noted once, however many commands it runs.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	notes := func() string {
		var n *string
		if err := tx.QueryRow(ctx, `SELECT current_setting('tashkent.client_ddl', true)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == nil {
			return ""
		}
		return *n
	}
	for i := range 20 {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`/* load */ CREATE TABLE public.load_%d (id serial PRIMARY KEY, v text)`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := notes(); got != "" {
		t.Errorf("notes after 20 CREATE TABLE statements: %s, want none", got)
	}
	if _, err := tx.Exec(ctx, `DO $$BEGIN CREATE TABLE public.hidden_1 (id int PRIMARY KEY); CREATE TABLE public.hidden_2 (id int PRIMARY KEY); END$$`); err != nil {
		t.Fatal(err)
	}
	if got := notes(); strings.Count(got, `"query"`) != 1 || !strings.Contains(got, "CREATE TABLE changes public.hidden_1") {
		t.Errorf("notes after a DO block creating two tables: %s, want one naming hidden_1", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	allowed := []string{
		`CREATE TABLE public.with_serial (id serial PRIMARY KEY, v text)`,
		`CREATE SCHEMA app CREATE TABLE things (id int PRIMARY KEY) CREATE VIEW thing_ids AS SELECT id FROM things`,
		`BEGIN; CREATE TABLE public.in_block (id int PRIMARY KEY); INSERT INTO public.in_block VALUES (1); COMMIT`,
		`CREATE TEMP TABLE scratch (id int PRIMARY KEY)`,
		`DO $$BEGIN EXECUTE 'CREATE INDEX scratch_idx ON pg_temp.scratch (id)'; END$$`,
		`BEGIN; SAVEPOINT s; DO $$BEGIN EXECUTE 'CREATE TABLE public.undone (id int PRIMARY KEY)'; END$$;
			ROLLBACK TO SAVEPOINT s; INSERT INTO public.marks VALUES (1); COMMIT`,
	}
	for _, sql := range allowed {
		if _, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE public.extended (id int PRIMARY KEY)`, pgx.QueryExecModeExec); err != nil {
		t.Fatalf("DDL in the extended protocol: %v", err)
	}
	execSQL(t, conn, `INSERT INTO public.with_serial (v) VALUES ('x')`)
	c.converge(20 * time.Second)
	for _, name := range []string{"with_serial", "things", "thing_ids", "in_block", "extended"} {
		if c.countOn(1, `SELECT count(*) FROM pg_class WHERE relname = '`+name+`'`) != 1 {
			t.Errorf("replica 2 lacks %s", name)
		}
	}
	for _, name := range []string{"undone", "scratch", "by_do", "by_function", "by_autocommit", "beside", "made_7", "by_temp_ctas"} {
		for i := range 2 {
			if c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = '`+name+`' AND relpersistence <> 't'`) != 0 {
				t.Errorf("replica %d has %s", i+1, name)
			}
		}
	}
}
