package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent"
)

// write certifies n writesets through agent i, rows from..from+n-1 of t,
// each abandoned by its simulated backend so that the agent applies it;
// it returns the last version.
func (c *cluster) write(i, from, n int) uint64 {
	c.t.Helper()
	b := c.session(i)
	var v uint64
	for k := from; k < from+n; k++ {
		v = b.commit(c.agents[i].CommittedVersion(), upsert(k, fmt.Sprintf("v%d", k)))
		b.abandon(v)
	}
	return v
}

// After PostgreSQL is killed (synchronous_commit=off: it may lose its
// last commits), the agent waits for it, starts again from the version it
// recovered (Tashkent §7.1, case 2), replays the rest from the
// certifier's log, versions certified meanwhile included, and no version
// is lost.
func TestTheReplicaRecoversAfterPostgreSQLIsKilled(t *testing.T) {
	c := startCluster(t, 2)
	c.exec(`CREATE TABLE t (k int PRIMARY KEY, v text)`)
	v := c.write(1, 1, 60)
	c.awaitCommitted(0, v, time.Minute)

	if err := c.dbs[0].Kill9(); err != nil {
		t.Fatal(err)
	}
	v = c.write(1, 61, 60)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.dbs[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	v = c.write(1, 121, 20)
	c.awaitCommitted(0, v, 2*time.Minute)
	if st, why := c.agents[0].State(); st != agent.StateServing {
		t.Fatalf("agent 1 is %s after the recovery: %s", st, why)
	}
	want := rows(t, c.connect(1), "t")
	if got := rows(t, c.connect(0), "t"); got != want || strings.Count(got, "(") != 140 {
		t.Errorf("replica 1 after its recovery holds %d rows, replica 2 %d; they differ: %v", strings.Count(got, "("), strings.Count(want, "("), got != want)
	}
	if got, durable := c.committed(0), c.durable(); got != durable {
		t.Errorf("replica 1 committed %d, the certifier's durable version is %d", got, durable)
	}
	// The recovered agent certifies again.
	c.awaitCommitted(1, c.write(0, 141, 1), time.Minute)
}

// After a restart of its database, the replica refuses clients (57P03)
// until its agent has caught up with what the certifier had made durable;
// the first client it admits sees every such version.
func TestClientsWaitUntilTheReplicaHasCaughtUp(t *testing.T) {
	c := startCluster(t, 2)
	c.exec(`CREATE TABLE t (k int PRIMARY KEY, v text); CREATE ROLE app LOGIN`)
	c.stopAgent(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.dbs[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.dbs[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	c.write(1, 1, 300)
	target := c.durable()
	if err := connectAs(t, c.dbs[0], "app"); sqlState(err) != "57P03" {
		t.Fatalf("a client of a replica without its agent: %v, want 57P03", err)
	}

	a := c.runAgent(0)
	refused := 0
	for {
		err := connectAs(t, c.dbs[0], "app")
		if err == nil {
			break
		}
		if sqlState(err) != "57P03" {
			t.Fatalf("a client while the replica catches up: %v, want 57P03", err)
		}
		refused++
		time.Sleep(5 * time.Millisecond)
	}
	if got := c.committed(0); got < target {
		t.Fatalf("the replica admitted a client at version %d, below the durable version %d", got, target)
	}
	<-a.Ready()
	t.Logf("refused %d connections while the agent started and caught up", refused)
}
