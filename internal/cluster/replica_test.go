package cluster_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// Tests of `tashkent replica add|remove|rebuild`, the supervisor and `up
// --replicas N` on an existing cluster, against the real binary and real
// PostgreSQL servers.

// newCluster starts a cluster of n replicas (no demo) in a new directory
// and registers its cleanup: down, then whatever the last cluster.json
// still records as running.
func newCluster(t *testing.T, bin string, n int, extra ...string) (string, *cluster.State) {
	t.Helper()
	return newClusterIn(t, bin, newClusterDir(t, "tashkent-replica-test-"), n, extra...)
}

// newClusterIn is newCluster in a directory the caller made.
func newClusterIn(t *testing.T, bin, dir string, n int, extra ...string) (string, *cluster.State) {
	t.Helper()
	t.Cleanup(func() {
		cluster.Down(context.Background(), dir) // by recorded PID
		if st, err := cluster.Load(dir); err == nil {
			killLeftovers(t, bin, st)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("cluster directory kept for inspection: %s", dir)
		}
	})
	args := append([]string{"up", "--data-dir", dir, "--replicas", strconv.Itoa(n), "--no-demo"}, extra...)
	mustRun(t, bin, args...)
	return dir, load(t, dir)
}

func load(t *testing.T, dir string) *cluster.State {
	t.Helper()
	st, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// loadBulk fills a table large enough that a copy of a replica takes a
// few seconds at a few MiB/s (about 25 MiB of rows), and creates a table
// numbered by a sequence.
func loadBulk(t *testing.T, st *cluster.State) {
	t.Helper()
	dsn := st.Replicas[0].DSN()
	query(t, dsn, "CREATE TABLE bulk (id int PRIMARY KEY, pad text)")
	query(t, dsn, "INSERT INTO bulk SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, 80000) g")
	query(t, dsn, "CREATE TABLE numbered (id serial PRIMARY KEY, v text)")
	query(t, dsn, "INSERT INTO numbered (v) SELECT 'from replica1' FROM generate_series(1, 100)")
}

// startWorkload runs groupWorkload on every replica of st until the
// returned stop is called.
func startWorkload(t *testing.T, st *cluster.State, w *groupWorkload) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range st.Replicas {
		wg.Go(func() { w.run(ctx, t, r.DSN(), r.Index) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// ackedBy counts the commits acknowledged to the client of replica k.
func (w *groupWorkload) ackedBy(k int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for id := range w.acked {
		if id/10_000_000 == k {
			n++
		}
	}
	return n
}

// A replica added while clients write on the others copies a donor,
// catches up and ends with the same contents, with every acknowledged
// commit; the copy's progress is printed and shown by status. Then a
// replica is removed, and `up --replicas N` grows (reusing the free index)
// and shrinks (highest index first) the cluster.
func TestReplicaAddUnderLoadThenRemoveAndResize(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2)
	setupTable(t, st)
	loadBulk(t, st)

	w := &groupWorkload{acked: map[int]bool{}}
	stop := startWorkload(t, st, w)
	time.Sleep(2 * time.Second)
	before, t0 := w.ackedBy(1), time.Now()
	time.Sleep(2 * time.Second)
	donorRateBefore := float64(w.ackedBy(1)-before) / time.Since(t0).Seconds()

	add, out := startAdd(t, bin, dir, "--donor", "1", "--max-rate", "8M")
	copyStart, ackedAtCopyStart := time.Now(), w.ackedBy(1)
	joining := awaitJoining(t, bin, dir, func(j cluster.TransferStatus) bool { return j.Running && j.BytesDone > 0 })
	if joining.Replica != "replica3" || joining.Donor != "replica1" || joining.Kind != "add" || joining.BytesTotal < 20<<20 {
		t.Errorf("status during the add: %+v", joining)
	}
	if st := load(t, dir); len(st.Replicas) != 2 {
		t.Errorf("cluster.json records %d replicas while the copy runs, want 2", len(st.Replicas))
	}
	for !strings.Contains(out.String(), "copied ") && add.ProcessState == nil && time.Since(copyStart) < 2*time.Minute {
		time.Sleep(20 * time.Millisecond)
	}
	donorRateDuring := float64(w.ackedBy(1)-ackedAtCopyStart) / time.Since(copyStart).Seconds()
	if err := add.Wait(); err != nil {
		t.Fatalf("replica add: %v\n%s", err, out.String())
	}
	t.Logf("$ tashkent replica add\n%s", out.String())
	for _, want := range []string{"copy from replica1:", "MiB/s, ETA", "copied ", "replica3 serves"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("replica add printed no %q", want)
		}
	}
	t.Logf("donor (replica1) commits/s of its client: %.0f before the copy, %.0f during it (%+.0f%%)",
		donorRateBefore, donorRateDuring, 100*(donorRateDuring/donorRateBefore-1))

	st = load(t, dir)
	r3 := st.ReplicaByIndex(3)
	if len(st.Replicas) != 3 || r3 == nil || r3.Name != "replica3" {
		t.Fatalf("cluster.json after the add: %+v", st.Replicas)
	}
	time.Sleep(time.Second) // the workload goes on with the new replica in the cluster
	stop()
	checkConverged(t, st, w)
	if _, err := os.Stat(filepath.Join(r3.Dir, "transfer.json")); !os.IsNotExist(err) {
		t.Errorf("the transfer's record outlived the add: %v", err)
	}
	// The new replica's sequences hand out its own values (index 3).
	id, err := strconv.Atoi(query(t, r3.DSN(), "INSERT INTO numbered (v) VALUES ('on replica3') RETURNING id"))
	if err != nil || id%16 != 3 {
		t.Errorf("a sequence on replica3 handed out %d (%v), want a value congruent to 3 modulo 16", id, err)
	}

	// remove replica2: its processes stop, cluster.json forgets it, its
	// data is kept aside; the others go on.
	r2 := st.ReplicaByIndex(2)
	out2 := mustRun(t, bin, "replica", "remove", "--data-dir", dir, "2")
	for _, pid := range []int{r2.Agent.PID, r2.Postgres.PID} {
		if process.Alive(pid) {
			t.Errorf("pid %d of replica2 still runs after remove", pid)
		}
	}
	st = load(t, dir)
	if len(st.Replicas) != 2 || st.ReplicaByIndex(2) != nil {
		t.Fatalf("cluster.json after remove: %+v", st.Replicas)
	}
	if rep, err := st.QueryCertifier(context.Background(), st.CertifierAddr()); err != nil {
		t.Error(err)
	} else if names := sessionNames(rep.Replicas); names != "replica1 replica3" {
		t.Errorf("the certifier lists the replicas %q after replica2 was removed, want replica1 replica3", names)
	}
	kept, _ := filepath.Glob(filepath.Join(dir, "removed", "replica2-*", "pgdata", "PG_VERSION"))
	if len(kept) != 1 || !strings.Contains(out2, "kept in") {
		t.Errorf("replica2's data was not kept in DIR/removed: %v", kept)
	}
	w2 := &groupWorkload{acked: map[int]bool{}}
	stop = startWorkload(t, st, w2)
	time.Sleep(time.Second)
	stop()
	checkConverged(t, st, w2)

	// up --replicas 3 grows back into the free index 2; --replicas 2
	// shrinks by removing the highest index, 3.
	mustRun(t, bin, "up", "--data-dir", dir, "--replicas", "3", "--no-demo")
	st = load(t, dir)
	if names := replicaNames(st); names != "replica1 replica2 replica3" {
		t.Fatalf("after up --replicas 3: %s", names)
	}
	checkRunning(t, st)
	checkConverged(t, st, w2)
	mustRun(t, bin, "up", "--data-dir", dir, "--replicas", "2", "--no-demo")
	if names := replicaNames(load(t, dir)); names != "replica1 replica2" {
		t.Fatalf("after up --replicas 2: %s", names)
	}
	if s := status(t, bin, dir); !s.Healthy {
		t.Errorf("status after the resizes: %+v", s)
	}
}

func sessionNames(sessions []*pb.ReplicaSession) string {
	var names []string
	for _, r := range sessions {
		names = append(names, r.Name)
	}
	return strings.Join(names, " ")
}

func replicaNames(st *cluster.State) string {
	var names []string
	for _, r := range st.Replicas {
		names = append(names, r.Name)
	}
	return strings.Join(names, " ")
}

// awaitJoining polls status until a joining replica's transfer satisfies
// ok, and returns it.
func awaitJoining(t *testing.T, bin, dir string, ok func(cluster.TransferStatus) bool) cluster.TransferStatus {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		out, err := run(t, bin, "status", "--data-dir", dir, "--json")
		var s cluster.Status
		if err == nil && json.Unmarshal([]byte(out), &s) == nil {
			for _, j := range s.Joining {
				if ok(j) {
					return j
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("status showed no joining replica within a minute")
	return cluster.TransferStatus{}
}

// haltReplica makes replica k's agent halt, as a version it cannot apply
// does: k drops table halt_me in maintenance (a change of its own), then a
// row is inserted into halt_me on another replica.
func haltReplica(t *testing.T, st *cluster.State, k int) {
	t.Helper()
	var other *cluster.Replica
	for _, r := range st.Replicas {
		if r.Index != k {
			other = r
			break
		}
	}
	execOn(t, st.ReplicaByIndex(k).DSN(), "SET tashkent.maintenance = on", "DROP TABLE halt_me")
	query(t, other.DSN(), "INSERT INTO halt_me SELECT coalesce(max(id), 0) + 1 FROM halt_me")
}

// awaitAgentHealth polls status until replica k's agent says what ok
// accepts.
func awaitAgentHealth(t *testing.T, bin, dir string, k int, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		for _, r := range status(t, bin, dir).Replicas {
			if r.Index == k {
				last = r.AgentHealth
				if ok(last) {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("replica %d's agent says %q after a minute", k, last)
}

// awaitHealthy polls status until the cluster is healthy.
func awaitHealthy(t *testing.T, bin, dir string) *cluster.Status {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := status(t, bin, dir)
		if s.Healthy {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster is not healthy after two minutes: %+v", s)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// A replica whose agent halted is rebuilt by the supervisor from a donor,
// says so in its agent log, the supervisor's log and status, and ends with
// the others' contents and every acknowledged commit. With automatic
// rebuild off, a halted replica stays halted until `tashkent replica
// rebuild` rebuilds it.
func TestAHaltedReplicaIsRebuiltAutomaticallyAndOnDemand(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2)
	setupTable(t, st)
	query(t, st.Replicas[0].DSN(), "CREATE TABLE halt_me (id int PRIMARY KEY)")
	eventually(t, st.Replicas[1].DSN(), "SELECT count(*)::text FROM pg_tables WHERE tablename = 'halt_me'", "1")

	w := &groupWorkload{acked: map[int]bool{}}
	stop := startWorkload(t, st, w)
	time.Sleep(time.Second)
	haltReplica(t, st, 2)
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool {
		return strings.HasPrefix(h, "serving") && load(t, dir).ReplicaByIndex(2).Rebuilt != nil
	})
	s := awaitHealthy(t, bin, dir)
	b := s.Replicas[1].Rebuilt
	if b == nil || !b.Automatic || b.Donor != "replica1" || !strings.Contains(b.Reason, "halted") || !strings.Contains(b.Reason, "halt_me") {
		t.Fatalf("replica2 after its agent halted: rebuilt %+v, want an automatic rebuild from replica1 naming the cause", b)
	}
	time.Sleep(time.Second)
	stop()
	checkConverged(t, load(t, dir), w)
	r2 := st.ReplicaByIndex(2)
	if log := readFile(t, r2.Agent.Log); !strings.Contains(log, "replica2: rebuilding it automatically from replica1 (the agent halted:") ||
		!strings.Contains(log, "replica2: rebuilt from replica1; it serves") {
		t.Errorf("replica2's agent.log does not tell of the rebuild:\n%s", tailLines(log, 20))
	}
	if log := readFile(t, filepath.Join(dir, "supervisor.log")); !strings.Contains(log, "replica rebuilt automatically; it serves") {
		t.Errorf("the supervisor's log does not tell of the rebuild:\n%s", tailLines(log, 20))
	}
	if table := mustRun(t, bin, "status", "--data-dir", dir); !strings.Contains(table, "replica2: rebuilt automatically at") ||
		!strings.Contains(table, "supervisor pid") {
		t.Errorf("status does not show the supervisor and the rebuild")
	}
	firstKept := checkKeptBeforeRebuild(t, dir, "")

	// Automatic rebuild off: the supervisor stops, and a halted replica
	// stays halted until rebuilt on demand.
	mustRun(t, bin, "up", "--data-dir", dir, "--auto-rebuild=false", "--no-demo")
	if s := status(t, bin, dir); s.AutoRebuild || s.Supervisor == nil || s.Supervisor.Running {
		t.Fatalf("status after up --auto-rebuild=false: auto rebuild %v, supervisor %+v", s.AutoRebuild, s.Supervisor)
	}
	w2 := &groupWorkload{acked: map[int]bool{}}
	stop = startWorkload(t, st, w2)
	haltReplica(t, st, 2)
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool { return strings.HasPrefix(h, "halted") })
	time.Sleep(2 * cluster.SuperviseIntervalDefault)
	if got := load(t, dir).ReplicaByIndex(2).Rebuilt; got.At != b.At {
		t.Fatalf("replica2 was rebuilt again with automatic rebuild off: %+v", got)
	}
	out := mustRun(t, bin, "replica", "rebuild", "--data-dir", dir, "--donor", "1", "2")
	if !strings.Contains(out, "copied ") || !strings.Contains(out, "replica2 rebuilt from replica1") ||
		!strings.Contains(out, "the data directory from before the rebuild is kept in") ||
		!strings.Contains(out, "replica2: rebuilding it from replica1 (asked for with tashkent replica rebuild; the agent had halted: ") {
		t.Errorf("replica rebuild printed:\n%s", out)
	}
	checkKeptBeforeRebuild(t, dir, firstKept)
	s = awaitHealthy(t, bin, dir)
	if b := s.Replicas[1].Rebuilt; b == nil || b.Automatic || !strings.Contains(b.Reason, "asked for") || !strings.Contains(b.Reason, "halted") {
		t.Errorf("replica2 after replica rebuild: rebuilt %+v", b)
	}
	time.Sleep(time.Second)
	stop()
	checkConverged(t, load(t, dir), w2)
}

// checkKeptBeforeRebuild checks that DIR/removed holds one data
// directory of replica2 from before a rebuild, other than the one kept
// before (earlier), and returns it.
func checkKeptBeforeRebuild(t *testing.T, dir, earlier string) string {
	t.Helper()
	kept, _ := filepath.Glob(filepath.Join(dir, "removed", "replica2-rebuilt-*"))
	if len(kept) != 1 || kept[0] == earlier {
		t.Fatalf("DIR/removed holds %v from before replica2's rebuilds, want one, not %q", kept, earlier)
	}
	if _, err := os.Stat(filepath.Join(kept[0], "pgdata", "PG_VERSION")); err != nil {
		t.Errorf("what a rebuild kept is not a data directory: %v", err)
	}
	return kept[0]
}

// execOn runs statements one after the other on one connection.
func execOn(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startAdd starts `tashkent replica add` in the background.
func startAdd(t *testing.T, bin, dir string, args ...string) (*exec.Cmd, *testbin.Output) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"replica", "add", "--data-dir", dir}, args...)...)
	out := &testbin.Output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out
}

// checkNotServed checks that replica index 3, whose add was interrupted,
// is neither recorded nor running, and that its copy is not in place.
func checkNotServed(t *testing.T, dir string) {
	t.Helper()
	st := load(t, dir)
	if st.ReplicaByIndex(3) != nil {
		t.Errorf("an interrupted add recorded replica3: %+v", st.Replicas)
	}
	rd := filepath.Join(dir, "replica3")
	for _, d := range []string{filepath.Join(rd, "pgdata"), filepath.Join(rd, "pgdata.transfer")} {
		if pid, ok := pgserver.Running(d); ok {
			t.Errorf("a PostgreSQL (pid %d) serves %s, left by an interrupted add", pid, d)
		}
	}
	if _, err := os.Stat(filepath.Join(rd, "pgdata")); !os.IsNotExist(err) {
		t.Errorf("an interrupted add put a data directory in place: %v", err)
	}
}

// An add interrupted by killing the joining command, and then by killing
// the donor's PostgreSQL, while clients write: nothing is recorded or
// started, status shows the add interrupted, and running the command again
// completes it, with every acknowledged commit on every replica.
func TestAnInterruptedAddRestartsCleanly(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2)
	setupTable(t, st)
	loadBulk(t, st)
	w := &groupWorkload{acked: map[int]bool{}}
	stop := startWorkload(t, st, w)
	copying := func(j cluster.TransferStatus) bool { return j.Running && j.Phase == "copying" && j.BytesDone >= 4<<20 }

	// The joining command killed: its pg_basebackup dies with it.
	add, _ := startAdd(t, bin, dir, "--donor", "1", "--max-rate", "2M")
	j := awaitJoining(t, bin, dir, copying)
	if j.CopierPID == 0 {
		t.Fatalf("the transfer record names no copier: %+v", j)
	}
	syscall.Kill(add.Process.Pid, syscall.SIGKILL)
	add.Wait()
	if !process.WaitGone(context.Background(), j.CopierPID, 10*time.Second) {
		t.Errorf("pg_basebackup (pid %d) outlived the add that ran it", j.CopierPID)
	}
	checkNotServed(t, dir)
	if s := status(t, bin, dir); len(s.Joining) != 1 || s.Joining[0].Running {
		t.Errorf("status after the add was killed: joining %+v, want replica3 interrupted", s.Joining)
	}
	if table := mustRun(t, bin, "status", "--data-dir", dir); !strings.Contains(table, "replica3 (joining): add from replica1 INTERRUPTED while copying") {
		t.Errorf("status table does not show the interrupted add")
	}
	mustRun(t, bin, "up", "--data-dir", dir, "--no-demo")
	checkNotServed(t, dir)

	// The donor's PostgreSQL killed: the add fails and records nothing.
	add, out := startAdd(t, bin, dir, "--donor", "1", "--max-rate", "2M")
	awaitJoining(t, bin, dir, copying)
	for _, pid := range postgresTree(st.Replicas[0].Postgres.PID) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := add.Wait(); err == nil || !strings.Contains(out.String(), "nothing was recorded") {
		t.Fatalf("replica add whose donor was killed: %v\n%s", err, out.String())
	}
	t.Logf("replica add whose donor was killed:\n%s", out.String())
	checkNotServed(t, dir)
	mustRun(t, bin, "up", "--data-dir", dir, "--no-demo") // restarts the donor's PostgreSQL

	// Again, to the end.
	mustRun(t, bin, "replica", "add", "--data-dir", dir)
	st = load(t, dir)
	if names := replicaNames(st); names != "replica1 replica2 replica3" {
		t.Fatalf("after the add: %s", names)
	}
	if _, err := os.Stat(filepath.Join(dir, "replica3", "pgdata.transfer")); !os.IsNotExist(err) {
		t.Errorf("the interrupted copies were not cleared: %v", err)
	}
	time.Sleep(time.Second)
	stop()
	checkConverged(t, st, w)
	if s := awaitHealthy(t, bin, dir); len(s.Joining) != 0 {
		t.Errorf("status still shows joining replicas: %+v", s.Joining)
	}
}
