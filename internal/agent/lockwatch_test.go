package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// A local transaction that holds a row lock a remote writeset needs gives
// way (Tashkent §8.2; Postgres-R(SI) §4.2): one running a statement fails
// with 40001 at once; one idle in its transaction block, which a cancel
// does not reach, has its backend terminated after the grace period, and
// its client hears 40001 too. The remote writeset is applied either way.
func TestALocalTransactionThatBlocksARemoteWritesetGivesWay(t *testing.T) {
	c, _ := startWithSchema(t, 2, clustertest.Options{
		Agent: func(_ int, cfg *agent.Config) { cfg.BlockerGrace = 300 * time.Millisecond },
	}, schema+`; INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
	ctx := context.Background()
	remote := c.Connect(1)
	update := func(k int) uint64 {
		t.Helper()
		if _, err := remote.Exec(ctx, `UPDATE t SET v = 'remote' WHERE k = $1`, k); err != nil {
			t.Fatalf("replica 2: update row %d: %v", k, err)
		}
		var v int64
		if err := remote.QueryRow(ctx, `SELECT tashkent.committed_version()`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return uint64(v)
	}

	running := c.Connect(0)
	if _, err := running.Exec(ctx, `BEGIN; SELECT * FROM t WHERE k = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() {
		_, err := running.Exec(ctx, `SELECT pg_sleep(60)`)
		failed <- err
	}()
	v1 := update(1)
	select {
	case err := <-failed:
		if pgcode.Of(err) != pgcode.SerializationFailure || !strings.Contains(err.Error(), "concurrent update on another replica") {
			t.Errorf("the blocking transaction's statement: %v, want 40001", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the blocking transaction was not doomed")
	}
	c.AwaitCommitted(0, v1, time.Minute)

	idle := c.Connect(0)
	if _, err := idle.Exec(ctx, `BEGIN; UPDATE t SET v = 'local' WHERE k = 2`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v2 := update(2)
	c.AwaitCommitted(0, v2, time.Minute)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("the idle blocker's backend was terminated after %v, before the grace period", took)
	}
	if _, err := idle.Exec(ctx, `SELECT 1`); pgcode.Of(err) != pgcode.SerializationFailure || !idle.IsClosed() {
		t.Errorf("the idle blocking transaction's next statement: %v, want FATAL 40001", err)
	}
	if got := c.Rows(0, "t"); got != "(1,remote) (2,remote)" {
		t.Errorf("replica 1: t = %s", got)
	}
}
