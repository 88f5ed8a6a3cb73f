package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A replica whose applier stops for good must answer the sessions that
// wait on it instead of leaving them hanging. The collision here is one
// certification does not see (docs/GUARANTEES.md): a unique index on an
// expression. Replica 2 is kept stale, so that it inserts 'a@example.com'
// before it has applied replica 1's 'A@example.com'. Both certify; each
// replica then fails to apply the other's row, and stops. The session on
// replica 2 waits for its own version behind the collision: its COMMIT
// succeeds (the transaction is in the cluster's log) with a WARNING that
// this replica will not show it, and its session ends with 57P03. The idle
// session on replica 1 gets 57P03 at its next statement, and so do new
// connections.
func TestStoppedApplierAnswersWaitingSessions(t *testing.T) {
	c := startClusterStaleness(t, []time.Duration{0, time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second, notices := c.connectNoticed(1)
	// The schema is created on the stale replica (its own transactions
	// commit there) and reaches replica 1 within its staleness bound.
	execSQL(t, second, `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL)`)
	execSQL(t, second, `CREATE UNIQUE INDEX users_email_ci ON users (lower(email))`)
	uqWaitVersion(t, c, 0, c.certifier.Service.DurableVersion())
	first := c.connect(0)
	// A block opened before the collision, whose BEGIN the proxy defers
	// (it has run nothing yet): it ends with the replica too.
	opened, err := c.connect(0).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, first, `INSERT INTO users VALUES (1, 'A@example.com')`)
	tx, err := second.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO users VALUES (2, 'a@example.com')`); err != nil {
		t.Fatalf("replica 2 has not applied replica 1's row yet, so its insert should succeed: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("COMMIT of a certified transaction on a replica that stopped applying: %v, want success with a WARNING", err)
	}
	if got := notices(); !strings.Contains(got, "WARNING: the transaction is committed in the cluster") {
		t.Fatalf("the client was not warned that the replica will not show its commit; notices: %q", got)
	}
	if _, err := second.Exec(ctx, `SELECT 1`); err == nil {
		t.Fatal("the session on the halted replica 2 goes on after its COMMIT")
	}

	// Replica 1 cannot apply replica 2's row either: it stops too, and its
	// idle session is ended at its next statement.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := first.Exec(ctx, `SELECT count(*) FROM users`)
		if err != nil {
			if sqlState(err) != "57P03" || !strings.Contains(err.Error(), "must be rebuilt") {
				t.Fatalf("idle session on replica 1 after it stopped applying: %v, want 57P03 saying the replica must be rebuilt", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica 1 still serves its session 15 s after the collision; it should have stopped applying")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := opened.Exec(ctx, `SELECT count(*) FROM users`); sqlState(err) != "57P03" {
		t.Fatalf("first statement of a block begun before replica 1 stopped: %v, want 57P03", err)
	}

	// New connections are refused, right after their startup message:
	// before authentication and before a database connection is opened
	// for them (pgwire.Config.Admit; TestAdmitRefusesBeforeTheBackendIsDialed).
	for i := range 2 {
		conn, err := pgx.Connect(ctx, c.dsn(i))
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT 1`)
			conn.Close(ctx)
		}
		if sqlState(err) != "57P03" {
			t.Fatalf("new connection to halted replica %d: %v, want 57P03", i+1, err)
		}
	}
}
