package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// The group size is checked before anything starts, and a group does not
// take the agents' delaying relay.
func TestCertifierGroupSizeIsChecked(t *testing.T) {
	for _, n := range []int{2, 4, 7, -1} {
		cfg := SuiteConfig{Workload: AllUpdates, Clients: []int{1}, Duration: time.Second, Certifiers: n}
		if err := cfg.check(); err == nil || !strings.Contains(err.Error(), "must be 1 (a single certifier), 3 or 5") {
			t.Errorf("suite, %d certifiers: %v", n, err)
		}
		pc := Config{Clients: []int{1}, Duration: time.Second, Scale: 1, Protocol: "prepared", Replicas: 1, Repeat: 1, Certifiers: n}
		if err := pc.check(); err == nil || !strings.Contains(err.Error(), "must be 1 (a single certifier), 3 or 5") {
			t.Errorf("pgbench, %d certifiers: %v", n, err)
		}
	}
	specs, err := ParseSystemSpecs("mw", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 3, 5} {
		cfg := SuiteConfig{Workload: AllUpdates, Systems: specs, Clients: []int{1}, Duration: time.Second, Certifiers: n, Binary: "tashkent"}
		if err := cfg.check(); err != nil {
			t.Errorf("%d certifiers: %v", n, err)
		}
	}
	cfg := SuiteConfig{Workload: AllUpdates, Systems: specs, Clients: []int{1}, Duration: time.Second, Certifiers: 3, Delay: time.Millisecond, Binary: "tashkent"}
	if err := cfg.check(); err == nil || !strings.Contains(err.Error(), "--unsafe-fault-peer-delay") {
		t.Errorf("a group with --delay: %v", err)
	}
}

// --certifiers 3 runs mw on a certifier group: three `tashkent certifier
// --id K --peers ...` members, every one of them named to the agent, that
// certify a short run's transactions and are all gone after the bench.
func TestCertifierGroupRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server, three certifiers and an agent")
	}
	bin := testbin.Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "tashkent-certgroup-test-") // not t.TempDir: the postgres user must traverse it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	systems, err := ParseSystemSpecs("mw", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	rep, err := RunSuite(ctx, SuiteConfig{Workload: AllUpdates, Systems: systems, Clients: []int{1}, Duration: 2 * time.Second,
		Certifiers: 3, Binary: bin, Dir: filepath.Join(dir, "work"), Progress: &progress})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	if !strings.Contains(table.String(), "tashkent certifier group of 3") {
		t.Errorf("the header does not name the certifier group:\n%s", table.String())
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Error != "" || rep.Runs[0].Processed <= 0 || rep.Runs[0].Certifications == 0 {
		t.Fatalf("runs %+v", rep.Runs)
	}
	sysDir := filepath.Join(dir, "work", strings.ReplaceAll(systems[0].label(), " ", "-"))
	addrs := checkMembersRan(t, sysDir, 3)
	agentLog, err := os.ReadFile(filepath.Join(sysDir, "replica1-agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "--certifier " + strings.Join(addrs, ","); !strings.Contains(string(agentLog), want) {
		t.Errorf("the agent was not given every member (%s):\n%s", want, firstLine(string(agentLog)))
	}
	pids := regexp.MustCompile(`certifier(\d)=(\d+)`).FindAllStringSubmatch(progress.String(), -1)
	if len(pids) != 3 {
		t.Fatalf("the progress names %d certifier pids, want 3", len(pids))
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(m[2])
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmd, []byte(sysDir)) {
			t.Errorf("certifier %s (pid %d) still runs after the bench", m[1], pid)
		}
	}
}

// checkMembersRan checks that members 1..n of the group ran with their
// id and every member's address (their logs' start lines), as group
// members (a Raft log in each data directory), and returns the members'
// addresses in id order.
func checkMembersRan(t *testing.T, sysDir string, n int) []string {
	t.Helper()
	peersRE := regexp.MustCompile(`--peers (\S+)`)
	var peers string
	for id := 1; id <= n; id++ {
		name := "certifier-" + strconv.Itoa(id)
		log, err := os.ReadFile(filepath.Join(sysDir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		start := firstLine(string(log))
		m := peersRE.FindStringSubmatch(start)
		if !strings.Contains(start, " --id "+strconv.Itoa(id)+" ") || m == nil || (peers != "" && m[1] != peers) {
			t.Fatalf("member %d started as: %s", id, start)
		}
		peers = m[1]
		if entries, err := os.ReadDir(filepath.Join(sysDir, name, "raft")); err != nil || len(entries) == 0 {
			t.Errorf("member %d has no Raft log (%v)", id, err)
		}
	}
	var addrs []string
	for i, p := range strings.Split(peers, ",") {
		id, addr, _ := strings.Cut(p, "=")
		if id != strconv.Itoa(i+1) {
			t.Fatalf("--peers %s: member %d is %q", peers, i+1, p)
		}
		addrs = append(addrs, addr)
	}
	if len(addrs) != n {
		t.Fatalf("--peers %s: %d members, want %d", peers, len(addrs), n)
	}
	return addrs
}
