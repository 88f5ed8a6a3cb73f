package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// Writesets certified through either agent are committed on both
// replicas, in the certifier's order (Tashkent §6.2 C4, C5): a local
// version whose backend abandons it (it failed after certification) or
// whose backend leaves before committing it is applied by its own agent
// (§8.1); a conflicting writeset gets an Abort naming the version it lost
// to.
func TestCertifiedWritesetsCommitOnEveryReplica(t *testing.T) {
	c := startCluster(t, 2)
	c.exec(`CREATE TABLE t (k int PRIMARY KEY, v text)`)
	b1, b2 := c.session(0), c.session(1)

	v1 := b1.commit(0, upsert(1, "a"))
	b1.abandon(v1)
	leaving := c.session(1)
	v2 := leaving.commit(0, upsert(2, "b"))
	leaving.close()

	// Row 1 from a snapshot without v1, on the other replica: a conflict.
	d := b2.certify(0, upsert(1, "lost"))
	if d.Kind != wire.Abort || d.Version != v1 || d.AbortReason != uint8(pb.AbortReason_ABORT_REASON_CONFLICT) || d.Detail == "" {
		t.Fatalf("conflicting writeset: %+v, want an abort for a conflict with version %d, with a detail", d, v1)
	}

	// More, alternating between the replicas.
	last := v2
	for k := 3; k <= 12; k++ {
		b := []*backend{b1, b2}[k%2]
		last = b.commit(last, upsert(k, "x"))
		b.abandon(last)
	}
	want := "(1,a) (2,b) (3,x) (4,x) (5,x) (6,x) (7,x) (8,x) (9,x) (10,x) (11,x) (12,x)"
	for i := range 2 {
		c.awaitCommitted(i, last, time.Minute)
		if got := rows(t, c.connect(i), "t"); got != sortedRows(want) {
			t.Errorf("replica %d: t = %s, want %s", i+1, got, want)
		}
	}
	if got := c.committed(0); got != last {
		t.Errorf("replica 1 committed %d, want %d", got, last)
	}
}

// sortedRows orders rows as text, as rows() reads them.
func sortedRows(s string) string {
	f := strings.Fields(s)
	for i := range f {
		for j := i + 1; j < len(f); j++ {
			if f[j] < f[i] {
				f[i], f[j] = f[j], f[i]
			}
		}
	}
	return strings.Join(f, " ")
}

// Only the agent's own apply connection may register as the applier, and
// only sessions of the replicated database are served.
func TestTheAgentRefusesStrangers(t *testing.T) {
	c := startCluster(t, 1)
	conn := c.connect(0)
	_, err := conn.Exec(context.Background(), `SELECT tashkent.register_applier()`)
	if err == nil || !strings.Contains(err.Error(), "not the agent's apply connection") {
		t.Fatalf("a session registered as the applier: %v", err)
	}
	if _, err := conn.Exec(context.Background(), `BEGIN; SELECT tashkent.apply_versions(1, 1)`); sqlState(err) != "TK003" {
		t.Fatalf("apply_versions from a session: %v, want TK003", err)
	}
	_, w := c.dialBackend(0, "other")
	if w.Accepted || !strings.Contains(w.Text, `replicates database "postgres", not "other"`) {
		t.Fatalf("a session of another database: %+v", w)
	}
	c.exec(`CREATE TABLE t (k int PRIMARY KEY, v text)`)
	b := c.session(0)
	v := b.commit(0, upsert(1, "a"))
	b.abandon(v)
	c.awaitCommitted(0, v, time.Minute)
}

// A remote batch is sent at once and waits inside PostgreSQL for the local
// version before it; when that version's backend abandons it, the batch is
// cancelled and applied again from the abandoned version (Tashkent §8.1).
func TestAnAbandonedVersionCancelsTheBatchWaitingForIt(t *testing.T) {
	c := startCluster(t, 2)
	c.exec(`CREATE TABLE t (k int PRIMARY KEY, v text)`)
	b1, b2 := c.session(0), c.session(1)
	v1 := b1.commit(0, upsert(1, "local"))
	v2 := b2.commit(0, upsert(2, "remote"))
	b2.abandon(v2)
	c.awaitCommitted(1, v2, time.Minute)

	conn := c.connect(0)
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
	if got := c.committed(0); got != 0 {
		t.Fatalf("replica 1 committed %d before version %d", got, v1)
	}
	b1.abandon(v1)
	c.awaitCommitted(0, v2, time.Minute)
	if got := rows(t, conn, "t"); got != "(1,local) (2,remote)" {
		t.Errorf("replica 1: t = %s", got)
	}
}

// A version the replica cannot apply halts it: the gate closes saying it
// must be rebuilt, and certifications are refused as unavailable.
func TestAVersionThatCannotBeAppliedHaltsTheReplica(t *testing.T) {
	c := startCluster(t, 2)
	c.exec(`CREATE TABLE t (k int PRIMARY KEY, v text); CREATE ROLE app LOGIN`)
	if _, err := c.connect(1).Exec(context.Background(), `CREATE TABLE only_here (k int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	b2 := c.session(1)
	v := b2.commit(0, &pb.Writeset{Changes: []*pb.Change{{Table: "public.only_here", Op: pb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte("(1)")}}})
	b2.abandon(v)
	deadline := time.Now().Add(time.Minute)
	for st, _ := c.agents[0].State(); st != agent.StateHalted; st, _ = c.agents[0].State() {
		if time.Now().After(deadline) {
			t.Fatalf("agent 1 is %s, want halted", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := c.session(0).certify(0, upsert(1, "a"))
	if d.Kind != wire.Unavailable || !strings.Contains(d.Detail, "must be rebuilt") {
		t.Errorf("certification on a halted replica: %+v", d)
	}
	err := connectAs(t, c.dbs[0], "app")
	if sqlState(err) != "57P03" || !strings.Contains(err.Error(), "must be rebuilt") {
		t.Errorf("a client of a halted replica: %v, want 57P03 saying it must be rebuilt", err)
	}
}
