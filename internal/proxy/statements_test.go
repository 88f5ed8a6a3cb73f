package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// The proxy's COMMIT runs its own prepared statements (statements.go). A
// client that drops them, where the proxy sees it (DEALLOCATE ALL inside a
// transaction, DISCARD TEMP and DISCARD ALL between transactions) or where
// it cannot (a protocol Close of one of them), must lose no commit and
// never get a commit that is not replicated: each write below either
// commits on both replicas or fails with an error, and the session goes on.
// The DEALLOCATE ALL inside a transaction also drops the statements of the
// ordered commit, which that transaction's COMMIT needs.
func TestDroppedProxyStatementsAreRepreparedAndNothingIsLost(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn := c.connect(0)
	execSQL(t, conn, "CREATE TABLE dropped (id int PRIMARY KEY)")
	pg := conn.PgConn()
	want := 0
	write := func(step string, in ...string) {
		t.Helper()
		want++
		script := "BEGIN; " + fmt.Sprintf("INSERT INTO dropped VALUES (%d); ", want)
		for _, sql := range in {
			script += sql + "; "
		}
		if _, err := pg.Exec(ctx, script+"COMMIT").ReadAll(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}

	write("before anything was dropped")
	write("DEALLOCATE ALL inside the transaction", "DEALLOCATE ALL")
	write("after DEALLOCATE ALL")
	write("DEALLOCATE of the proxy's collect by name", "DEALLOCATE tashkent_collect")
	for _, between := range []string{"DISCARD TEMP", "DISCARD ALL", "DEALLOCATE ALL"} {
		if _, err := pg.Exec(ctx, between).ReadAll(); err != nil {
			t.Fatalf("%s: %v", between, err)
		}
		write("after " + between)
	}

	// A collect that prepares the statements again and then fails (a
	// deferred foreign key) leaves the proxy unsure which Parses ran: it
	// prepares them again after the rollback, and the next COMMIT works.
	execSQL(t, conn, "CREATE TABLE deferred_child (id int PRIMARY KEY, parent int REFERENCES dropped (id) DEFERRABLE INITIALLY DEFERRED)")
	if _, err := pg.Exec(ctx, "BEGIN; DEALLOCATE tashkent_constraints; INSERT INTO deferred_child VALUES (1, 999999); COMMIT").ReadAll(); sqlState(err) != "23503" {
		t.Fatalf("COMMIT with a violated deferred foreign key: %v, want 23503", err)
	}
	write("after a collect that failed on a deferred constraint")

	// A Close the proxy does not interpret: the next COMMIT fails, rolled
	// back, with a hint; the one after it commits.
	if err := pg.Deallocate(ctx, "tashkent_collect"); err != nil { // a protocol Close
		t.Fatal(err)
	}
	want++
	_, err := pg.Exec(ctx, fmt.Sprintf("BEGIN; INSERT INTO dropped VALUES (%d); COMMIT", want)).ReadAll()
	if sqlState(err) != "26000" {
		t.Fatalf("COMMIT after the client closed the proxy's collect: %v, want 26000", err)
	}
	want--
	if st := pg.TxStatus(); st != 'I' {
		t.Fatalf("transaction status %q after the failed COMMIT, want I", st)
	}
	write("after the failed COMMIT")

	// Closed, the statement that records the version: the certified
	// transaction cannot commit where it ran, so it is applied from its
	// writeset in its place (soft recovery); its COMMIT succeeds.
	if err := pg.Deallocate(ctx, "tashkent_record"); err != nil {
		t.Fatal(err)
	}
	write("after the client closed the proxy's version record")
	write("after the soft recovery")

	c.converge(30 * time.Second)
	for i := 0; i < 2; i++ {
		var n, max int
		if err := c.direct(i).QueryRow(ctx, "SELECT count(*), coalesce(max(id), 0) FROM dropped").Scan(&n, &max); err != nil {
			t.Fatal(err)
		}
		if n != want || max != want {
			t.Fatalf("replica %d holds %d rows up to %d, want %d: a commit was lost or not replicated", i+1, n, max, want)
		}
	}
}

// The collect the proxy runs at COMMIT trims the writeset buffer (a
// temporary table that autovacuum never visits) once it passes 256 kB, as
// collect_writeset does: 1.2 MB of writesets through one session leave it
// small. The client's session is the proxy's backend session, so it sees
// the buffer.
func TestProxyCollectKeepsTheWritesetBufferSmall(t *testing.T) {
	c := startCluster(t, 1, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn := c.connect(0)
	execSQL(t, conn, "CREATE TABLE big (id int PRIMARY KEY, pad text)")
	largest := int64(0)
	for i := 0; i < 60; i++ {
		// 20 rows of 1 kB (stored inline, not TOASTed) per transaction.
		execSQL(t, conn, fmt.Sprintf(`BEGIN; INSERT INTO big SELECT g, repeat('x', 1000) FROM generate_series(%d, %d) g; COMMIT`, i*20, i*20+19))
		var size int64
		if err := conn.QueryRow(ctx, `SELECT pg_relation_size('pg_temp.tashkent_writeset')`).Scan(&size); err != nil {
			t.Fatal(err)
		}
		if size > 256<<10+64<<10 {
			t.Fatalf("the writeset buffer is %d bytes after %d transactions of 20 kB", size, i+1)
		}
		largest = max(largest, size)
	}
	if largest == 0 {
		t.Fatal("the writeset buffer never held anything: the test measured nothing")
	}
}
