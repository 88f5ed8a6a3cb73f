package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Writesets certified through either agent are committed on both
// replicas, in the certifier's order (Tashkent §6.2 C4, C5): a local
// version whose backend abandons it (it failed after certification) or
// whose backend leaves before committing it is applied by its own agent
// (§8.1); a conflicting writeset gets an Abort naming the version it lost
// to; sessions of both replicas commit in between.
func TestCertifiedWritesetsCommitOnEveryReplica(t *testing.T) {
	c, base := startWithSchema(t, 2, clustertest.Options{}, schema)
	b1, b2 := simulated(t, c, 0), simulated(t, c, 1)

	v1 := b1.commit(base, upsert(1, "a"))
	b1.abandon(v1)
	leaving := simulated(t, c, 1)
	v2 := leaving.commit(base, upsert(2, "b"))
	leaving.close()

	// Row 1 from a snapshot without v1, on the other replica: a conflict.
	d := b2.certify(base, upsert(1, "lost"))
	if d.Kind != wire.Abort || d.Version != v1 || d.AbortReason != uint8(pb.AbortReason_ABORT_REASON_CONFLICT) || d.Detail == "" {
		t.Fatalf("conflicting writeset: %+v, want an abort for a conflict with version %d, with a detail", d, v1)
	}

	// Real sessions, alternating between the replicas: their versions
	// wait on each replica for v1 and v2 to be applied.
	ctx := context.Background()
	r1, r2 := c.Connect(0), c.Connect(1)
	for k := 3; k <= 12; k++ {
		conn := r1
		if k%2 == 0 {
			conn = r2
		}
		if _, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1, 'x')`, k); err != nil {
			t.Fatalf("insert row %d: %v", k, err)
		}
	}
	last := c.AwaitConverged(time.Minute)
	if last < v2+10 {
		t.Errorf("the certifier's durable version is %d, want at least %d", last, v2+10)
	}
	want := "(1,a) (10,x) (11,x) (12,x) (2,b) (3,x) (4,x) (5,x) (6,x) (7,x) (8,x) (9,x)"
	for i := range 2 {
		if got := c.Rows(i, "t"); got != want {
			t.Errorf("replica %d: t = %s, want %s", i+1, got, want)
		}
		if got := c.Committed(i); got != last {
			t.Errorf("replica %d committed %d, want %d", i+1, got, last)
		}
	}
}

// Only the agent's own apply connection may register as the applier, and
// only sessions of the replicated database are served.
func TestTheAgentRefusesStrangers(t *testing.T) {
	c, _ := startWithSchema(t, 1, clustertest.Options{}, schema)
	ctx := context.Background()
	conn := c.Connect(0)
	_, err := conn.Exec(ctx, `SELECT tashkent.register_applier()`)
	if err == nil || !strings.Contains(err.Error(), "not the agent's apply connection") {
		t.Fatalf("a session registered as the applier: %v", err)
	}
	if _, err := conn.Exec(ctx, `BEGIN; SELECT tashkent.apply_versions(1, 1)`); pgcode.Of(err) != pgcode.NotApplier {
		t.Fatalf("apply_versions from a session: %v, want TK003", err)
	}
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	_, w := dialBackend(t, c, 0, "other")
	if w.Accepted || !strings.Contains(w.Text, `replicates database "postgres", not "other"`) {
		t.Fatalf("a session of another database: %+v", w)
	}
	// The refusals changed nothing: the session still commits.
	if _, err := conn.Exec(ctx, `INSERT INTO t VALUES (1, 'a')`); err != nil {
		t.Fatal(err)
	}
	c.AwaitConverged(time.Minute)
	if got := c.Rows(0, "t"); got != "(1,a)" {
		t.Errorf("t = %s", got)
	}
}

// A remote batch is sent at once and waits inside PostgreSQL for the local
// version before it; when that version's backend abandons it, the batch is
// cancelled and applied again from the abandoned version (Tashkent §8.1).
func TestAnAbandonedVersionCancelsTheBatchWaitingForIt(t *testing.T) {
	c, base := startWithSchema(t, 2, clustertest.Options{}, schema)
	b1, b2 := simulated(t, c, 0), simulated(t, c, 1)
	v1 := b1.commit(base, upsert(1, "local"))
	v2 := b2.commit(base, upsert(2, "remote"))
	b2.abandon(v2)
	c.AwaitCommitted(1, v2, time.Minute)

	conn := c.Connect(0)
	deadline := time.Now().Add(time.Minute)
	for {
		var first, waiting int64
		err := conn.QueryRow(context.Background(), `SELECT first, waiting_for FROM tashkent.backends() WHERE state = 'applying'`).Scan(&first, &waiting)
		if err == nil && uint64(first) == v2 && uint64(waiting) == v1 {
			break // the batch of v2 waits for v1
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 1's applier is not waiting with version %d for %d: %v", v2, v1, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := c.Committed(0); got != base {
		t.Fatalf("replica 1 committed %d before version %d", got, v1)
	}
	b1.abandon(v1)
	c.AwaitCommitted(0, v2, time.Minute)
	if got := c.Rows(0, "t"); got != "(1,local) (2,remote)" {
		t.Errorf("replica 1: t = %s", got)
	}
}

// A version the replica cannot apply halts it: the gate closes saying it
// must be rebuilt, and its sessions' writes are refused as unavailable.
// Here the version writes a table that replica 2 created in maintenance,
// so only there.
func TestAVersionThatCannotBeAppliedHaltsTheReplica(t *testing.T) {
	c, _ := startWithSchema(t, 2, clustertest.Options{}, schema+`; CREATE ROLE app LOGIN`)
	ctx := context.Background()
	session := c.Connect(0) // opened before the halt: superusers are let in anyway
	c.Exec(1, `SET tashkent.maintenance = on; CREATE TABLE only_here (k int PRIMARY KEY)`)
	c.Exec(1, `INSERT INTO only_here VALUES (1)`)
	c.AwaitState(0, agent.StateHalted, time.Minute)

	_, err := session.Exec(ctx, `INSERT INTO t VALUES (1, 'a')`)
	if pgcode.Of(err) != pgcode.CannotConnectNow || !strings.Contains(err.Error(), "must be rebuilt") {
		t.Errorf("a write on a halted replica: %v, want 57P03 saying it must be rebuilt", err)
	}
	_, err = c.ConnectAs(0, "app")
	if pgcode.Of(err) != pgcode.CannotConnectNow || !strings.Contains(err.Error(), "must be rebuilt") {
		t.Errorf("a client of a halted replica: %v, want 57P03 saying it must be rebuilt", err)
	}
}
