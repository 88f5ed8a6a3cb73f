package wire_test

import (
	"context"
	"testing"
	"time"
)

// While the agent has set a catch-up target (flow control: the replica
// fell behind), a transaction's first write waits until the replica has
// reached it, at most a second; reads, later writes of the transaction,
// and sessions with tashkent.catch_up_wait off do not wait.
func TestCatchUpWaitHoldsAFirstWriteUntilTheReplicaCatchesUp(t *testing.T) {
	ctx := context.Background()
	s := startSyncServer(t)
	c := connectWith(t, s)
	exec := func(sql string) time.Duration {
		t.Helper()
		began := time.Now()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return time.Since(began)
	}
	target := func(v int) {
		t.Helper()
		if _, err := s.admin.Exec(ctx, `SELECT tashkent.set_catch_up_target($1)`, v); err != nil {
			t.Fatal(err)
		}
	}
	const quick = 500 * time.Millisecond

	target(1)
	if took := exec(`SELECT count(*) FROM t`); took > quick {
		t.Errorf("a read waited %v for the replica to catch up", took)
	}
	exec(`BEGIN`)
	done := make(chan error, 1)
	go func() { _, err := c.Exec(ctx, `INSERT INTO t VALUES (100)`); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the first write did not wait for the catch-up target (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	s.applyRow(t, 1, 1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the first write after the replica caught up: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first write still waits after the replica reached the target")
	}
	target(5)
	if took := exec(`INSERT INTO t VALUES (101)`); took > quick {
		t.Errorf("a second write of the transaction waited %v", took)
	}
	exec(`ROLLBACK`)

	if took := exec(`BEGIN; INSERT INTO t VALUES (102); ROLLBACK`); took < 900*time.Millisecond || took > 5*time.Second {
		t.Errorf("a first write while the replica does not reach the target took %v, want about a second", took)
	}
	exec(`SET tashkent.catch_up_wait = off`)
	if took := exec(`BEGIN; INSERT INTO t VALUES (103); ROLLBACK`); took > quick {
		t.Errorf("with tashkent.catch_up_wait off a first write waited %v", took)
	}
	target(0)
}
