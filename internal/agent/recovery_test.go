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

// After PostgreSQL is killed (synchronous_commit=off: it may lose its
// last commits), the agent waits for it, starts again from the version it
// recovered (Tashkent §7.1, case 2), replays the rest from the
// certifier's log, versions certified meanwhile included, and no version
// is lost.
func TestTheReplicaRecoversAfterPostgreSQLIsKilled(t *testing.T) {
	c, _ := startWithSchema(t, 2, clustertest.Options{}, schema)
	v := write(t, c, 1, 1, 60)
	c.AwaitCommitted(0, v, time.Minute)

	if err := c.DBs[0].Kill9(); err != nil {
		t.Fatal(err)
	}
	write(t, c, 1, 61, 60)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.DBs[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	v = write(t, c, 1, 121, 20)
	c.AwaitCommitted(0, v, 2*time.Minute)
	c.AwaitState(0, agent.StateServing, 10*time.Second) // it serves once caught up
	want := c.Rows(1, "t")
	if got := c.Rows(0, "t"); got != want || strings.Count(got, "(") != 140 {
		t.Errorf("replica 1 after its recovery holds %d rows, replica 2 %d; they differ: %v", strings.Count(got, "("), strings.Count(want, "("), got != want)
	}
	if got, durable := c.Committed(0), c.Durable(); got != durable {
		t.Errorf("replica 1 committed %d, the certifier's durable version is %d", got, durable)
	}
	// The recovered replica's sessions commit again.
	c.AwaitCommitted(1, write(t, c, 0, 141, 1), time.Minute)
}

// After a restart of its database, the replica refuses clients (57P03)
// until its agent has caught up with what the certifier had made durable;
// the first client it admits sees every such version.
func TestClientsWaitUntilTheReplicaHasCaughtUp(t *testing.T) {
	c, _ := startWithSchema(t, 2, clustertest.Options{}, schema+`; CREATE ROLE app LOGIN`)
	c.StopAgent(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.DBs[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.DBs[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	write(t, c, 1, 1, 300)
	target := c.Durable()
	if _, err := c.ConnectAs(0, "app"); pgcode.Of(err) != pgcode.CannotConnectNow {
		t.Fatalf("a client of a replica without its agent: %v, want 57P03", err)
	}

	a := c.RunAgent(0, c.Config(0))
	refused := 0
	for {
		_, err := c.ConnectAs(0, "app")
		if err == nil {
			break
		}
		if pgcode.Of(err) != pgcode.CannotConnectNow {
			t.Fatalf("a client while the replica catches up: %v, want 57P03", err)
		}
		refused++
		time.Sleep(5 * time.Millisecond)
	}
	if got := c.Committed(0); got < target {
		t.Fatalf("the replica admitted a client at version %d, below the durable version %d", got, target)
	}
	<-a.Ready()
	t.Logf("refused %d connections while the agent started and caught up", refused)
}
