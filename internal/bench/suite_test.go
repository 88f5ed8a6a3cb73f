package bench

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// The end of sysbench 1.0.20's report.
const sysbenchSample = `SQL statistics:
    queries performed:
        read:                            5306
        write:                           1516
        other:                           758
        total:                           7580
    transactions:                        379    (125.81 per sec.)
    queries:                             7580   (2516.24 per sec.)
    ignored errors:                      4      (1.33 per sec.)
    reconnects:                          0      (0.00 per sec.)

Latency (ms):
         min:                                    4.97
         avg:                                   31.71
         max:                                  117.94
`

func TestParseSysbench(t *testing.T) {
	r, err := parseSysbench(sysbenchSample)
	if err != nil {
		t.Fatal(err)
	}
	if r.Processed != 379 || r.TPS != 125.81 || r.Retries != 4 || r.LatencyMs != 31.71 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parseSysbench("FATAL: connection failed\n"); err == nil {
		t.Fatal("output without a transactions line parsed")
	}
	m := sbProgressRE.FindStringSubmatch("[ 2s ] thds: 4 tps: 130.00 qps: 2600.00 (r/w/o: 1820.00/520.00/260.00) lat (ms,95%): 61.08 err/s: 0.00 reconn/s: 0.00")
	if m == nil || m[1] != "2" || m[2] != "130.00" || m[3] != "61.08" {
		t.Fatalf("progress line parsed as %q", m)
	}
}

func TestParseSystemSpecs(t *testing.T) {
	got, err := ParseSystemSpecs("sync-on, mw, base:2, streaming, pgpool-native:3", []int{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pg sync=on", "tashkent mw", "tashkent mw x3", "tashkent base x2", "streaming x3", "pgpool-native x3"}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i, sp := range got {
		if sp.label() != want[i] {
			t.Errorf("system %d: %q, want %q", i, sp.label(), want[i])
		}
	}
	for _, bad := range []string{"mw,mw", "nosuch", "pgpool-si:1", "mw:0", ""} {
		if _, err := ParseSystemSpecs(bad, []int{1}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The model is the paper's formula, and fitting it to points drawn from
// it gives back its parameter.
func TestScaleOutModelAndFit(t *testing.T) {
	if got := ScaleOutModel(1, 0.7); got != 1 {
		t.Fatalf("so(1) = %v", got)
	}
	if got := ScaleOutModel(5, 0.15); math.Abs(got-5/1.6) > 1e-12 {
		t.Fatalf("so(5) at wo·w 0.15 = %v", got)
	}
	var pts []ScalePoint
	for n := 1; n <= 5; n++ {
		pts = append(pts, ScalePoint{Replicas: n, SO: ScaleOutModel(n, 0.234)})
	}
	if got := FitWoW(pts); math.Abs(got-0.234) > 0.0005 {
		t.Fatalf("fitted %v, want 0.234", got)
	}
	if !math.IsNaN(FitWoW(pts[:1])) {
		t.Fatal("a fit from one point")
	}
}

func TestSummarizeSuiteRatiosAndFailures(t *testing.T) {
	systems := []*system{{kind: SyncOn, label: "on"}, {kind: MW, label: "mw", replicas: 2}, {kind: PgpoolNative, label: "pool", replicas: 3}}
	runs := []SuiteRun{
		{Label: "on", Clients: 4, TPS: 100, LatencyMs: 10, Processed: 1000},
		{Label: "mw", Clients: 4, TPS: 50, LatencyMs: 20, Processed: 500, Retries: 500},
		{Label: "pool", Clients: 4, Error: "pgpool ended the session"},
	}
	rows := summarizeSuite(runs, []point{{clients: 4}}, systems, "on")
	if len(rows) != 3 {
		t.Fatalf("rows %+v", rows)
	}
	if rows[1].Ratio != 0.5 || rows[1].LatencyRatio != 2 || rows[1].AbortPct != 50 {
		t.Fatalf("mw row %+v", rows[1])
	}
	if rows[2].Error == "" || !math.IsNaN(rows[2].TPS) {
		t.Fatalf("failed cell %+v", rows[2])
	}
}

// checkSmokeBreakdown: every run has a breakdown, every system's servers
// used CPU (the split among PostgreSQL's processes is not checked: in a
// one-second run a backend may be charged no 10 ms tick), mw's agents and
// certifier too, and mw's agents saw every commit
// wait for the certifier at least the certifier's delayed flush plus the
// delayed link's round trip, and applied the other replica's versions.
func checkSmokeBreakdown(t *testing.T, rep *SuiteReport) {
	t.Helper()
	for _, r := range rep.Runs {
		b := r.Breakdown
		if b == nil {
			t.Errorf("%s: no breakdown", r.Label)
			continue
		}
		if b.CPU["postgres"] <= 0 {
			t.Errorf("%s: PostgreSQL used no CPU during the run: %v", r.Label, b.CPU)
		}
		if r.Kind != MW {
			continue
		}
		if b.CPU["agents"] <= 0 || b.CPU["certifier"] <= 0 {
			t.Errorf("%s: agents or certifier used no CPU: %v", r.Label, b.CPU)
		}
		n := b.Agent["certify_count"]
		if n < float64(r.Processed) || n == 0 {
			t.Errorf("%s: %v certifications timed for %d committed transactions", r.Label, n, r.Processed)
			continue
		}
		if mean := time.Duration(b.Agent["certify_seconds"] / n * float64(time.Second)); mean < smokeFsyncDelay+2*time.Millisecond {
			t.Errorf("%s: certification took %s on average, under the %s fsync delay plus the 2 ms round trip", r.Label, mean, smokeFsyncDelay)
		}
		if b.Agent["commit"] < float64(r.Processed) {
			t.Errorf("%s: agents counted %v commits, pgbench %d", r.Label, b.Agent["commit"], r.Processed)
		}
		if b.Agent["applied"] <= 0 || b.Agent["apply_txns"] <= 0 {
			t.Errorf("%s: no remote version applied: %v", r.Label, b.Agent)
		}
		if b.StalenessCount == 0 {
			t.Errorf("%s: no staleness sample", r.Label)
		}
	}
	var md strings.Builder
	rep.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "certifications, applies, aborts by cause") || !strings.Contains(md.String(), "client backends ms/commit") {
		t.Errorf("the markdown lacks the breakdown:\n%s", md.String())
	}
}

func TestParseMetricsAndCPUBetween(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP x y
# TYPE tashkent_agent_certify_seconds histogram
tashkent_agent_certify_seconds_sum 1.5
tashkent_agent_certify_seconds_count 3
tashkent_agent_dooms_total{as="blocker"} 2
tashkent_agent_dooms_total{as="displaced"} 1
tashkent_agent_certifications_total{outcome="commit"} 3
tashkent_agent_replica_version 42
`))
	if err != nil {
		t.Fatal(err)
	}
	if m["tashkent_agent_certify_seconds_sum"] != 1.5 || m["tashkent_agent_replica_version"] != 42 || len(m) != 6 {
		t.Fatalf("parsed %v", m)
	}
	c := counters(m)
	if c["certify_seconds"] != 1.5 || c["certify_count"] != 3 || c["dooms"] != 3 || c["commit"] != 3 || c["abort"] != 0 {
		t.Fatalf("counters %v", c)
	}
	a := cpuSnapshot{parts: map[string]time.Duration{"postgres": time.Second, "agents": time.Second}, machineBusy: 10 * time.Second}
	b := cpuSnapshot{parts: map[string]time.Duration{"postgres": 3 * time.Second, "agents": 2 * time.Second}, machineBusy: 15 * time.Second}
	got := cpuBetween(a, b)
	if got["postgres"] != 2*time.Second || got["agents"] != time.Second || got["others"] != 2*time.Second {
		t.Fatalf("cpu between %v", got)
	}
	if machineBusy() <= 0 {
		t.Fatal("no busy time in /proc/stat")
	}
}

// PostgreSQL's processes are told apart by their titles.
func TestClassifyTitle(t *testing.T) {
	for title, want := range map[string]string{
		"postgres: postgres postgres 127.0.0.1(43210) idle":                partClientBackends,
		"postgres: postgres postgres 127.0.0.1(43210) UPDATE waiting":      partClientBackends,
		"postgres: postgres postgres [local] idle in transaction":          partAgentSessions,
		"postgres: walsender postgres 127.0.0.1(5000) streaming 0/3000148": partPostgresRest,
		"postgres: walwriter":                           partPostgresRest,
		"postgres: autovacuum worker postgres":          partPostgresRest,
		"postgres: logical replication launcher":        partPostgresRest,
		"/usr/lib/postgresql/15/bin/postgres -D /tmp/x": "",
	} {
		if got := classifyTitle(title); got != want {
			t.Errorf("%q: %q, want %q", title, got, want)
		}
	}
}

// The per-repeat ratio pairs each run with the baseline's run of the same
// repeat: its median and range, not the ratio of the two medians, and a
// repeat the baseline failed is left out.
func TestSummarizeSuiteRatioPerRepeat(t *testing.T) {
	systems := []*system{{kind: MW, label: "mw", replicas: 3}, {kind: Base, label: "base", replicas: 3}}
	runs := []SuiteRun{
		{Label: "mw", Clients: 8, Repeat: 1, TPS: 300, Processed: 1},
		{Label: "base", Clients: 8, Repeat: 1, TPS: 100, Processed: 1},
		{Label: "mw", Clients: 8, Repeat: 2, TPS: 200, Processed: 1},
		{Label: "base", Clients: 8, Repeat: 2, TPS: 50, Processed: 1},
		{Label: "mw", Clients: 8, Repeat: 3, TPS: 100, Processed: 1},
		{Label: "base", Clients: 8, Repeat: 3, TPS: 50, Processed: 1},
		{Label: "mw", Clients: 8, Repeat: 4, TPS: 900, Processed: 1},
		{Label: "base", Clients: 8, Repeat: 4, Error: "failed"},
	}
	rows := summarizeSuite(runs, []point{{clients: 8}}, systems, "base")
	mw := rows[0]
	if want := []float64{3, 4, 2}; !slices.Equal(mw.RepeatRatios, want) {
		t.Fatalf("ratios per repeat %v, want %v", mw.RepeatRatios, want)
	}
	if mw.RepeatRatio != 3 || mw.RepeatRatioMin != 2 || mw.RepeatRatioMax != 4 {
		t.Fatalf("median %v, range %v–%v; want 3, 2–4", mw.RepeatRatio, mw.RepeatRatioMin, mw.RepeatRatioMax)
	}
	// The ratio of medians is another number: median(300,200,100,900)=250 over 50.
	if mw.Ratio != 5 {
		t.Fatalf("ratio of medians %v, want 5", mw.Ratio)
	}
	rep := &SuiteReport{Config: SuiteConfig{Workload: AllUpdates, Repeat: 4, Baseline: "base", Systems: []SystemSpec{{MW, 3}, {Base, 3}}},
		Rows: rows, LoadBefore: 1.5, LoadAfter: 2.25}
	var b strings.Builder
	rep.WriteMarkdown(&b)
	for _, want := range []string{"3.00x (2.00–4.00)", "per repeat: median (min–max)", "load average 1.50 when the runs began, 2.25"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}

// The relay delays each direction by its delay: a request-response round
// trip takes at least twice the delay.
func TestRelayDelaysBothDirections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	const delay = 20 * time.Millisecond
	rl, err := startRelay(ln.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.close()
	c, err := net.Dial("tcp", rl.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 5)
	for range 3 {
		start := time.Now()
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 2*delay || string(buf) != "hello" {
			t.Fatalf("round trip %s (want >= %s), echoed %q", rtt, 2*delay, buf)
		}
	}
	// Pipelined requests are delayed, not serialized: 10 requests sent
	// 2 ms apart all come back within one round trip of the last.
	start := time.Now()
	for range 10 {
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	all := make([]byte, 50)
	if _, err := io.ReadFull(c, all); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Millisecond+4*delay {
		t.Fatalf("10 pipelined round trips took %s: the relay serializes them", took)
	}
}

// TestSuiteSmoke runs the suite for real, briefly: AllUpdates on
// standalone PostgreSQL, a 2-replica tashkent mw cluster behind a 1 ms
// delayed certifier link, streaming replication with a synchronous
// standby and pgpool-II in native replication mode, with the scale-out
// measurement. Every system must commit transactions, the ratios, CSV,
// Markdown and PNG files must be there, and nothing may survive.
// smokeFsyncDelay is the smoke run's --fsync-delay.
const smokeFsyncDelay = 10 * time.Millisecond

func TestSuiteSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six PostgreSQL servers and pgpool")
	}
	if _, err := pgserver.FindBinDir(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pgpoolBinary); err != nil {
		t.Fatalf("pgpool-II is needed (apt-get install pgpool2; .ci/run installs it): %v", err)
	}
	bin := testbin.Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "tashkent-suite-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	systems, err := ParseSystemSpecs("sync-on,mw:2,streaming:2,pgpool-native:2", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var progress bytes.Buffer
	start := time.Now()
	rep, err := RunSuite(ctx, SuiteConfig{
		Workload: AllUpdates,
		Systems:  systems,
		Clients:  []int{2},
		Duration: time.Second,
		Delay:    time.Millisecond,
		// The slow-disk regime: every commit of every system waits for at
		// least one delayed flush (PostgreSQL's WAL through the shim, or
		// the certifier's log), so no row's latency can be below it.
		FsyncDelay: smokeFsyncDelay,
		ScaleOut:   true,
		Breakdown:  true,
		Binary:     bin,
		Dir:        filepath.Join(dir, "work"),
		OutDir:     out,
		Progress:   &progress,
	})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("in %s:%s", time.Since(start).Round(time.Second), table.String())
	if len(rep.Rows) != len(systems) {
		t.Fatalf("%d rows for %d systems", len(rep.Rows), len(systems))
	}
	for _, r := range rep.Rows {
		if r.Error != "" || r.TPS <= 0 || math.IsNaN(r.Ratio) || r.Ratio <= 0 {
			t.Errorf("%s: tps %v ratio %v error %q", r.Label, r.TPS, r.Ratio, r.Error)
		}
		if r.Kind == MW && r.CommitsPerFsync <= 0 {
			t.Errorf("%s: no certifier fsyncs during the run", r.Label)
		}
		if r.LatencyMs < float64(smokeFsyncDelay.Milliseconds()) {
			t.Errorf("%s: latency %.2f ms under the %s fsync delay: a durable flush escaped the slow-disk regime", r.Label, r.LatencyMs, smokeFsyncDelay)
		}
	}
	checkSmokeBreakdown(t, rep)
	so := rep.ScaleOut
	if so == nil || so.LocalCPU <= 0 || so.Transactions <= 0 || so.W != 1 {
		t.Errorf("scale-out measurement: %+v", so)
	}
	if !strings.Contains(table.String(), "vs pg sync=on") || !strings.Contains(table.String(), "1.00x") {
		t.Errorf("the table lacks the ratio column or the baseline's 1.00x:\n%s", table.String())
	}
	if !strings.Contains(table.String(), "fsync delay 10ms (emulated slow disk)") {
		t.Errorf("the table's header does not name the fsync delay:\n%s", table.String())
	}
	for _, f := range []string{"allupdates-delay1ms-fsync10ms.csv", "allupdates-delay1ms-fsync10ms.md", "allupdates-delay1ms-fsync10ms-tps.png",
		"allupdates-delay1ms-fsync10ms-tps-ratio.png", "allupdates-delay1ms-fsync10ms-latency.png", "allupdates-delay1ms-fsync10ms-scaleout.png",
		"allupdates-delay1ms-fsync10ms-breakdown-cpu.csv", "allupdates-delay1ms-fsync10ms-breakdown-commit.csv"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("output %s: %v", f, err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "work", "*", "pg*", "postmaster.pid"))
	for _, m := range matches {
		if pid, ok := pgserver.Running(filepath.Dir(m)); ok {
			t.Errorf("postgres %d still serves %s after the bench", pid, filepath.Dir(m))
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "work", "pgpool-native-x2", "pgpool.pid")); err == nil {
		t.Errorf("pgpool left its pid file (pid %s): not stopped", strings.TrimSpace(string(b)))
	}
}

// --fsync-delay is checked before anything starts.
func TestFsyncDelayIsChecked(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 2 * time.Second} {
		cfg := SuiteConfig{Workload: AllUpdates, Clients: []int{1}, Duration: time.Second, FsyncDelay: d}
		if err := cfg.check(); err == nil || !strings.Contains(err.Error(), "fsync delay") {
			t.Errorf("fsync delay %s: %v", d, err)
		}
		pc := Config{Clients: []int{1}, Duration: time.Second, Scale: 1, Protocol: "prepared", Replicas: 1, Repeat: 1, FsyncDelay: d}
		if err := pc.check(); err == nil || !strings.Contains(err.Error(), "fsync delay") {
			t.Errorf("pgbench, fsync delay %s: %v", d, err)
		}
	}
}

// --one-writer sends a tashkent system's clients to its first replica
// only, and leaves the peers' endpoints alone; select-only sends every
// system's clients to its first server.
func TestOneWriterRoutesTashkentClientsToReplicaOne(t *testing.T) {
	mw := &system{kind: MW, replicas: 3, pgs: []*pgserver.Server{serverOnPort(t, 5001), serverOnPort(t, 5002), serverOnPort(t, 5003)}}
	pool := &system{kind: PgpoolNative, replicas: 3, pgpoolPort: 6000, pgpool: &proc{}}
	for _, one := range []bool{false, true} {
		r := &suiteRunner{scfg: SuiteConfig{OneWriter: one, Workload: TPCB}}
		want := 3
		if one {
			want = 1
		}
		if got := r.clientEndpoints(mw); len(got) != want || got[0] != dsn(5001) {
			t.Errorf("one writer %v: mw endpoints %v", one, got)
		}
		if got := r.clientEndpoints(pool); len(got) != 1 || got[0] != dsn(6000) {
			t.Errorf("one writer %v: pgpool endpoints %v", one, got)
		}
		loads := spread(r.clientEndpoints(mw), 8)
		if len(loads) != want {
			t.Errorf("one writer %v: %d pgbench processes for 8 clients", one, len(loads))
		}
	}
	r := &suiteRunner{scfg: SuiteConfig{Workload: SelectOnly}}
	if got := r.clientEndpoints(mw); len(got) != 1 || got[0] != dsn(5001) {
		t.Errorf("select-only: mw endpoints %v", got)
	}
	if SelectOnly.builtin() != "select-only" || TPCB.builtin() != "tpcb-like" || !SelectOnly.tpcb() || SelectOnly.WriteFraction() != 0 {
		t.Error("select-only is not pgbench -S on TPC-B data")
	}
}

// serverOnPort is a server that was never started, listening (as far as
// its DSN says) on port.
func serverOnPort(t *testing.T, port int) *pgserver.Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "tashkent-bench-endpoint-") // not t.TempDir: the postgres user must traverse it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte(pgserver.MajorVersion+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "postgresql.conf"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := pgserver.Init(context.Background(), pgserver.Config{DataDir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// mw-fast and mw-safe are tashkent clusters in mode ed, configured as
// `tashkent up --mode ed` configures one: replicas with
// synchronous_commit on and the WAL writer flushing as in mw, agents with
// --mode ed; only mw-fast's sessions run with synchronous_commit off.
func TestEventualDurabilitySystems(t *testing.T) {
	got, err := ParseSystemSpecs("mw, mw-fast:3, mw-safe", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].label() != "tashkent mw-fast x3" || got[2].label() != "tashkent mw-safe" {
		t.Fatalf("specs %+v", got)
	}
	r := &runner{binDir: "/pg/bin", extBinDir: "/ext/bin"}
	for _, tc := range []struct {
		kind       System
		mode       string
		syncCommit bool
		walFlush   string
		options    string
	}{
		{MW, "mw", false, "", ""},
		{MWFast, "ed", true, "0", "-c synchronous_commit=off"},
		{MWSafe, "ed", true, "0", ""},
	} {
		s := &system{kind: tc.kind, dir: t.TempDir()}
		cfg := s.pgConfig(r, 0)
		if !tc.kind.tashkent() || tc.kind.mode() != tc.mode || cfg.SynchronousCommit != tc.syncCommit ||
			cfg.Settings["wal_writer_flush_after"] != tc.walFlush || cfg.BinDir != "/ext/bin" || tc.kind.sessionOptions() != tc.options {
			t.Errorf("%s: mode %q, config %+v, session options %q", tc.kind, tc.kind.mode(), cfg, tc.kind.sessionOptions())
		}
	}
	loads := withOptions(spread([]string{"a"}, 2), MWFast.sessionOptions())
	if env := loads[0].clientEnv(); len(env) == 0 || env[len(env)-1] != "PGOPTIONS=-c synchronous_commit=off" {
		t.Errorf("mw-fast's client environment ends %v", env[max(len(env)-1, 0):])
	}
	if env := spread([]string{"a"}, 2)[0].clientEnv(); env != nil {
		t.Errorf("a load without options changes the environment: %v", env)
	}
}

// The contention and mixed parameters, the isolation and the rate are
// checked and defaulted before anything starts.
func TestWorkloadParamsAreChecked(t *testing.T) {
	specs := func(list string) []SystemSpec {
		sp, err := ParseSystemSpecs(list, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	base := func(w Workload, systems string) SuiteConfig {
		return SuiteConfig{Workload: w, Systems: specs(systems), Clients: []int{1, 16}, Duration: time.Second, Binary: "tashkent"}
	}
	c := base(Mixed, "sync-on,mw-safe")
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.FastShares, []float64{0, 25, 50, 75, 100}) || c.Isolation != "repeatable read" {
		t.Fatalf("defaults: shares %v, isolation %q", c.FastShares, c.Isolation)
	}
	if pts := c.points(); len(pts) != 5 || pts[0] != (point{clients: 16, param: 0}) || pts[4] != (point{clients: 16, param: 100}) {
		t.Fatalf("mixed points %+v", pts)
	}
	c = base(Contention, "sync-on,mw-safe")
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	if pts := c.points(); len(pts) != 6 || pts[0] != (point{clients: 16, param: 0.5}) || pts[5].param != 0.95 {
		t.Fatalf("contention points %+v", pts)
	}
	for name, bad := range map[string]func(*SuiteConfig){
		"c of 1":               func(c *SuiteConfig) { c.ContentionFractions = []float64{0.5, 1} },
		"c of 0":               func(c *SuiteConfig) { c.ContentionFractions = []float64{0} },
		"share over 100":       func(c *SuiteConfig) { c.Workload, c.FastShares = Mixed, []float64{101} },
		"share of a fraction":  func(c *SuiteConfig) { c.Workload, c.FastShares = Mixed, []float64{12.5} },
		"isolation":            func(c *SuiteConfig) { c.Isolation = "read committed" },
		"negative rate":        func(c *SuiteConfig) { c.Rate = -1 },
		"rate on sysbench":     func(c *SuiteConfig) { c.Workload, c.Rate = OLTPReadWrite, 100 },
		"mixed on fast + safe": func(c *SuiteConfig) { c.Workload, c.Systems = Mixed, specs("mw-fast,mw-safe:3") },
	} {
		c := base(Contention, "sync-on,mw-fast")
		bad(&c)
		if err := c.check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A mixed run's table and files report the fast and the safe
// transactions' tps and latency apart, medians over the repeats, with no
// latency for a script that ran nothing.
func TestMixedReportShowsEachScript(t *testing.T) {
	systems := []*system{{kind: SyncOn, label: "pg sync=on"}, {kind: MWSafe, label: "tashkent mw-safe"}}
	sc := func(fastTPS, fastMs, safeTPS, safeMs float64) []ScriptResult {
		out := []ScriptResult{{Name: "fast", TPS: fastTPS, LatencyMs: fastMs, Processed: int64(fastTPS)},
			{Name: "safe", TPS: safeTPS, LatencyMs: safeMs, Processed: int64(safeTPS)}}
		for i := range out {
			if out[i].Processed == 0 {
				out[i].LatencyMs = nan
			}
		}
		return out
	}
	var runs []SuiteRun
	for rpt := 1; rpt <= 3; rpt++ {
		f := float64(rpt)
		runs = append(runs,
			SuiteRun{Label: "pg sync=on", Clients: 4, Param: 50, Repeat: rpt, TPS: 200, LatencyMs: 2, Processed: 200, Scripts: sc(100, 0.1*f, 100, 1*f)},
			SuiteRun{Label: "tashkent mw-safe", Clients: 4, Param: 50, Repeat: rpt, TPS: 100, LatencyMs: 4, Processed: 100, Scripts: sc(50, 0.5*f, 50, 5*f)},
			SuiteRun{Label: "pg sync=on", Clients: 4, Param: 100, Repeat: rpt, TPS: 300, LatencyMs: 0.1, Processed: 300, Scripts: sc(300, 0.1, 0, 0)},
			SuiteRun{Label: "tashkent mw-safe", Clients: 4, Param: 100, Repeat: rpt, TPS: 150, LatencyMs: 0.5, Processed: 150, Scripts: sc(150, 0.5, 0, 0)})
	}
	points := []point{{clients: 4, param: 50}, {clients: 4, param: 100}}
	rows := summarizeSuite(runs, points, systems, "pg sync=on")
	if len(rows) != 4 {
		t.Fatalf("rows %+v", rows)
	}
	mw50 := rows[1]
	if len(mw50.Scripts) != 2 || mw50.Scripts[0].LatencyMs != 1 || mw50.Scripts[1].LatencyMs != 10 || mw50.Scripts[1].TPS != 50 {
		t.Fatalf("mw-safe at 50%%: %+v", mw50.Scripts)
	}
	if !math.IsNaN(rows[3].Scripts[1].LatencyMs) || rows[3].Scripts[0].LatencyMs != 0.5 {
		t.Fatalf("mw-safe at 100%%: %+v", rows[3].Scripts)
	}
	rep := &SuiteReport{Config: SuiteConfig{Workload: Mixed, Clients: []int{4}, FastShares: []float64{50, 100}, Repeat: 3, Baseline: "pg sync=on", Duration: time.Second, Protocol: "prepared",
		Systems: []SystemSpec{{Kind: SyncOn, Replicas: 1}, {Kind: MWSafe, Replicas: 1}}, Isolation: "repeatable read", Rate: 4000},
		Runs: runs, Rows: rows}
	var table bytes.Buffer
	rep.WriteTable(&table)
	out := table.String()
	t.Logf("table:%s", out)
	for _, want := range []string{"fast %", "fast tps", "fast lat ms", "safe tps", "safe lat ms", "offered rate 4000 tps", "mw-safe: tashkent mode ed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	var mwLine []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[0] == "tashkent" && f[3] == "100" {
			mwLine = f
		}
	}
	// system (2 words), clients, fast %, tps, lat, abort %, fast tps, fast lat, safe tps, safe lat
	if len(mwLine) < 11 || mwLine[7] != "150.0" || mwLine[8] != "0.50" || mwLine[9] != "-" || mwLine[10] != "-" {
		t.Errorf("mw-safe at 100%% fast: %q", mwLine)
	}
	dir := t.TempDir()
	files, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, filepath.Join(dir, "mixed-rate4000-latency-by-script.png")) {
		t.Errorf("files %v", files)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "mixed-rate4000-scripts.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(csv), "mixed-rate4000,tashkent mw-safe,4,50.000,safe,50.000,10.000,0.000") {
		t.Errorf("scripts.csv:\n%s", csv)
	}
}
