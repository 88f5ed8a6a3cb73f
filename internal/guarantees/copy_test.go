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

// COPY FROM writes rows like INSERT: they are captured, certified at
// commit and replicated, in every form: text, CSV and binary from the
// client, a server-side file, inside a block (a savepoint rolled back
// drops its rows), and a COPY that fails midway replicates nothing.
func TestCopyIsReplicated(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	ctx := context.Background()
	conn := c.Connect(0)
	execSQL(t, conn, `CREATE TABLE copied (id int PRIMARY KEY, name text)`)
	c.converge()
	pg := conn.PgConn()
	copyIn := func(data, sql string) error {
		_, err := pg.CopyFrom(ctx, strings.NewReader(data), sql)
		return err
	}
	if err := copyIn("1\tone\n2\ttwo\n", `COPY copied FROM STDIN`); err != nil {
		t.Fatalf("text COPY: %v", err)
	}
	if err := copyIn("id,name\n3,\"three, quoted\"\n", `COPY copied FROM STDIN WITH (FORMAT csv, HEADER)`); err != nil {
		t.Fatalf("CSV COPY: %v", err)
	}
	rows := [][]any{}
	for i := 10; i < 510; i++ {
		rows = append(rows, []any{i, fmt.Sprintf("binary %d", i)})
	}
	if n, err := conn.CopyFrom(ctx, pgx.Identifier{"copied"}, []string{"id", "name"}, pgx.CopyFromRows(rows)); err != nil || n != 500 {
		t.Fatalf("binary COPY: %d rows, %v", n, err)
	}
	// Server-side, from a program the replica's PostgreSQL runs (a
	// superuser's COPY): the rows are captured all the same.
	execSQL(t, conn, `COPY copied FROM PROGRAM 'printf "1000\\tfrom a program\\n1001\\tfrom a program\\n"'`)
	// In a block: the COPY in a rolled-back savepoint is dropped.
	execSQL(t, conn, `BEGIN`)
	if err := copyIn("2000\tkept\n", `COPY copied FROM STDIN`); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, `SAVEPOINT s`)
	if err := copyIn("2001\tundone\n", `COPY copied FROM STDIN`); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, `ROLLBACK TO SAVEPOINT s`)
	execSQL(t, conn, `COMMIT`)
	// A duplicate key midway: the whole COPY fails, nothing of it stays.
	if err := copyIn("3000\tnew\n1\tduplicate\n", `COPY copied FROM STDIN`); pgcode.Of(err) != pgcode.UniqueViolation {
		t.Fatalf("COPY with a duplicate key: %v, want 23505", err)
	}
	// COPY from a second replica, and COPY TO, which writes nothing.
	if err := func() error {
		_, err := c.Connect(1).PgConn().CopyFrom(ctx, strings.NewReader("4000\tfrom replica 2\n"), `COPY copied FROM STDIN`)
		return err
	}(); err != nil {
		t.Fatalf("COPY on replica 2: %v", err)
	}
	var out strings.Builder
	if _, err := pg.CopyTo(ctx, &out, `COPY (SELECT count(*) FROM copied) TO STDOUT`); err != nil {
		t.Fatal(err)
	}
	c.converge()
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM copied`); n != 3+500+2+1+1 {
			t.Errorf("replica %d holds %d copied rows, want %d", i+1, n, 3+500+2+1+1)
		}
		if n := c.countOn(i, `SELECT count(*) FROM copied WHERE id IN (2001, 3000)`); n != 0 {
			t.Errorf("replica %d holds rows of a rolled-back or failed COPY", i+1)
		}
	}
}
