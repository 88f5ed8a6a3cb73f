package guarantees_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// staleSecond keeps replica 2 stale on purpose: it hears of the other
// replicas' commits only with the replies to its own certifications (no
// pushes, an hour's staleness bound).
func staleSecond(i int, cfg *agent.Config) {
	if i == 1 {
		cfg.NoPush, cfg.Staleness = true, time.Hour
	}
}

// A transaction refused by certification learns why: 40001, with a DETAIL
// naming the row it lost and the version it lost to. Replica 2 is stale,
// so that its update of the row is certified after replica 1's commit of
// the same row, and refused by the certifier (not by the lock watch,
// which dooms a local transaction that blocks a version already here).
func TestACertificationAbortNamesTheRowAndTheVersion(t *testing.T) {
	c := start(t, 2, clustertest.Options{Agent: staleSecond})
	ctx := context.Background()
	stale := c.Connect(1)
	execSQL(t, stale, `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, stale, `INSERT INTO counter VALUES (1, 0)`)
	c.awaitDurable(0)
	execSQL(t, c.Connect(0), `UPDATE counter SET n = 100 WHERE id = 1`)
	won := c.Durable()
	_, err := stale.Exec(ctx, `UPDATE counter SET n = n + 1 WHERE id = 1`)
	e := pgError(err)
	if e == nil || e.Code != pgcode.SerializationFailure {
		t.Fatalf("an update from a snapshot without replica 1's version %d: %v, want 40001", won, err)
	}
	want := "write-write conflict on table public.counter row [1] with the transaction committed at version " + itoa(won)
	if !strings.Contains(e.Detail, want) {
		t.Errorf("the abort's DETAIL is %q, want the certifier's, naming the row and the version: %q", e.Detail, want)
	}
}

// After a certification abort, the session's next statement runs once its
// replica has applied the version the transaction lost to, so that the
// client's retry, on the same connection and the same row, starts from a
// snapshot that holds the winner's write instead of conflicting again
// (the backend waits after its locks are released, before it reads the
// client's next message). Replica 2 is stale: every
// round's write there conflicts with replica 1's. The wait is bounded (100
// ms, extension/src/commit.c): on a loaded machine an apply may take
// longer, and then the abort comes first; two rounds in ten may.
func TestACertificationAbortIsAnsweredAfterTheConflictingVersionIsApplied(t *testing.T) {
	c := start(t, 2, clustertest.Options{Agent: staleSecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stale := c.Connect(1)
	execSQL(t, stale, `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, stale, `INSERT INTO counter VALUES (1, 0)`)
	c.awaitDurable(0)
	fresh := c.Connect(0)
	late := 0
	const rounds = 10
	for round := 1; round <= rounds; round++ {
		won := round * 100
		// Replica 1 may lag behind replica 2's own commits: retried until
		// it holds them.
		retry40001(t, fresh, `UPDATE counter SET n = $1 WHERE id = 1`, won)
		_, err := stale.Exec(ctx, `UPDATE counter SET n = n + 1 WHERE id = 1`)
		if pgcode.Of(err) != pgcode.SerializationFailure {
			t.Fatalf("round %d: an update from a snapshot without replica 1's: %v, want 40001", round, err)
		}
		var n int
		if err := stale.QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != won {
			late++
			t.Logf("round %d: right after the 40001, replica 2 reads n = %d, not the winner's %d", round, n, won)
		}
		// The retry commits (at once when the abort waited for the apply).
		retry40001(t, stale, `UPDATE counter SET n = n + 1 WHERE id = 1`)
	}
	if late > rounds/5 {
		t.Errorf("in %d of %d rounds the statement after the abort did not see the version the transaction lost to", late, rounds)
	}
}

// retry40001 runs sql on conn until it commits, retrying after 40001.
func retry40001(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		_, err := conn.Exec(context.Background(), sql, args...)
		switch {
		case err == nil:
			return
		case pgcode.Of(err) != pgcode.SerializationFailure || attempt > 100:
			t.Fatalf("%s: %v", oneLine(sql), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
