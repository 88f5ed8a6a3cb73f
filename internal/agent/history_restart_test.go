package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// A certifier restart starts a new epoch: every replica records a second
// run, and an agent restarted afterwards is admitted with its history.
func TestAReplicaIsAdmittedAfterACertifierRestart(t *testing.T) {
	c, _ := startWithSchema(t, 2, clustertest.Options{}, schema)
	v := write(t, c, 0, 1, 3)
	c.AwaitCommitted(1, v, time.Minute)
	c.RestartCertifier()
	writeOnceTheCertifierIsBack(t, c)
	v = write(t, c, 0, 4, 3)
	c.AwaitCommitted(1, v, time.Minute)
	for i := range 2 {
		if rows, _ := historyRows(t, c, i); len(rows) != 2 {
			t.Fatalf("replica %d's history after a certifier restart: %v, want two runs", i+1, rows)
		}
	}
	c.StopAgent(1)
	c.StartAgent(1)
	c.AwaitState(1, agent.StateServing, time.Minute)
	v = write(t, c, 0, 10, 2)
	c.AwaitCommitted(1, v, time.Minute)
}

// The first entry of a new epoch reaches a replica whose database is
// down: its agent records the run once the database is back, applies the
// versions, and serves again; restarted, it is admitted with its history.
func TestAReplicaRecordsANewEpochThatArrivedWhileItsDatabaseWasDown(t *testing.T) {
	c, _ := startWithSchema(t, 2, clustertest.Options{}, schema)
	v := write(t, c, 0, 1, 3)
	c.AwaitCommitted(1, v, time.Minute)
	if err := c.DBs[1].Kill9(); err != nil {
		t.Fatal(err)
	}
	c.RestartCertifier()
	writeOnceTheCertifierIsBack(t, c)
	v = write(t, c, 0, 4, 3)
	time.Sleep(2 * time.Second) // replica 2's agent holds the new epoch's first entry
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.DBs[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	c.AwaitCommitted(1, v, 2*time.Minute)
	c.AwaitState(1, agent.StateServing, time.Minute)
	if rows, _ := historyRows(t, c, 1); len(rows) != 2 {
		t.Fatalf("replica 2's history: %v, want two runs", rows)
	}
	c.StopAgent(1)
	c.StartAgent(1)
	c.AwaitState(1, agent.StateServing, time.Minute)
}

// writeOnceTheCertifierIsBack retries a write through replica 1 until the
// restarted certifier takes it (a minute at most).
func writeOnceTheCertifierIsBack(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	conn := c.Connect(0)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := conn.Exec(context.Background(), `INSERT INTO t VALUES (100, 'after')`)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after the certifier restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
