package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// `tashkent up` on a cluster with a halted replica leaves its agent
// running, halted, finishes, and says so: with automatic rebuild off it
// gives the command that rebuilds the replica; with it on it starts the
// supervisor, which rebuilds the replica, also after a restart of the
// whole cluster (the agent halts again on the same version).
func TestUpWithAHaltedReplicaLeavesItToTheSupervisor(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2, "--auto-rebuild=false")
	query(t, st.Replicas[0].DSN(), "CREATE TABLE halt_me (id int PRIMARY KEY)")
	eventually(t, st.Replicas[1].DSN(), "SELECT count(*)::text FROM pg_tables WHERE tablename = 'halt_me'", "1")
	haltReplica(t, st, 2)
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool { return strings.HasPrefix(h, "halted") })

	out := mustRun(t, bin, "up", "--data-dir", dir, "--no-demo", "--ready-timeout", "20s")
	if want := fmt.Sprintf("rebuild it with `tashkent replica rebuild --data-dir %s 2`", dir); !strings.Contains(out, "replica2: HALTED") || !strings.Contains(out, want) {
		t.Errorf("up with replica2 halted and automatic rebuild off does not say %q", want)
	}
	if pid := load(t, dir).ReplicaByIndex(2).Agent.PID; pid != st.ReplicaByIndex(2).Agent.PID {
		t.Errorf("up replaced the halted agent (pid %d) with pid %d", st.ReplicaByIndex(2).Agent.PID, pid)
	}

	mustRun(t, bin, "down", "--data-dir", dir)
	out = mustRun(t, bin, "up", "--data-dir", dir, "--auto-rebuild", "--ready-timeout", "20s")
	if !strings.Contains(out, "replica2: HALTED") || !strings.Contains(out, "the supervisor rebuilds it") || !strings.Contains(out, "supervisor: started") {
		t.Errorf("up with replica2 halted again and automatic rebuild on does not say that the supervisor rebuilds it")
	}
	if !strings.Contains(out, "No demo: replica2 halted") || !strings.Contains(out, "HALTED: refuses clients until rebuilt") {
		t.Errorf("up with replica2 halted does not mark it among the endpoints, or does not say why it runs no demo")
	}
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool {
		return strings.HasPrefix(h, "serving") && load(t, dir).ReplicaByIndex(2).Rebuilt != nil
	})
	if b := load(t, dir).ReplicaByIndex(2).Rebuilt; !b.Automatic || !strings.Contains(b.Reason, "halt_me") {
		t.Errorf("replica2 after up: rebuilt %+v, want automatically, for its halt", b)
	}
	awaitHealthy(t, bin, dir)
}
