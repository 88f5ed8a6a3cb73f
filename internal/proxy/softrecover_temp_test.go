package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// Soft recovery (Tashkent §8.1) rolls back a certified transaction the
// database refused to commit and applies its writeset instead: changes to
// the session's temporary tables, which no writeset carries, are lost
// with the rollback. The failed transaction cannot be asked what it wrote,
// so a session that has temporary tables is told and ended after its
// COMMIT (which succeeds: the transaction is committed), never left
// running without rows it believes it wrote. The database is made to
// refuse by closing the proxy's statement that records the version.
func TestSoftRecoveryEndsASessionWithTemporaryTables(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, notices := c.connectNoticed(0)
	execSQL(t, conn, `CREATE TABLE kept (id int PRIMARY KEY)`)
	execSQL(t, conn, `CREATE TEMP TABLE scratch (n int)`)
	pg := conn.PgConn()
	if err := pg.Deallocate(ctx, "tashkent_record"); err != nil { // a protocol Close
		t.Fatal(err)
	}
	_, err := pg.Exec(ctx, `BEGIN; INSERT INTO scratch VALUES (1); INSERT INTO kept VALUES (1); COMMIT`).ReadAll()
	if err != nil {
		t.Fatalf("COMMIT of a certified transaction applied from its writeset: %v, want success", err)
	}
	if !strings.Contains(notices(), "temporary-table changes were lost") {
		t.Fatalf("the client was not told its temporary-table changes were lost; notices: %q", notices())
	}
	if _, err := pg.Exec(ctx, `SELECT count(*) FROM scratch`).ReadAll(); err == nil {
		t.Fatal("the session goes on without the temporary-table row it wrote")
	}
	c.converge(10 * time.Second)
	var n int
	if err := c.direct(1).QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the committed row on replica 2: %d rows, %v", n, err)
	}
}
