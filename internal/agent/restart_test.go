package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// A version certified through an agent that stopped before its backend
// committed it is remote to the next agent, which applies it: the
// backend's socket died with the agent, so it cannot commit (its outcome
// is unknown to it, and it rolls back).
func TestAVersionOfAStoppedAgentIsAppliedByTheNext(t *testing.T) {
	c, base := startWithSchema(t, 2, clustertest.Options{}, schema)
	b1 := simulated(t, c, 0)
	v := b1.commit(base, upsert(1, "a"))
	c.StopAgent(0)
	if !b1.closedByAgent(10 * time.Second) {
		t.Fatal("the stopped agent left its backends' connections open")
	}
	c.StartAgent(0)
	c.AwaitCommitted(0, v, time.Minute)
	c.AwaitCommitted(1, v, time.Minute)
	if got := c.Rows(0, "t"); got != "(1,a)" {
		t.Errorf("replica 1: t = %s", got)
	}
}

// A backend that holds a certified version, waiting for its turn, when
// its agent stops, commits it under the next agent: the next agent takes
// the version as local (inherited, Tashkent §7.2) instead of applying it,
// and applies the versions before it so that its turn comes. The version
// before it is a simulated backend's, never committed: its socket closes
// with the agent, so the next agent applies it.
func TestABackendHoldingAVersionCommitsItUnderTheNextAgent(t *testing.T) {
	c, base := startWithSchema(t, 2, clustertest.Options{}, schema)
	ctx := context.Background()
	b1 := simulated(t, c, 0)
	held := b1.commit(base, upsert(1, "simulated"))
	session := c.Connect(0)
	committed := make(chan error, 1)
	go func() {
		_, err := session.Exec(ctx, `INSERT INTO t VALUES (2, 'real')`)
		committed <- err
	}()
	var version int64
	conn := c.Connect(0)
	deadline := time.Now().Add(time.Minute)
	for {
		err := conn.QueryRow(ctx, `SELECT version FROM tashkent.backends() WHERE state = 'holding' AND pid = $1`,
			int32(session.PgConn().PID())).Scan(&version)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session does not hold a version: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if uint64(version) != held+1 {
		t.Fatalf("the session holds version %d, want %d", version, held+1)
	}

	c.StopAgent(0)
	c.StartAgent(0)
	select {
	case err := <-committed:
		if err != nil {
			t.Fatalf("the session's commit under the next agent: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the session's version was not committed under the next agent")
	}
	for i := range 2 {
		c.AwaitCommitted(i, uint64(version), time.Minute)
		if got := c.Rows(i, "t"); got != "(1,simulated) (2,real)" {
			t.Errorf("replica %d: t = %s", i+1, got)
		}
	}
}

// The agent's connections lost while the database stays up (their
// backends terminated) are replaced without a recovery: the applier
// registers again (a new agent generation), nothing is replayed, and the
// agent keeps serving. Its metrics and health say so.
func TestLostConnectionsAreReplacedWithoutRecovery(t *testing.T) {
	c, _ := startWithSchema(t, 2, clustertest.Options{
		Agent: func(_ int, cfg *agent.Config) { cfg.MetricsAddr = "127.0.0.1:0" },
	}, schema)
	c.AwaitCommitted(0, write(t, c, 1, 1, 5), time.Minute)
	conn := c.Connect(0)
	ctx := context.Background()
	var terminated int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name LIKE 'tashkent-agent%'`).Scan(&terminated); err != nil || terminated != 2 {
		t.Fatalf("terminated %d of the agent's backends, want 2: %v", terminated, err)
	}
	v := write(t, c, 1, 6, 5)
	c.AwaitCommitted(0, v, time.Minute)
	var gen int64
	if err := conn.QueryRow(ctx, `SELECT agent_generation FROM tashkent.status()`).Scan(&gen); err != nil || gen != 2 {
		t.Errorf("agent generation %d, %v; want 2 (registered again)", gen, err)
	}
	if st, why := c.Agents[0].State(); st != agent.StateServing {
		t.Errorf("agent 1 is %s: %s", st, why)
	}
	if got := c.Rows(0, "t"); strings.Count(got, "(") != 10 {
		t.Errorf("replica 1: t = %s", got)
	}
	base := "http://" + c.Agents[0].MetricsAddr().String()
	health := httpGet(t, base+"/healthz")
	metrics := httpGet(t, base+"/metrics")
	if !strings.HasPrefix(health, "serving") {
		t.Errorf("/healthz = %q", health)
	}
	for _, m := range []string{
		fmt.Sprintf("tashkent_agent_replica_version %d", v),
		`tashkent_agent_state{state="serving"} 1`,
		"tashkent_agent_remote_versions_applied_total 10",
		"tashkent_agent_starts_total 1",
	} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
