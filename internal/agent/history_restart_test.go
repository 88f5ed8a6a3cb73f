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
	conn := c.Connect(0)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := conn.Exec(context.Background(), `INSERT INTO t VALUES (100, 'after')`)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after the certifier restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
