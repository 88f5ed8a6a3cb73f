package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// The proxy classifies a Bind by the statement it tracks under that name
// (unit.go, track). PostgreSQL refuses a Parse that reuses the name of a
// prepared statement that still exists (42P05) and keeps the old one; the
// proxy must keep classifying the old one, or a write runs as what the
// refused Parse said (a BEGIN): with the deferred BEGIN the write is
// answered as BEGIN and never runs; with parameters it runs outside a block,
// uncertified, on this replica only. Likewise a statement dropped with
// SQL (DEALLOCATE, DISCARD ALL) must not be answered as the BEGIN it was.
func TestRefusedParseDoesNotRedefineATrackedStatement(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := c.connect(0)
	execSQL(t, conn, "CREATE TABLE redef (id int PRIMARY KEY)")
	pg := conn.PgConn()
	if _, err := pg.Prepare(ctx, "w", "INSERT INTO redef VALUES (1)", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Prepare(ctx, "w", "BEGIN", nil); sqlState(err) != "42P05" {
		t.Fatalf("Parse reusing a prepared statement's name: %v, want 42P05", err)
	}
	res := pg.ExecPrepared(ctx, "w", nil, nil, nil).Read()
	if res.Err != nil || res.CommandTag.String() != "INSERT 0 1" {
		t.Fatalf("statement w (still the INSERT in PostgreSQL): tag %q, err %v; want INSERT 0 1", res.CommandTag, res.Err)
	}
	if st := pg.TxStatus(); st != 'I' {
		t.Fatalf("transaction status %q after an autocommit INSERT, want I", st)
	}

	if _, err := pg.Prepare(ctx, "wp", "INSERT INTO redef VALUES ($1)", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Prepare(ctx, "wp", "BEGIN", nil); sqlState(err) != "42P05" {
		t.Fatalf("Parse reusing a prepared statement's name: %v, want 42P05", err)
	}
	if res := pg.ExecPrepared(ctx, "wp", [][]byte{[]byte("2")}, nil, nil).Read(); res.Err != nil {
		t.Fatal(res.Err)
	}
	// A statement dropped with SQL is gone for Bind too: PostgreSQL answers
	// 26000, not a BEGIN the proxy would defer.
	if _, err := pg.Prepare(ctx, "b", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	for _, drop := range []string{"DEALLOCATE b", "DEALLOCATE ALL", "DISCARD ALL"} {
		if _, err := pg.Prepare(ctx, "b", "BEGIN", nil); err != nil && sqlState(err) != "42P05" {
			t.Fatal(err)
		}
		if _, err := pg.Exec(ctx, drop).ReadAll(); err != nil {
			t.Fatalf("%s: %v", drop, err)
		}
		if res := pg.ExecPrepared(ctx, "b", nil, nil, nil).Read(); sqlState(res.Err) != "26000" {
			t.Fatalf("Bind of statement b after %s: tag %q, err %v; want 26000", drop, res.CommandTag, res.Err)
		}
		if st := pg.TxStatus(); st != 'I' {
			t.Fatalf("transaction status %q after %s and a failed Bind, want I", st, drop)
		}
	}
	c.converge(30 * time.Second)
	var n int
	if err := c.direct(1).QueryRow(ctx, "SELECT count(*) FROM redef").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("the other replica has %d rows, want 2: a write was not certified", n)
	}
}
