package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/configfile"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// newClusterDir makes a new directory for a cluster, named after
// pattern (os.MkdirTemp), that the postgres user can reach.
func newClusterDir(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs the tashkent binary and returns its combined output.
func run(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("$ tashkent %s\n%s", strings.Join(args, " "), out.String())
	return out.String(), err
}

func mustRun(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := run(t, bin, args...)
	if err != nil {
		t.Fatalf("tashkent %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// pids lists every process a cluster.json records, by what it is.
func pids(st *cluster.State) map[string]int {
	m := map[string]int{"certifier": st.Certifier.PID}
	if st.Supervisor != nil {
		m["supervisor"] = st.Supervisor.PID
	}
	for _, r := range st.Replicas {
		m[r.Name+" postgres"] = r.Postgres.PID
		m[r.Name+" agent"] = r.Agent.PID
	}
	return m
}

// query runs one statement on a replica (or any DSN) and returns the
// last row's single text column.
func query(t *testing.T, dsn, sql string, args ...any) string {
	t.Helper()
	s, err := tryQuery(dsn, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tryQuery(dsn, sql string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", dsn, err)
	}
	defer conn.Close(context.Background())
	var s string
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return "", fmt.Errorf("%s: %w", sql, err)
	}
	for rows.Next() {
		if err := rows.Scan(&s); err != nil {
			return "", fmt.Errorf("%s: %w", sql, err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", sql, err)
	}
	return s, nil
}

// eventually polls the query until it returns want (errors, such as a
// table not replicated yet, count as "not yet").
func eventually(t *testing.T, dsn, sql, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := tryQuery(dsn, sql)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: %q (err %v), want %q", sql, dsn, got, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func status(t *testing.T, bin, dir string) *cluster.Status {
	t.Helper()
	out := mustRun(t, bin, "status", "--data-dir", dir, "--json")
	var s cluster.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return &s
}

// checkRunning checks that every recorded process runs and is what the
// record says.
func checkRunning(t *testing.T, st *cluster.State) {
	t.Helper()
	for what, pid := range pids(st) {
		if pid == 0 || !process.Alive(pid) {
			t.Errorf("%s: pid %d not running", what, pid)
		}
	}
	for _, r := range st.Replicas {
		if err := pgserver.IsPostgres(r.Postgres.PID, r.Postgres.DataDir); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
	}
}

// killLeftovers kills the processes st records that are still running:
// tashkent processes of this test's binary (checked by /proc/PID/cmdline)
// and postgres servers of st's data directories.
func killLeftovers(t *testing.T, bin string, st *cluster.State) {
	tk := []int{st.Certifier.PID}
	if st.Supervisor != nil {
		tk = append(tk, st.Supervisor.PID)
	}
	for _, r := range st.Replicas {
		tk = append(tk, r.Agent.PID)
		if pgserver.IsPostgres(r.Postgres.PID, r.Postgres.DataDir) == nil {
			t.Errorf("cleanup: postgres %d of %s left running; stopping it", r.Postgres.PID, r.Name)
			pgserver.StopPID(context.Background(), r.Postgres.DataDir, r.Postgres.PID)
		}
	}
	for _, pid := range tk {
		if pid == 0 || !process.Alive(pid) {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.HasPrefix(string(raw), bin+"\x00") {
			t.Errorf("cleanup: %s left running (pid %d); killing it", strings.ReplaceAll(string(raw), "\x00", " "), pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// checkStartedFromConfig checks that every certifier and agent of st runs
// as `tashkent <sub> --config FILE`, FILE in its directory of the cluster,
// and that the file holds what names the instance and its ports.
func checkStartedFromConfig(t *testing.T, st *cluster.State) {
	t.Helper()
	type started struct {
		pid                 int
		sub, file, recorded string
		want                map[string]any
	}
	var procs []started
	for _, c := range st.CertifierMembers() {
		want := map[string]any{"data-dir": c.DataDir, "listen": fmt.Sprintf("127.0.0.1:%d", c.Port),
			"metrics-listen": fmt.Sprintf("127.0.0.1:%d", c.MetricsPort)}
		if c.ID == 0 {
			want["shares-host"] = true
		} else {
			want["id"] = int64(c.ID)
			want["peers"] = peersOf(st)
		}
		procs = append(procs, started{c.PID, "certifier", filepath.Join(c.DataDir, "certifier.toml"), c.Config, want})
	}
	for k, r := range st.Replicas {
		procs = append(procs, started{r.Agent.PID, "agent", filepath.Join(st.Dir, r.Name, "agent.toml"), r.Agent.Config, map[string]any{
			"name": r.Name, "socket": r.Agent.Socket, "certifier": st.CertifierAddr(), "mode": string(st.Mode),
			"metrics": fmt.Sprintf("127.0.0.1:%d", r.Agent.MetricsPort), "replica-index": int64(k + 1),
			"trust-ddl-roles": st.TrustDDLRoles,
		}})
	}
	for _, p := range procs {
		if p.recorded != p.file {
			t.Errorf("cluster.json records the config file %q, want %q", p.recorded, p.file)
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		if err != nil {
			t.Errorf("%s %d: %v", p.sub, p.pid, err)
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if want := []string{st.Binary, p.sub, "--config", p.file}; !slices.Equal(args, want) {
			t.Errorf("pid %d runs %q, want %q", p.pid, args, want)
		}
		settings, err := configfile.Read(p.file)
		if err != nil {
			t.Error(err)
			continue
		}
		got := map[string]any{}
		for _, s := range settings {
			got[s.Key] = s.Value
		}
		for key, want := range p.want {
			if got[key] != want {
				t.Errorf("%s: %s = %v, want %v", p.file, key, got[key], want)
			}
		}
	}
}

// peersOf is the --peers value of st's certifier group.
func peersOf(st *cluster.State) string {
	var parts []string
	for _, c := range st.CertifierMembers() {
		parts = append(parts, fmt.Sprintf("%d=127.0.0.1:%d", c.ID, c.Port))
	}
	return strings.Join(parts, ",")
}

func checkGone(t *testing.T, recorded map[string]int) {
	t.Helper()
	for what, pid := range recorded {
		if process.Alive(pid) {
			t.Errorf("%s: pid %d still running after down", what, pid)
		}
	}
}

// TestUpStatusDown runs the whole life of a local cluster with the real
// binary: up (2 replicas, no demo), status, a write on one replica read
// on the other, down, up again on the same directory (restart, data
// kept), down.
func TestUpStatusDown(t *testing.T) {
	bin := testbin.Path(t)
	dir := newClusterDir(t, "tashkent-cluster-test-")
	var seen []*cluster.State // every cluster.json read, for the cleanup
	t.Cleanup(func() {
		// Stop whatever a failed test left running: down, then, should down
		// itself be broken, every PID this test saw recorded, after checking
		// it still is that process.
		if _, err := os.Stat(cluster.StatePath(dir)); err == nil {
			if out, err := run(t, bin, "down", "--data-dir", dir); err != nil {
				t.Errorf("cleanup: down: %v\n%s", err, out)
			}
		}
		for _, st := range seen {
			killLeftovers(t, bin, st)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("cluster directory kept for inspection: %s", dir)
		}
	})

	// up: a new cluster.
	out := mustRun(t, bin, "up", "--data-dir", dir, "--replicas", "2", "--no-demo")
	st, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, st)
	if len(st.Replicas) != 2 || st.Mode != cluster.ModeMW || st.Binary != bin {
		t.Fatalf("cluster.json: %+v", st)
	}
	for _, r := range st.Replicas {
		if !strings.Contains(out, r.URI()) || !strings.Contains(out, r.PsqlCommand()) {
			t.Errorf("up did not print %s's URI %s and psql line", r.Name, r.URI())
		}
	}
	checkRunning(t, st)
	checkStartedFromConfig(t, st)
	first := pids(st)

	// status: both replicas, every process up, versions readable.
	s := status(t, bin, dir)
	if !s.Healthy || len(s.Replicas) != 2 || !s.Certifier.Reachable || !s.Certifier.Process.Running {
		t.Fatalf("status: %+v", s)
	}
	for i, r := range s.Replicas {
		if r.Name != st.Replicas[i].Name || !r.Postgres.Running || !r.Agent.Running || r.Version == nil || r.Lag == nil ||
			r.Admitting == nil || !*r.Admitting || !strings.HasPrefix(r.AgentHealth, "serving") ||
			r.URI != st.Replicas[i].URI() {
			t.Errorf("status of %s: %+v", st.Replicas[i].Name, r)
		}
	}
	table := mustRun(t, bin, "status", "--data-dir", dir)
	for _, want := range []string{"replica1", "replica2", st.Replicas[1].URI(), "durable version", "entries/fsync", "abort rate", "GATE", "open"} {
		if !strings.Contains(table, want) {
			t.Errorf("status table lacks %q", want)
		}
	}

	// A write on replica1 is read on replica2.
	r1, r2 := st.Replicas[0].DSN(), st.Replicas[1].DSN()
	query(t, r1, "CREATE TABLE kept (id int PRIMARY KEY, v text)")
	query(t, r1, "INSERT INTO kept VALUES (1, 'written before down')")
	if got := query(t, r1, "SELECT v FROM kept WHERE id = 1"); got != "written before down" {
		t.Fatalf("read back through replica1: %q", got)
	}
	eventually(t, r2, "SELECT coalesce(max(v), '') FROM kept WHERE id = 1", "written before down")

	// Without --trust-ddl-roles, a role that is not a superuser may not run
	// DDL (the DDL guard, extension/src/ddlguard.c), and the setting cannot
	// change while the agents run.
	query(t, r1, "CREATE ROLE ddl_user LOGIN")
	query(t, r1, "GRANT CREATE ON SCHEMA public TO ddl_user")
	ddlUser := strings.Replace(r2, "postgres@", "ddl_user@", 1)
	if _, err := tryQuery(ddlUser, "CREATE TABLE by_ddl_user (id int PRIMARY KEY)"); err == nil || !strings.Contains(err.Error(), pgcode.InsufficientPrivilege) {
		t.Fatalf("DDL by a role that is not a superuser, without --trust-ddl-roles: %v, want 42501", err)
	}
	if out, err := run(t, bin, "up", "--data-dir", dir, "--trust-ddl-roles", "--no-demo"); err == nil ||
		!strings.Contains(out, "tashkent down --data-dir "+dir) {
		t.Fatalf("up --trust-ddl-roles on a running cluster created without it: %v", err)
	}

	// up on a running cluster starts nothing.
	out = mustRun(t, bin, "up", "--data-dir", dir, "--no-demo")
	if again, _ := cluster.Load(dir); fmt.Sprint(pids(again)) != fmt.Sprint(first) {
		t.Fatalf("up on a running cluster changed PIDs: %v -> %v", first, pids(again))
	}
	if strings.Contains(out, "started") {
		t.Errorf("up on a running cluster started something:\n%s", out)
	}

	// down stops every recorded PID.
	out = mustRun(t, bin, "down", "--data-dir", dir)
	if n := strings.Count(out, "stopped"); n != 6 {
		t.Errorf("down reported %d stopped processes, want 6 (supervisor, 2 agents, certifier, 2 PostgreSQL)", n)
	}
	checkGone(t, first)
	if s := status(t, bin, dir); s.Healthy || s.Certifier.Process.Running || s.Replicas[0].Postgres.Running || s.Replicas[1].Agent.Running {
		t.Fatalf("status after down: %+v", s)
	}
	// down again: idempotent.
	out = mustRun(t, bin, "down", "--data-dir", dir)
	if strings.Count(out, "not running") != 6 {
		t.Errorf("second down:\n%s", out)
	}

	// An existing cluster keeps its mode.
	if out, err := run(t, bin, "up", "--data-dir", dir, "--mode", "base", "--no-demo"); err == nil || !strings.Contains(out, "cannot change") {
		t.Fatalf("up --mode base on an mw cluster: %v", err)
	}

	// up again: restart on the same directory, same ports, data kept; the
	// agents now trust roles with DDL.
	out = mustRun(t, bin, "up", "--data-dir", dir, "--trust-ddl-roles", "--no-demo")
	if strings.Contains(out, "initdb") {
		t.Errorf("restart ran initdb:\n%s", out)
	}
	st2, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, st2)
	checkRunning(t, st2)
	checkStartedFromConfig(t, st2) // rewritten: the agents' files now say trust-ddl-roles = true
	if st2.Certifier.Port != st.Certifier.Port {
		t.Errorf("certifier port changed: %d -> %d", st.Certifier.Port, st2.Certifier.Port)
	}
	for i := range st.Replicas {
		a, b := st.Replicas[i], st2.Replicas[i]
		if a.Postgres.Port != b.Postgres.Port || a.Agent.Socket != b.Agent.Socket {
			t.Errorf("%s: ports or socket changed: postgres %d -> %d, agent %s -> %s", a.Name, a.Postgres.Port, b.Postgres.Port, a.Agent.Socket, b.Agent.Socket)
		}
	}
	if got := query(t, r2, "SELECT v FROM kept WHERE id = 1"); got != "written before down" {
		t.Fatalf("after restart, replica2 reads %q", got)
	}
	query(t, r2, "INSERT INTO kept VALUES (2, 'written after restart')")
	eventually(t, r1, "SELECT coalesce(max(v), '') FROM kept WHERE id = 2", "written after restart")
	if !st2.TrustDDLRoles || !strings.Contains(out, "--trust-ddl-roles") {
		t.Errorf("up --trust-ddl-roles: recorded %v, printed:\n%s", st2.TrustDDLRoles, out)
	}
	query(t, ddlUser, "CREATE TABLE by_ddl_user (id int PRIMARY KEY)")
	eventually(t, r1, "SELECT count(*)::text FROM pg_tables WHERE tablename = 'by_ddl_user'", "1")
	if s := status(t, bin, dir); !s.Healthy {
		t.Fatalf("status after restart: %+v", s)
	}

	second := pids(st2)
	mustRun(t, bin, "down", "--data-dir", dir)
	checkGone(t, second)
}

// TestUpAfterAFullOutage kills every process of a loaded mw cluster with
// SIGKILL at once, as a machine crash would: PostgreSQL, which runs with
// synchronous_commit=off, loses its last commits, and the certifier and
// agents die mid-stream. `up` on the same directory must bring the
// cluster back (waiting out the dead postmasters' remains) with every
// commit a client saw acknowledged on every replica, the replicas
// converged, and every gate open.
func TestUpAfterAFullOutage(t *testing.T) {
	bin := testbin.Path(t)
	dir := newClusterDir(t, "tashkent-outage-test-")
	t.Cleanup(func() {
		cluster.Down(context.Background(), dir) // by recorded PID
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	mustRun(t, bin, "up", "--data-dir", dir, "--replicas", "2", "--no-demo")
	st, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	setupTable(t, st)

	w := &groupWorkload{acked: map[int]bool{}}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for k, r := range st.Replicas {
		wg.Go(func() { w.run(ctx, t, r.DSN(), k) })
	}
	for w.count() < 200 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	victims := []int{st.Certifier.PID}
	for _, r := range st.Replicas {
		victims = append(victims, r.Agent.PID)
		victims = append(victims, postgresTree(r.Postgres.PID)...)
	}
	for _, pid := range victims {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	stop()
	wg.Wait()
	for _, pid := range victims {
		process.WaitGone(context.Background(), pid, 5*time.Second)
	}
	acked := w.count()
	t.Logf("killed %d processes with %d commits acknowledged", len(victims), acked)

	out := mustRun(t, bin, "up", "--data-dir", dir, "--no-demo")
	if strings.Contains(out, "initdb") {
		t.Errorf("up after the outage ran initdb:\n%s", out)
	}
	st2, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkRunning(t, st2)
	checkConverged(t, st2, w)
	s := status(t, bin, dir)
	for _, r := range s.Replicas {
		if r.Admitting == nil || !*r.Admitting {
			t.Errorf("%s: gate not open after the restart: %+v", r.Name, r)
		}
	}
	if !s.Healthy {
		t.Errorf("status after the restart: %+v", s)
	}
}

// postgresTree is a postmaster and its children: what a crash kills.
// The postmaster is stopped first so that it forks nothing meanwhile.
func postgresTree(pid int) []int {
	syscall.Kill(pid, syscall.SIGSTOP)
	out := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 2 && f[1] == fmt.Sprint(pid) {
			var child int
			fmt.Sscan(e.Name(), &child)
			out = append(out, child)
		}
	}
	return out
}
