package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
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

// A replica whose agent halted on a resource error (SQLSTATE class 53 or
// 58: here 58P01, a table's file gone from its disk) is not rebuilt by the
// supervisor, which logs why and what to do; the replica stays halted.
func TestTheSupervisorDoesNotRebuildAReplicaHaltedOnAResourceError(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	query(t, r1.DSN(), "CREATE TABLE victim (id int PRIMARY KEY)")
	eventually(t, r2.DSN(), "SELECT count(*)::text FROM pg_tables WHERE tablename = 'victim'", "1")
	file := query(t, r2.DSN(), "SELECT pg_relation_filepath('victim')")
	mustRun(t, bin, "down", "--data-dir", dir)
	if err := os.Remove(filepath.Join(r2.Postgres.DataDir, file)); err != nil {
		t.Fatal(err)
	}
	mustRun(t, bin, "up", "--data-dir", dir, "--no-demo")

	query(t, r1.DSN(), "INSERT INTO victim VALUES (1)")
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool { return strings.HasPrefix(h, "halted") })
	time.Sleep(3 * cluster.SuperviseIntervalDefault)
	if s := status(t, bin, dir); s.Replicas[1].Rebuilt != nil || !strings.Contains(s.Replicas[1].AgentHealth, "SQLSTATE 58P01") {
		t.Fatalf("replica2, halted on a missing file: rebuilt %+v, agent %q; want halted on 58P01, not rebuilt",
			s.Replicas[1].Rebuilt, s.Replicas[1].AgentHealth)
	}
	log := readFile(t, filepath.Join(dir, "supervisor.log"))
	if !strings.Contains(log, "halted on a resource error; the supervisor does not rebuild it") || !strings.Contains(log, "sqlstate=58P01") {
		t.Errorf("the supervisor's log does not say why it does not rebuild replica2:\n%s", tailLines(log, 10))
	}
	if n := strings.Count(log, "halted on a resource error"); n != 1 {
		t.Errorf("the supervisor's log says %d times that it does not rebuild replica2, want once", n)
	}
}
