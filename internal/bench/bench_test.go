package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// The summary of pgbench 15.18, as printed to stdout.
const sampleOutput = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 1
query mode: prepared
number of clients: 2
number of threads: 2
maximum number of tries: 1000
duration: 2 s
number of transactions actually processed: 2939
number of failed transactions: 0 (0.000%)
number of transactions retried: 17 (0.578%)
total number of retries: 21
latency average = 1.356 ms
latency stddev = 0.323 ms
initial connection time = 7.281 ms
tps = 1471.856442 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	r, err := parsePgbench(sampleOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := pgbenchResult{TPS: 1471.856442, LatencyMs: 1.356, Processed: 2939, Failed: 0, Retried: 17, Retries: 21}
	if r.TPS != want.TPS || r.LatencyMs != want.LatencyMs || r.Processed != want.Processed || r.Failed != want.Failed ||
		r.Retried != want.Retried || r.Retries != want.Retries || r.Statements != nil {
		t.Fatalf("parsed %+v, want %+v", r, want)
	}
	if _, err := parsePgbench("pgbench: error: connection to server failed\n"); err == nil {
		t.Fatal("output without a tps line parsed")
	}
	r, err = parsePgbench(sampleOutput + `statement latencies in milliseconds, failures and retries:
         0.002           0           0  \set aid random(1, 100000 * :scale)
         0.105           0           0  BEGIN;
         0.250           0          12  UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
         1.500           0           0  END;
`)
	if err != nil {
		t.Fatal(err)
	}
	wantStmts := []StatementLatency{{"BEGIN;", 0.105, 0}, {"UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;", 0.25, 12},
		{"END;", 1.5, 0}}
	if !slices.Equal(r.Statements, wantStmts) {
		t.Fatalf("statements parsed as %+v, want %+v", r.Statements, wantStmts)
	}
	m := progressRE.FindStringSubmatch("progress: 2.0 s, 1505.0 tps, lat 1.329 ms stddev 0.329, 0 failed, 0 retried, 0 retries")
	if m == nil || m[1] != "2.0" || m[2] != "1505.0" || m[3] != "1.329" {
		t.Fatalf("progress line parsed as %q", m)
	}
}

// A run in which clients stopped (their backends were terminated) is
// an error: its tps counts fewer clients than asked for.
func TestAbortedClientsFailTheRun(t *testing.T) {
	stderr := `progress: 1.0 s, 900.0 tps, lat 1.000 ms stddev 0.100, 0 failed, 0 retried, 0 retries
pgbench: error: client 9 script 0 aborted in command 10 query 0: FATAL:  terminating connection due to administrator command
pgbench: error: client 4 aborted in command 5 (SQL) of script 0; perhaps the backend died while processing
pgbench: error: Run was aborted; the above results are incomplete.
`
	err := abortedClients(stderr, 11)
	if err == nil || !strings.Contains(err.Error(), "2 of 11 clients aborted") || !strings.Contains(err.Error(), "administrator command") {
		t.Fatalf("aborted clients: %v", err)
	}
	if err := abortedClients("progress: 1.0 s, 900.0 tps, lat 1.000 ms stddev 0.100, 0 failed, 0 retried, 0 retries\n", 2); err != nil {
		t.Fatalf("a complete run: %v", err)
	}
}

func TestSpreadClientsOverEndpoints(t *testing.T) {
	got := spread([]string{"a", "b", "c"}, 8)
	if len(got) != 3 || got[0].clients != 3 || got[1].clients != 3 || got[2].clients != 2 {
		t.Fatalf("8 clients over 3 replicas: %+v", got)
	}
	got = spread([]string{"a", "b", "c"}, 1)
	if len(got) != 1 || got[0].dsn != "a" || got[0].clients != 1 {
		t.Fatalf("1 client over 3 replicas: %+v", got)
	}
}

func TestSummarizeMediansAndRatios(t *testing.T) {
	systems := []*system{{kind: SyncOn, label: "on"}, {kind: MW, label: "mw"}}
	runs := []RunResult{
		{System: SyncOn, Clients: 4, Repeat: 1, TPS: 100, LatencyMs: 4, Processed: 1000},
		{System: MW, Clients: 4, Repeat: 1, TPS: 90, LatencyMs: 5, Processed: 900, Retried: 9, Retries: 90, Certifications: 900, Fsyncs: 300},
		{System: SyncOn, Clients: 4, Repeat: 2, TPS: 300, LatencyMs: 2, Processed: 3000},
		{System: MW, Clients: 4, Repeat: 2, TPS: 110, LatencyMs: 6, Processed: 1100, Retried: 11, Certifications: 1100, Fsyncs: 100},
		{System: SyncOn, Clients: 4, Repeat: 3, TPS: 200, LatencyMs: 3, Processed: 2000},
		{System: MW, Clients: 4, Repeat: 3, TPS: 100, LatencyMs: 7, Processed: 1000, Retried: 10, Certifications: 1000, Fsyncs: 100},
	}
	rows := summarize(runs, []int{4}, systems)
	if len(rows) != 2 {
		t.Fatalf("rows: %+v", rows)
	}
	if rows[0].TPS != 200 || rows[0].Ratio != 1 || rows[0].LatencyMs != 3 {
		t.Fatalf("sync-on row: %+v", rows[0])
	}
	if rows[1].TPS != 100 || rows[1].Ratio != 0.5 || rows[1].RetriedPct != 1 || rows[1].RetriesPerTxn != 0.03 || rows[1].CommitsPerFsync != 6 {
		t.Fatalf("mw row: %+v", rows[1])
	}
	rows = summarize(runs[1:2], []int{4}, systems)
	if !math.IsNaN(rows[0].Ratio) {
		t.Fatalf("ratio without a sync-on run: %v", rows[0].Ratio)
	}
}

// TestSmoke runs the whole bench for real, briefly: two standalone
// PostgreSQL servers and two one-replica tashkent clusters (PostgreSQL,
// certifier and agent processes), TPC-B loaded into each, one 2-second run
// of 2 clients on each. Every system must have produced transactions, the
// table must carry the ratio column, the files must be written, and nothing
// the bench started may survive it.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four PostgreSQL servers")
	}
	if _, err := pgserver.FindBinDir(); err != nil {
		t.Fatal(err) // a missing PostgreSQL is a failure, never a pass
	}
	bin := testbin.Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Not t.TempDir: its parent is private, and the postgres user must
	// reach the data directories.
	dir, err := os.MkdirTemp("", "tashkent-bench-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var progress bytes.Buffer
	start := time.Now()
	rep, err := Run(ctx, Config{
		Clients:  []int{2},
		Duration: 2 * time.Second,
		Scale:    1,
		Protocol: "prepared",
		Replicas: 1,
		Repeat:   1,
		Binary:   bin,
		Dir:      filepath.Join(dir, "work"),
		OutDir:   out,
		Progress: &progress,
	})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("in %s:%s", time.Since(start).Round(time.Second), table.String())

	seen := map[System]bool{}
	for _, r := range rep.Rows {
		seen[r.System] = true
		if r.TPS <= 0 {
			t.Errorf("%s: tps %v", r.Label, r.TPS)
		}
		if r.Failed > 0 {
			t.Errorf("%s: %d failed transactions", r.Label, r.Failed)
		}
		if math.IsNaN(r.Ratio) || r.Ratio <= 0 {
			t.Errorf("%s: ratio %v", r.Label, r.Ratio)
		}
		if r.System.tashkent() && r.CommitsPerFsync <= 0 {
			t.Errorf("%s: no certifier fsyncs seen during the run", r.Label)
		}
	}
	for _, k := range AllSystems {
		if !seen[k] {
			t.Errorf("no row for %s", k)
		}
	}
	if !strings.Contains(table.String(), RatioColumn) || !strings.Contains(table.String(), "1.00x") {
		t.Errorf("the table lacks the %q column or the baseline's 1.00x:\n%s", RatioColumn, table.String())
	}
	for _, f := range []string{"pgbench.csv", "pgbench-runs.csv", "pgbench.md"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Errorf("--out file: %v", err)
			continue
		}
		if f != "pgbench-runs.csv" && !strings.Contains(string(b), "sync_on") && !strings.Contains(string(b), RatioColumn) {
			t.Errorf("%s has no ratio column:\n%s", f, b)
		}
	}
	// Everything stopped: no postmaster left on the bench's data directories.
	matches, _ := filepath.Glob(filepath.Join(dir, "work", "*", "pg*", "postmaster.pid"))
	for _, m := range matches {
		if pid, ok := pgserver.Running(filepath.Dir(m)); ok {
			t.Errorf("postgres %d still serves %s after the bench", pid, filepath.Dir(m))
		}
	}
}

// The end of pgbench 15.18's summary of a run of two weighted scripts.
const scriptsOutput = `number of transactions actually processed: 12575
number of failed transactions: 3 (0.024%)
number of transactions retried: 4 (0.032%)
total number of retries: 5
latency average = 0.317 ms
latency stddev = 0.537 ms
initial connection time = 4.583 ms
tps = 6290.248839 (without initial connection time)
SQL script 1: /tmp/x/fast.sql
 - weight: 50 (targets 50.0% of total)
 - 6302 transactions (50.1% of total, tps = 3152.377589)
 - number of failed transactions: 1 (0.016%)
 - number of transactions retried: 1 (0.016%)
 - total number of retries: 1
 - latency average = 0.215 ms
 - latency stddev = 0.247 ms
SQL script 2: /tmp/x/safe.sql
 - weight: 50 (targets 50.0% of total)
 - 6273 transactions (49.9% of total, tps = 3137.871250)
 - number of failed transactions: 2 (0.032%)
 - number of transactions retried: 3 (0.048%)
 - total number of retries: 4
 - latency average = 0.419 ms
 - latency stddev = 0.698 ms
`

// The per-script blocks are parsed, a script that ran nothing (weight 0)
// has no latency, and two pgbench processes' scripts add up with their
// latencies weighted by transactions.
func TestParsePgbenchScripts(t *testing.T) {
	r, err := parsePgbench(scriptsOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := []ScriptResult{
		{Name: "fast", TPS: 3152.377589, LatencyMs: 0.215, Processed: 6302, Failed: 1, Retried: 1, Retries: 1},
		{Name: "safe", TPS: 3137.871250, LatencyMs: 0.419, Processed: 6273, Failed: 2, Retried: 3, Retries: 4},
	}
	if !slices.Equal(r.Scripts, want) {
		t.Fatalf("scripts %+v, want %+v", r.Scripts, want)
	}
	if one, _ := parsePgbench(sampleOutput); one.Scripts != nil {
		t.Fatalf("one script parsed as %+v", one.Scripts)
	}
	idle, err := parsePgbench(`latency average = 3.710 ms
tps = 503.358053 (without initial connection time)
SQL script 1: /tmp/x/fast.sql
 - weight: 0 (targets 0.0% of total)
 - 0 transactions (0.0% of total, tps = 0.000000)
 - number of failed transactions: 0 (NaN%)
SQL script 2: /tmp/x/safe.sql
 - weight: 100 (targets 100.0% of total)
 - 1006 transactions (99.9% of total, tps = 502.858194)
 - number of failed transactions: 0 (0.000%)
 - latency average = 3.703 ms
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(idle.Scripts) != 2 || idle.Scripts[0].Processed != 0 || !math.IsNaN(idle.Scripts[0].LatencyMs) || idle.Scripts[1].LatencyMs != 3.703 {
		t.Fatalf("weight-0 run parsed as %+v", idle.Scripts)
	}
	sum := sumScripts([]pgbenchResult{
		{Scripts: []ScriptResult{{Name: "fast", TPS: 100, LatencyMs: 1, Processed: 300}, {Name: "safe", LatencyMs: nan}}},
		{Scripts: []ScriptResult{{Name: "fast", TPS: 50, LatencyMs: 3, Processed: 100, Failed: 2}, {Name: "safe", LatencyMs: nan}}},
	})
	if len(sum) != 2 || sum[0].TPS != 150 || sum[0].Processed != 400 || sum[0].Failed != 2 || sum[0].LatencyMs != 1.5 ||
		sum[1].Processed != 0 || !math.IsNaN(sum[1].LatencyMs) {
		t.Fatalf("summed %+v", sum)
	}
}

// -R is shared by the pgbench processes in proportion to their clients.
func TestRateIsSharedByTheClients(t *testing.T) {
	loads := spread([]string{"a", "b"}, 3)
	o := runOpts{rate: 900}
	if got := o.rateArgs(loads[0], loads); !slices.Equal(got, []string{"-R", "600.000"}) {
		t.Errorf("first load (2 clients): %v", got)
	}
	if got := o.rateArgs(loads[1], loads); !slices.Equal(got, []string{"-R", "300.000"}) {
		t.Errorf("second load (1 client): %v", got)
	}
	if got := (runOpts{}).rateArgs(loads[0], loads); got != nil {
		t.Errorf("unthrottled: %v", got)
	}
}
