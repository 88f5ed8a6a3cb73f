package proxy_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A write outside a transaction block is wrapped in the proxy's BEGIN, sent
// in the same write as the client's messages (extended protocol) or Query
// (simple protocol). When that
// BEGIN cannot run (the client dropped every prepared statement, the
// proxy's among them), the block is opened the ordinary way and the
// client's messages run once, in it. Errors in the client's own messages
// after the pipelined BEGIN reach the client as they would from PostgreSQL.
func TestPipelinedBeginFallsBackAndReportsClientErrors(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	conn := c.connect(0)
	ctx := context.Background()
	execSQL(t, conn, "CREATE TABLE pb (id int PRIMARY KEY, v text)")

	insert := func(id int) error {
		return conn.PgConn().ExecParams(ctx, "INSERT INTO pb VALUES ($1, 'x')",
			[][]byte{[]byte(strconv.Itoa(id))}, nil, nil, nil).Read().Err
	}
	if err := insert(1); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, "DEALLOCATE ALL") // drops the proxy's prepared BEGIN too
	if err := insert(2); err != nil {
		t.Fatalf("insert after DEALLOCATE ALL: %v", err)
	}
	if err := insert(3); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, "DEALLOCATE ALL")
	execSQL(t, conn, "INSERT INTO pb VALUES (10, 'simple protocol')") // pgx: no arguments, simple protocol
	execSQL(t, conn, "INSERT INTO pb VALUES (11, 'simple protocol')")
	if err := insert(1); sqlState(err) != "23505" {
		t.Fatalf("duplicate key: %v, want 23505", err)
	}
	err := conn.PgConn().ExecParams(ctx, "INSERT INTO pb VALUES ($1, 'x') RETURNING nonsense",
		[][]byte{[]byte("4")}, nil, nil, nil).Read().Err
	if sqlState(err) != "42703" {
		t.Fatalf("undefined column: %v, want 42703", err)
	}
	var status string
	if err := conn.QueryRow(ctx, "SELECT 'idle'").Scan(&status); err != nil {
		t.Fatalf("session after the errors: %v", err)
	}
	c.converge(30 * time.Second)
	var n int
	if err := c.direct(1).QueryRow(ctx, "SELECT count(*) FROM pb").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Fatalf("the other replica has %d rows, want 5", n)
	}
}
