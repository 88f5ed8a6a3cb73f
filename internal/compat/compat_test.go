package compat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/process"
)

// scenarios every suite reports, in order (compat/python/compat_common.py,
// compat/node/suite.js, compat/java/.../Main.java, and psqlSuite).
var scenarios = []string{
	"connect", "simple_query", "extended_query", "prepared", "transactions", "copy_in", "copy_out",
	"large_result", "cursor", "pipeline", "errors", "cancel", "statement_timeout", "retry_40001", "no_pk_write",
}

// suite is one client's suite: how to check its tools are there, build it,
// and run it against a target.
type suite struct {
	name string
	// preflight returns an error naming what is missing and how to install it.
	preflight func(root string) error
	// build runs once before the suite's runs (Maven).
	build func(ctx context.Context, root string) error
	// command is the process that runs every scenario and prints
	// COMPAT-RESULT lines; nil for suites driven from Go (psql).
	command func(ctx context.Context, root string) *exec.Cmd
	// run drives the suite from Go instead of command.
	run func(ctx context.Context, t *testing.T, root string, tg target, env []string) map[string]result
}

const installAll = "bash compat/install.sh"

var suites = []suite{
	{
		name: "psycopg",
		preflight: func(root string) error {
			return pythonModule("psycopg", `python3 -m pip install -r compat/python/requirements.txt`)
		},
		command: func(ctx context.Context, root string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, "python3", "-u", "psycopg_suite.py")
			cmd.Dir = filepath.Join(root, "compat", "python")
			return cmd
		},
	},
	{
		name: "asyncpg",
		preflight: func(root string) error {
			return pythonModule("asyncpg", `python3 -m pip install -r compat/python/requirements.txt`)
		},
		command: func(ctx context.Context, root string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, "python3", "-u", "asyncpg_suite.py")
			cmd.Dir = filepath.Join(root, "compat", "python")
			return cmd
		},
	},
	{
		name: "node-postgres",
		preflight: func(root string) error {
			if _, err := exec.LookPath("node"); err != nil {
				return fmt.Errorf("node is not on PATH: install Node.js >= 18 (Debian: apt-get install -y nodejs npm), then: cd compat/node && npm ci")
			}
			for _, m := range []string{"pg", "pg-copy-streams", "pg-cursor"} {
				if _, err := os.Stat(filepath.Join(root, "compat", "node", "node_modules", m, "package.json")); err != nil {
					return fmt.Errorf("compat/node/node_modules/%s is missing: run `cd compat/node && npm ci` (or %s)", m, installAll)
				}
			}
			return nil
		},
		command: func(ctx context.Context, root string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, "node", "suite.js")
			cmd.Dir = filepath.Join(root, "compat", "node")
			return cmd
		},
	},
	{
		name: "pgjdbc",
		preflight: func(root string) error {
			for _, tool := range []string{"java", "mvn"} {
				if _, err := exec.LookPath(tool); err != nil {
					return fmt.Errorf("%s is not on PATH: install a JDK >= 17 and Maven (Debian: apt-get install -y default-jdk-headless maven), then run %s", tool, installAll)
				}
			}
			return nil
		},
		build: func(ctx context.Context, root string) error {
			// Downloads pgjdbc and the plugins the first time (about a minute);
			// a no-op build after that.
			cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-Dstyle.color=never", "package")
			cmd.Dir = filepath.Join(root, "compat", "java")
			cmd.Env = append(os.Environ(), "MAVEN_OPTS=-Djansi.passthrough=false")
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("mvn -q -B package in compat/java: %v\n%s\n(no network? run %s where Maven Central is reachable)", err, out, installAll)
			}
			return nil
		},
		command: func(ctx context.Context, root string) *exec.Cmd {
			dir := filepath.Join(root, "compat", "java")
			cp, _ := os.ReadFile(filepath.Join(dir, "target", "classpath.txt"))
			cmd := exec.CommandContext(ctx, "java", "-cp", "target/classes"+string(os.PathListSeparator)+strings.TrimSpace(string(cp)), "tashkent.compat.Main")
			cmd.Dir = dir
			return cmd
		},
	},
	{
		name: "psql",
		preflight: func(root string) error {
			_, err := psqlPath()
			return err
		},
		run: runPsqlSuite,
	},
}

func pythonModule(module, install string) error {
	if _, err := exec.LookPath("python3"); err != nil {
		return fmt.Errorf("python3 is not on PATH: install Python >= 3.11 (Debian: apt-get install -y python3 python3-pip), then: %s", install)
	}
	out, err := exec.Command("python3", "-c", "import "+module).CombinedOutput()
	if err != nil {
		return fmt.Errorf("python3 cannot import %s (%s): run `%s` (or %s)", module, strings.TrimSpace(lastLine(string(out))), install, installAll)
	}
	return nil
}

// result is one scenario's outcome.
type result struct {
	status string // PASS, FAIL, NA
	detail string
}

// outcome is what the matrix shows for a suite × scenario × target.
type outcome struct {
	res   result
	known string // the known bug, if the scenario is listed
}

type matrix struct {
	mu   sync.Mutex
	rows map[string]map[string]map[string]outcome // suite -> scenario -> target -> outcome
}

func (m *matrix) set(suite, scenario, tgt string, o outcome) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows[suite] == nil {
		m.rows[suite] = map[string]map[string]outcome{}
	}
	if m.rows[suite][scenario] == nil {
		m.rows[suite][scenario] = map[string]outcome{}
	}
	m.rows[suite][scenario][tgt] = o
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "compat", "install.sh")); err != nil {
		t.Fatalf("compat/ not found at %s: %v", root, err)
	}
	return root
}

func selected(envVar, name string) bool {
	v := os.Getenv(envVar)
	if v == "" {
		return true
	}
	for _, s := range strings.Split(v, ",") {
		if strings.TrimSpace(s) == name {
			return true
		}
	}
	return false
}

// TestCompat runs every client suite directly against PostgreSQL and on
// the replicas of a cluster, and reports a subtest per suite, target and
// scenario.
func TestCompat(t *testing.T) {
	if testing.Short() {
		t.Skip("the client compatibility suites take minutes; not in -short")
	}
	start := time.Now()
	root := repoRoot(t)
	cl := startAll(t, 3, clustertest.Options{})
	t.Logf("direct PostgreSQL and a 3-replica cluster up in %s", time.Since(start).Round(time.Millisecond))
	m := &matrix{rows: map[string]map[string]map[string]outcome{}}
	defer func() {
		t.Log("\n" + m.render() + fmt.Sprintf("\nTestCompat total %s", time.Since(start).Round(time.Second)))
	}()
	printKnownBugs(t)

	// The suites run two at a time (the machine has two cores; a run waits on
	// the servers as much as it computes), but only one at a time on the
	// cluster: DDL is certified against every concurrent transaction, so one
	// suite's CREATE TABLE would make another suite's transactions fail with
	// 40001. The group waits for all of them.
	slots := make(chan struct{}, 2)
	var clusterMu sync.Mutex
	t.Run("suites", func(t *testing.T) {
		for _, s := range suites {
			if !selected("COMPAT_SUITES", s.name) {
				continue
			}
			t.Run(s.name, func(t *testing.T) {
				t.Parallel()
				if err := s.preflight(root); err != nil {
					t.Fatalf("%s suite cannot run: %v", s.name, err)
				}
				if s.build != nil {
					slots <- struct{}{}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
					err := s.build(ctx, root)
					cancel()
					<-slots
					if err != nil {
						t.Fatal(err)
					}
				}
				for _, tg := range cl.targets() {
					t.Run(tg.name, func(t *testing.T) {
						if tg.name == "cluster" {
							clusterMu.Lock()
							defer clusterMu.Unlock()
						}
						slots <- struct{}{}
						defer func() { <-slots }()
						runSuite(t, root, s, tg, m)
					})
				}
			})
		}
	})
}

func suiteEnv(s suite, tg target) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "COMPAT_") {
			continue // the suites get exactly the server under test
		}
		env = append(env, kv)
	}
	var expectFail []string
	if tg.name == "cluster" {
		for _, sc := range scenarios {
			if knownBugOf(s.name, sc) != "" {
				expectFail = append(expectFail, sc)
			}
		}
	}
	return append(env,
		"PGHOST="+tg.host, "PGPORT="+itoa(tg.port), "PGUSER="+compatUser, "PGPASSWORD="+compatPassword,
		"PGDATABASE="+compatDatabase, "PGCONNECT_TIMEOUT=10", "PGAPPNAME=compat-"+s.name,
		"COMPAT_PORT2="+itoa(tg.port2), "COMPAT_TARGET="+tg.name,
		"COMPAT_PREFIX="+strings.ReplaceAll("compat_"+s.name+"_"+tg.name, "-", "_"),
		"COMPAT_ONLY="+os.Getenv("COMPAT_ONLY"), "COMPAT_EXPECT_FAIL="+strings.Join(expectFail, ","),
	)
}

func runSuite(t *testing.T, root string, s suite, tg target, m *matrix) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := suiteEnv(s, tg)
	began := time.Now()
	var results map[string]result
	var output string
	if s.run != nil {
		results = s.run(ctx, t, root, tg, env)
	} else {
		cmd := s.command(ctx, root)
		cmd.Env = env
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		results = parseResults(stdout.String())
		output = "stdout:\n" + stdout.String() + "\nstderr:\n" + stderr.String()
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			t.Errorf("%s: %v", s.name, err)
		}
		if ctx.Err() != nil {
			t.Errorf("%s did not finish in time", s.name)
		}
	}
	t.Logf("%s %s: %s", s.name, tg.name, time.Since(began).Round(10*time.Millisecond))
	failedAny := false
	for _, sc := range scenarios {
		if !selected("COMPAT_ONLY", sc) {
			continue
		}
		r, ok := results[sc]
		if !ok {
			r = result{status: "FAIL", detail: "the suite did not report this scenario (it crashed or hung before it)"}
		}
		known := ""
		if tg.name == "cluster" {
			known = knownBugOf(s.name, sc)
		}
		m.set(s.name, sc, tg.name, outcome{res: r, known: known})
		t.Run(sc, func(t *testing.T) {
			switch {
			case r.status == "NA":
				t.Logf("not applicable: %s", r.detail)
			case known != "" && r.status == "FAIL":
				t.Logf("KNOWN BUG %s: %s/%s fails on the cluster, as expected: %s", known, s.name, sc, r.detail)
			case known != "":
				t.Errorf("%s/%s passes on the cluster now: remove it from knownBugs %s (known_bugs_test.go)", s.name, sc, known)
			case r.status != "PASS":
				failedAny = true
				t.Errorf("%s %s %s: %s", s.name, tg.name, sc, r.detail)
			}
		})
	}
	if failedAny && output != "" {
		t.Logf("%s %s output:\n%s", s.name, tg.name, process.OutputTail(output, 8000))
	}
}

// parseResults reads the COMPAT-RESULT lines of a suite's output.
func parseResults(out string) map[string]result {
	res := map[string]result{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "COMPAT-RESULT ")
		if !ok {
			continue
		}
		f := strings.SplitN(rest, " ", 3)
		if len(f) < 2 {
			continue
		}
		r := result{status: f[1]}
		if len(f) == 3 {
			r.detail = f[2]
		}
		res[f[0]] = r
	}
	return res
}

// render is the suite × scenario table, direct / cluster in each cell.
func (m *matrix) render() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for n := range m.rows {
		names = append(names, n)
	}
	order := map[string]int{}
	for i, s := range suites {
		order[s.name] = i
	}
	sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, "compatibility matrix (direct / cluster):\n%-18s", "scenario")
	for _, n := range names {
		fmt.Fprintf(&b, " %-19s", n)
	}
	b.WriteString("\n")
	cell := func(o outcome, ok bool) string {
		switch {
		case !ok:
			return "-"
		case o.known != "" && o.res.status == "FAIL":
			return "BUG"
		case o.res.status == "PASS":
			return "ok"
		case o.res.status == "NA":
			return "n/a"
		}
		return "FAIL"
	}
	known := map[string][]string{} // bug -> suite/scenario
	for _, sc := range scenarios {
		fmt.Fprintf(&b, "%-18s", sc)
		for _, n := range names {
			d, dok := m.rows[n][sc]["direct"]
			c, cok := m.rows[n][sc]["cluster"]
			fmt.Fprintf(&b, " %-19s", cell(d, dok)+" / "+cell(c, cok))
			if cok && c.known != "" && c.res.status == "FAIL" {
				known[c.known] = append(known[c.known], n+"/"+sc)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("ok: passed; FAIL: failed; BUG: failed on the cluster because of a known bug; n/a: the client has no such API\n")
	for _, bug := range knownBugs {
		if sc := known[bug.id]; len(sc) > 0 {
			fmt.Fprintf(&b, "KNOWN BUG %s: %s\n    failing on the cluster because of it: %s\n", bug.id, bug.summary, strings.Join(sc, ", "))
		}
	}
	return b.String()
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
