package proxy_test

import (
	"context"
	"testing"
	"time"
)

// A certification abort reaches the client only once its replica has
// applied the version the transaction conflicted with (commit.go,
// awaitConflictingVersion): the client's retry, on the same connection
// and the same rows, starts from a snapshot that holds the winner's write
// instead of conflicting again. Replica 2 hears of replica 1's commits
// only with its own replies (no pushes, an hour's staleness), so every
// round's write on it is certain to conflict.
func TestACertificationAbortIsAnsweredAfterTheConflictingVersionIsApplied(t *testing.T) {
	c := startClusterStaleness(t, []time.Duration{0, time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stale := c.connect(1)
	execSQL(t, stale, `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, stale, `INSERT INTO counter VALUES (1, 0)`)
	c.converge(10 * time.Second) // replica 1 has the table (pushed to it)
	fresh := c.connect(0)
	late := 0
	for round := 1; round <= 10; round++ {
		won := round * 100
		// Replica 1 may lag behind replica 2's own commits (pushed to it):
		// retried until it sees them.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := fresh.Exec(ctx, `UPDATE counter SET n = $1 WHERE id = 1`, won)
			if err == nil {
				break
			}
			if sqlState(err) != "40001" || time.Now().After(deadline) {
				t.Fatalf("round %d: the winning update on replica 1: %v", round, err)
			}
		}
		began := time.Now()
		_, err := stale.Exec(ctx, `UPDATE counter SET n = n + 1 WHERE id = 1`)
		answered := time.Since(began)
		if sqlState(err) != "40001" {
			t.Fatalf("round %d: a write from a snapshot without version of replica 1's update: %v, want 40001", round, err)
		}
		var n int
		if err := stale.QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != won {
			// The wait is bounded (conflictCatchUpMax, 100 ms): on a
			// loaded machine the apply may take longer, and then the
			// abort is answered when the bound expires, not before.
			if answered < catchUpMax {
				t.Fatalf("round %d: right after the 40001 (answered in %v), replica 2 reads n = %d, want the winner's %d: the client's retry would conflict again", round, answered, n, won)
			}
			late++
			t.Logf("round %d: the apply took longer than the wait's bound: answered after %v", round, answered)
		}
		// The retry commits at once when the abort waited for the apply;
		// after a late answer it may conflict again until the apply lands.
		for {
			_, err := stale.Exec(ctx, `UPDATE counter SET n = n + 1 WHERE id = 1`)
			if err == nil {
				break
			}
			if n == won || sqlState(err) != "40001" {
				t.Fatalf("round %d: the retry: %v", round, err)
			}
		}
	}
	if late > 5 {
		t.Fatalf("in %d of 10 rounds the abort was answered before its conflicting version was applied", late)
	}
}

// catchUpMax is proxy.conflictCatchUpMax (config.go), the longest a
// certification abort waits for its conflicting version.
const catchUpMax = 100 * time.Millisecond
