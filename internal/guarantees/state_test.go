package guarantees_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// startWithANote starts a cluster of n replicas with a table notes, writes
// its first row on replica 1, and returns a connection to replica 1 and
// that commit's tashkent.last_commit().
func startWithANote(t *testing.T, n int) (c *cluster, conn *pgx.Conn, version, epoch int64) {
	t.Helper()
	c = start(t, n, clustertest.Options{})
	c.Exec(0, `CREATE TABLE notes (id int PRIMARY KEY, body text)`)
	conn = c.Connect(0)
	execSQL(t, conn, `INSERT INTO notes VALUES (1, 'one')`)
	version, epoch = lastCommit(t, conn)
	return c, conn, version, epoch
}

// lastCommit is tashkent.last_commit() of conn's session.
func lastCommit(t *testing.T, conn *pgx.Conn) (version, epoch int64) {
	t.Helper()
	if err := conn.QueryRow(context.Background(), `SELECT version, epoch FROM tashkent.last_commit()`).Scan(&version, &epoch); err != nil {
		t.Fatal(err)
	}
	return version, epoch
}

// txnState is tashkent.txn_state(version, epoch) on conn; epoch < 0 asks
// without one.
func txnState(t *testing.T, conn *pgx.Conn, version, epoch int64) string {
	t.Helper()
	var e *int64
	if epoch >= 0 {
		e = &epoch
	}
	var s string
	if err := conn.QueryRow(context.Background(), `SELECT tashkent.txn_state($1, $2)`, version, e).Scan(&s); err != nil {
		t.Fatalf("txn_state(%d, %v): %v", version, e, err)
	}
	return s
}

// insertOnceTheCertifierServes retries an insert on conn until the
// certifier takes it (a restarted one), and returns last_commit().
func insertOnceTheCertifierServes(t *testing.T, conn *pgx.Conn, k int) (version, epoch int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, err := conn.Exec(context.Background(), `INSERT INTO notes VALUES ($1, 'after')`, k)
		if err == nil {
			return lastCommit(t, conn)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after the certifier restart: %v", err)
		}
	}
}

// The states of Kashi §2.2.1 (property 2), as any client reads them. A
// commit's (version, epoch) from tashkent.last_commit() is durable on every
// replica once its replica acknowledged it (mw acknowledges at
// durability), and wait_durable returns at once; a version above the
// durable one is unknown, and a wait for it ends with TK004. A restart of
// the certifier begins a new epoch: a version of it named with the older
// epoch is failed (the older epoch's run ended before it), an older
// version named with the newer epoch is unknown (that epoch never held
// it: a wait for it fails at once), and each transaction named rightly
// stays durable.
func TestTxnStateAndWaitDurable(t *testing.T) {
	c, first, v1, e1 := startWithANote(t, 2)
	ctx := context.Background()
	if v1 <= 0 || e1 <= 0 {
		t.Fatalf("last_commit() after a write: (%d, %d), want a version and an epoch", v1, e1)
	}
	var last int64
	if err := first.QueryRow(ctx, `SELECT tashkent.last_commit_version()`).Scan(&last); err != nil || last != v1 {
		t.Fatalf("last_commit_version() is %d, %v; want last_commit()'s version %d", last, err, v1)
	}
	c.AwaitCommitted(1, uint64(v1), convergeLimit)
	second := c.Connect(1)
	for i, conn := range []*pgx.Conn{first, second} {
		for _, e := range []int64{e1, -1} {
			if s := txnState(t, conn, v1, e); s != "durable" {
				t.Fatalf("replica %d: txn_state(%d, %d) of an acknowledged commit is %q, want durable", i+1, v1, e, s)
			}
		}
	}
	began := time.Now()
	var s string
	if err := first.QueryRow(ctx, `SELECT tashkent.wait_durable($1, 0, $2)`, v1, e1).Scan(&s); err != nil || s != "durable" {
		t.Fatalf("wait_durable(%d, 0, %d): %q, %v; want durable at once", v1, e1, s, err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("wait_durable of a durable version took %v", took)
	}
	pgtest.AwaitDurableVersion(t, first, v1, convergeLimit)

	// any role may ask, on any replica
	execSQL(t, first, `CREATE ROLE reader LOGIN`)
	c.AwaitConverged(convergeLimit)
	reader := c.connectAs(1, "reader", nil)
	var state, waited string
	var durable int64
	if err := reader.QueryRow(ctx, `SELECT tashkent.txn_state($1, $2), tashkent.wait_durable($1, 0, $2), tashkent.durable_version()`, v1, e1).Scan(&state, &waited, &durable); err != nil ||
		state != "durable" || waited != "durable" || durable < v1 {
		t.Fatalf("an ordinary role on replica 2: txn_state %q, wait_durable %q, durable version %d, %v; want durable, durable, at least %d", state, waited, durable, err, v1)
	}

	above := v1 + 1000
	for _, e := range []int64{e1, -1} {
		if s := txnState(t, first, above, e); s != "unknown" {
			t.Fatalf("txn_state(%d, %d) above the durable version is %q, want unknown", above, e, s)
		}
	}
	_, err := first.Exec(ctx, `SELECT tashkent.wait_durable($1, 200)`, above)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.VersionWaitTimedOut || !strings.Contains(pe.Message, "is not durable after 200 ms") || pe.Hint == "" {
		t.Fatalf("wait_durable(%d, 200): %v, want TK004 with a hint", above, err)
	}

	c.RestartCertifier()
	v2, e2 := insertOnceTheCertifierServes(t, first, 2)
	if e2 <= e1 {
		t.Fatalf("the epoch after a certifier restart is %d, before it %d: want a later one", e2, e1)
	}
	c.AwaitCommitted(1, uint64(v2), convergeLimit)
	for i, conn := range []*pgx.Conn{first, second} {
		for _, q := range []struct {
			version, epoch int64
			want           string
		}{
			{v2, e2, "durable"},
			{v2, -1, "durable"},
			{v1, e1, "durable"},
			{v2, e1, "failed"},
			{v1, e2, "unknown"},
		} {
			if s := txnState(t, conn, q.version, q.epoch); s != q.want {
				t.Errorf("replica %d: txn_state(%d, %d) is %q, want %s (epoch %d ran from before %d, epoch %d from %d)",
					i+1, q.version, q.epoch, s, q.want, e1, v1, e2, v2)
			}
		}
	}
	if err := first.QueryRow(ctx, `SELECT tashkent.wait_durable($1, 10000, $2)`, v2, e1).Scan(&s); err != nil || s != "failed" {
		t.Fatalf("wait_durable(%d, 10000, %d) of a version another epoch holds: %q, %v; want failed", v2, e1, s, err)
	}
	began = time.Now()
	_, err = first.Exec(ctx, `SELECT tashkent.wait_durable($1, 10000, $2)`, v1, e2)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.InvalidParameterValue || !strings.Contains(pe.Message, fmt.Sprintf("version %d of epoch %d", v1, e2)) {
		t.Fatalf("wait_durable(%d, 10000, %d), a version durable in epoch %d: %v; want 22023 at once naming the pair", v1, e2, e1, err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("wait_durable(%d, 10000, %d), whose state can never change, took %v", v1, e2, took)
	}
}

// The durability feed follows the agent through a restart: while the
// agent is away durable_version() keeps its value and txn_state says the
// agent is not running (57P03); once it is back, durable_version()
// advances with the commits again, without any backend asking the agent.
func TestTheDurabilityFeedFollowsARestartedAgent(t *testing.T) {
	c, conn, v1, _ := startWithANote(t, 1)
	ctx := context.Background()
	pgtest.AwaitDurableVersion(t, conn, v1, convergeLimit)

	c.StopAgent(0)
	var kept int64
	if err := conn.QueryRow(ctx, `SELECT tashkent.durable_version()`).Scan(&kept); err != nil || kept < v1 {
		t.Fatalf("durable_version() while the agent is stopped: %d, %v; want at least %d, as before", kept, err, v1)
	}
	_, err := conn.Exec(ctx, `SELECT tashkent.txn_state($1)`, v1)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.CannotConnectNow || pe.Hint == "" {
		t.Fatalf("txn_state while the agent is stopped: %v, want 57P03 with a hint", err)
	}

	c.StartAgent(0)
	writer := c.Connect(0)
	var v2 int64
	for k := 2; k <= 4; k++ {
		execSQL(t, writer, `INSERT INTO notes VALUES ($1, 'after')`, k)
	}
	v2, _ = lastCommit(t, writer)
	pgtest.AwaitDurableVersion(t, conn, v2, convergeLimit)
	if log := c.DBs[0].LogTail(100000); strings.Count(log, "tashkent durability feed: following the agent") < 2 {
		t.Fatalf("the server log does not show the feed following the agent again after its restart:\n%s", log)
	}
}
