package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/bench/slowdisk"
	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// Config describes one invocation of the pgbench comparison.
type Config struct {
	// Clients are the pgbench client counts, one step each.
	Clients []int
	// Duration of one measured run (whole seconds; pgbench -T).
	Duration time.Duration
	// Scale is the TPC-B scale factor (pgbench -s).
	Scale int
	// Protocol is pgbench -M: simple, extended or prepared.
	Protocol string
	// Builtin is pgbench -b: tpcb-like (empty: the default), simple-update
	// (no teller and branch updates: no hot row) or select-only.
	Builtin string
	// Replicas of each tashkent system (1 or more).
	Replicas int
	// Repeat is how many times every (system, clients) run is made; the
	// table reports the median.
	Repeat int
	// Systems to compare, in the order runs alternate; nil: AllSystems.
	Systems []System
	// Warmup, when > 0, runs pgbench that long on every system once after
	// loading, unmeasured.
	Warmup time.Duration
	// Binary is the tashkent executable run as certifier and agents.
	Binary string
	// Dir is where the systems live; empty: a new temporary directory,
	// removed at the end unless Keep (or the bench failed).
	Dir  string
	Keep bool
	// OutDir, if set, receives pgbench.csv, pgbench-runs.csv and pgbench.md.
	OutDir string
	// PerStatement runs pgbench with -r and reports every statement's
	// average latency per system: where a transaction's time goes.
	PerStatement bool
	// FsyncDelay, when > 0, is the slow-disk regime (fsyncdelay.go): every
	// durable flush of every system takes this much longer.
	FsyncDelay time.Duration
	// Staleness, when > 0, is every agent's --staleness: how often a
	// replica asks the certifier for versions it has not been sent
	// (Tashkent §6.2); 0: the agent's default.
	Staleness time.Duration
	// AgentArgs and CertifierArgs are extra flags of every tashkent agent
	// and certifier (e.g. --blocker-grace=1s, --max-procs=1): experiments
	// on their settings.
	AgentArgs, CertifierArgs []string
	// Certifiers is the size of every tashkent system's certifier: 1 (or
	// 0), a single certifier; 3 or 5, a certifier group of that many
	// members (certifiergroup.go).
	Certifiers int
	// ProfileDir, if set, makes every certifier and agent write a Go CPU
	// profile there (SYSTEM-certifier.prof or SYSTEM-certifier-K.prof,
	// SYSTEM-agentK.prof), covering
	// its whole life: setup, the runs and the idle time between them.
	ProfileDir string
	// Progress receives one line per step; Live rewrites a status line
	// every second during a run (a terminal).
	Progress io.Writer
	Live     bool
}

// RunResult is one measured pgbench run.
type RunResult struct {
	System    System
	Label     string
	Clients   int
	Repeat    int // 1-based
	TPS       float64
	LatencyMs float64
	Processed int64
	Failed    int64
	Retried   int64 // transactions that needed at least one retry
	Retries   int64 // retries in all (pgbench's "total number of retries")
	// Certifier counters over the run (tashkent systems only).
	Certifications, CertAborts, Fsyncs uint64
	// Statements: pgbench -r, with Config.PerStatement.
	Statements []StatementLatency
}

// Row is the median over the repeats of one (system, clients) cell.
type Row struct {
	System     System
	Label      string
	Clients    int
	TPS        float64 // median
	LatencyMs  float64 // median
	RunsTPS    []float64
	RetriedPct float64 // transactions retried / processed, all repeats
	// RetriesPerTxn is retries (SQLSTATE 40001, re-run by pgbench) per
	// transaction processed, all repeats.
	RetriesPerTxn float64
	Processed     int64 // all repeats
	Failed        int64
	// CommitsPerFsync is the certifier's group commit over the runs
	// (certifications / fsyncs); 0 for standalone systems.
	CommitsPerFsync float64
	// Ratio is TPS over the sync-on row's TPS at the same client count;
	// NaN when sync-on was not run.
	Ratio float64
	// Statements: the median over the repeats of each statement's latency
	// (Config.PerStatement).
	Statements []StatementLatency
}

// Report is everything one invocation measured.
type Report struct {
	Config  Config
	Started time.Time
	CPUs    int
	Runs    []RunResult
	Rows    []Row
}

// runner carries one invocation.
type runner struct {
	cfg    Config
	binDir string
	// extBinDir is the bin directory of the PostgreSQL installation with
	// the tashkent extension (internal/pgext) that tashkent replicas run
	// from; empty when no tashkent system runs.
	extBinDir string
	pgbench   pgbench
	dir       string
	systems   []*system
	// maxClients is the most clients one run has (pgpool sizes its
	// process pool by it).
	maxClients int
	// slowDisk is the compiled shim of the slow-disk regime; nil: none.
	slowDisk *slowdisk.Shim

	mu sync.Mutex // guards systems' fields while they start in parallel
}

// checkRuns checks what every benchmark run is given: client counts, and
// a duration and a warmup in whole seconds (pgbench -T takes seconds).
func checkRuns(clients []int, duration, warmup time.Duration) error {
	if len(clients) == 0 {
		return errors.New("no client counts")
	}
	for _, n := range clients {
		if n < 1 {
			return fmt.Errorf("client count %d: must be at least 1", n)
		}
	}
	if duration < time.Second || duration%time.Second != 0 {
		return fmt.Errorf("duration %s: must be a whole number of seconds, at least 1s", duration)
	}
	if warmup < 0 || warmup%time.Second != 0 {
		return fmt.Errorf("warmup %s: must be a whole number of seconds", warmup)
	}
	return nil
}

func (c *Config) check() error {
	if err := checkRuns(c.Clients, c.Duration, c.Warmup); err != nil {
		return err
	}
	if c.Scale < 1 {
		return fmt.Errorf("scale %d: must be at least 1", c.Scale)
	}
	if err := checkFsyncDelay(c.FsyncDelay); err != nil {
		return err
	}
	switch c.Protocol {
	case "simple", "extended", "prepared":
	default:
		return fmt.Errorf("protocol %q: must be simple, extended or prepared", c.Protocol)
	}
	switch c.Builtin {
	case "":
		c.Builtin = "tpcb-like"
	case "tpcb-like", "simple-update", "select-only":
	default:
		return fmt.Errorf("builtin %q: must be tpcb-like, simple-update or select-only", c.Builtin)
	}
	if err := checkCertifiers(c.Certifiers, 0); err != nil {
		return err
	}
	if c.Replicas < 1 || c.Replicas > 8 {
		return fmt.Errorf("replicas %d: must be between 1 and 8", c.Replicas)
	}
	if c.Repeat < 1 {
		return fmt.Errorf("repeat %d: must be at least 1", c.Repeat)
	}
	if len(c.Systems) == 0 {
		c.Systems = AllSystems
	}
	seen := map[System]bool{}
	for _, s := range c.Systems {
		if _, err := ParseSystem(string(s)); err != nil {
			return err
		}
		if s == MWNewOrderFast {
			return fmt.Errorf("%s makes TPC-C's NewOrder transactions fast: it runs `tashkent bench tpcc` only", s)
		}
		if seen[s] {
			return fmt.Errorf("system %s given twice", s)
		}
		seen[s] = true
		if s.tashkent() && c.Binary == "" {
			return errors.New("the tashkent binary (Config.Binary) is required to run a tashkent system")
		}
	}
	return nil
}

// Run starts every system, loads TPC-B into each, runs pgbench on each for
// every client count and repeat, alternating the systems, stops everything
// it started, and returns the report. The table itself is written by
// Report.WriteTable.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, binDir: binDir, pgbench: newPgbench(binDir), maxClients: slices.Max(cfg.Clients)}
	if _, err := os.Stat(r.pgbench.path); err != nil {
		return nil, fmt.Errorf("pgbench not found next to postgres (%w); install postgresql-contrib or postgresql-15", err)
	}
	if r.cfg.ProfileDir, err = profileDir(cfg.ProfileDir); err != nil {
		return nil, err
	}
	var removeDir bool
	if r.dir, removeDir, err = workDir(cfg.Dir, cfg.Keep); err != nil {
		return nil, err
	}
	for _, k := range cfg.Systems {
		s := &system{kind: k, label: label(k, cfg.Replicas), dir: filepath.Join(r.dir, string(k)), replicas: cfg.Replicas}
		if k.tashkent() {
			s.seed = r.loadTPCB
		}
		r.systems = append(r.systems, s)
	}
	defer func() {
		r.progress("stopping everything the bench started")
		var errs []error
		for _, s := range r.systems {
			if serr := s.stop(); serr != nil {
				errs = append(errs, serr)
			}
		}
		interrupted := ctx.Err() != nil
		if interrupted { // whatever failed, it failed because of the interrupt
			err = fmt.Errorf("interrupted: %w", ctx.Err())
		}
		if serr := errors.Join(errs...); serr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", serr))
		}
		if err != nil && removeDir && !interrupted {
			r.progress("keeping %s for its logs", r.dir)
		} else if removeDir {
			os.RemoveAll(r.dir)
		}
		if cfg.ProfileDir != "" {
			r.progress("CPU profiles in %s", cfg.ProfileDir)
		}
	}()

	rep = &Report{Config: r.cfg, Started: time.Now(), CPUs: runtime.NumCPU()}
	r.progress("tashkent bench pgbench: -b %s, scale %d, -M %s, clients %s, %s per run, %d repeat(s), %d CPUs, work dir %s",
		r.cfg.Builtin, cfg.Scale, cfg.Protocol, joinInts(cfg.Clients), cfg.Duration, cfg.Repeat, rep.CPUs, r.dir)
	if err := r.buildSlowDisk(); err != nil {
		return rep, err
	}
	if err := r.prepareExtension(ctx); err != nil {
		return rep, err
	}
	if err := r.setup(ctx); err != nil {
		return rep, err
	}
	if err := r.measure(ctx, rep); err != nil {
		return rep, err
	}
	if err := r.verifyAll(ctx); err != nil {
		return rep, err
	}
	rep.Rows = summarize(rep.Runs, cfg.Clients, r.systems)
	if cfg.OutDir != "" {
		if err := rep.WriteFiles(cfg.OutDir); err != nil {
			return rep, err
		}
		base := filepath.Join(cfg.OutDir, cfg.fileBase())
		r.progress("wrote %s", strings.Join([]string{base + ".csv", base + "-runs.csv", base + ".md"}, ", "))
	}
	return rep, nil
}

func (r *runner) progress(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
}

// setup starts every system and loads TPC-B into it, all systems in
// parallel (setup is not measured).
func (r *runner) setup(ctx context.Context) error {
	errs := make([]error, len(r.systems))
	var wg sync.WaitGroup
	for i, s := range r.systems {
		wg.Go(func() {
			t0 := time.Now()
			r.progress("setup %-16s starting (%s)", s.label, s.dir)
			if err := s.start(ctx, r); err != nil {
				errs[i] = fmt.Errorf("%s: start: %w", s.label, err)
				return
			}
			r.progress("setup %-16s running:%s", s.label, s.pids())
			if err := r.load(ctx, s); err != nil {
				errs[i] = fmt.Errorf("%s: load TPC-B: %w", s.label, err)
				return
			}
			r.progress("setup %-16s TPC-B scale %d loaded in %s", s.label, r.cfg.Scale, time.Since(t0).Round(100*time.Millisecond))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if r.cfg.Warmup > 0 {
		top := slices.Max(r.cfg.Clients)
		for _, s := range r.systems {
			r.progress("warmup %-16s %d clients, %s (not measured)", s.label, top, r.cfg.Warmup)
			if _, err := r.pgbench.run(ctx, withOptions(spread(s.endpoints(), top), s.kind.sessionOptions()),
				runOpts{seconds: int(r.cfg.Warmup / time.Second), protocol: r.cfg.Protocol, builtin: r.cfg.Builtin}); err != nil {
				return fmt.Errorf("%s: warmup: %w", s.label, err)
			}
			if err := r.settle(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// load creates TPC-B in a system, unless it was seeded (every tashkent
// system: seed.go), through its first endpoint: tables and their primary
// keys (pgbench -i -I dtp), a primary key for pgbench_history (see the
// package doc), then the rows in chunks (fillTPCB). Every system
// gets the same schema, so that the standalone servers also maintain the
// history key. Then VACUUM ANALYZE and CHECKPOINT on every server, as
// pgbench -i would vacuum.
func (r *runner) load(ctx context.Context, s *system) error {
	if s.seed == nil {
		if err := r.loadTPCB(ctx, s.endpoints()[0]); err != nil {
			return err
		}
	}
	return r.settle(ctx, s)
}

// loadTPCB creates the TPC-B schema and rows through dsn.
func (r *runner) loadTPCB(ctx context.Context, dsn string) error {
	if err := r.pgbench.init(ctx, dsn, "dtp", r.cfg.Scale); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err = conn.Exec(ctx, `ALTER TABLE pgbench_history ADD COLUMN hid uuid PRIMARY KEY DEFAULT gen_random_uuid()`); err != nil {
		return fmt.Errorf("add a primary key to pgbench_history: %w", err)
	}
	return fillTPCB(ctx, conn, r.cfg.Scale)
}

// settle brings a system to the same state before every run and after
// loading: replicas converged, VACUUM (what pgbench without -n would do
// before a run, here outside the measured time and straight on the
// servers), and a CHECKPOINT, so that no system's leftover background
// writing lands in another system's run.
func (r *runner) settle(ctx context.Context, s *system) error {
	if _, err := s.converge(ctx, convergeTimeout); err != nil {
		return err
	}
	return s.direct(ctx, "VACUUM ANALYZE", "CHECKPOINT")
}

// measure makes every run: for each repeat, for each client count, every
// system in turn (A B C A B C), so that a noisy moment of the shared
// machine hits one run of each system rather than all runs of one.
func (r *runner) measure(ctx context.Context, rep *Report) error {
	total := r.cfg.Repeat * len(r.cfg.Clients) * len(r.systems)
	n := 0
	seconds := int(r.cfg.Duration / time.Second)
	for rpt := 1; rpt <= r.cfg.Repeat; rpt++ {
		for _, c := range r.cfg.Clients {
			for _, s := range r.systems {
				n++
				if err := ctx.Err(); err != nil {
					return err
				}
				head := fmt.Sprintf("[%d/%d] %-16s %3d clients  repeat %d/%d", n, total, s.label, c, rpt, r.cfg.Repeat)
				loads := withOptions(spread(s.endpoints(), c), s.kind.sessionOptions())
				before, err := s.certStatus(ctx)
				if err != nil {
					return err
				}
				var tick func(progressTick)
				if r.cfg.Live {
					tick = r.liveTicker(head, seconds, len(loads))
				} else {
					r.progress("%s  running %ds", head, seconds)
				}
				res, err := r.pgbench.run(ctx, loads, runOpts{seconds: seconds, protocol: r.cfg.Protocol, builtin: r.cfg.Builtin,
					perStatement: r.cfg.PerStatement, tick: tick})
				if err != nil {
					if r.cfg.Live {
						fmt.Fprintln(r.cfg.Progress)
					}
					return fmt.Errorf("%s, %d clients: %w", s.label, c, err)
				}
				after, err := s.certStatus(ctx)
				if err != nil {
					return err
				}
				run := RunResult{System: s.kind, Label: s.label, Clients: c, Repeat: rpt, TPS: res.TPS, LatencyMs: res.LatencyMs,
					Processed: res.Processed, Failed: res.Failed, Retried: res.Retried, Retries: res.Retries, Statements: res.Statements}
				if before != nil && after != nil {
					run.Certifications = after.certifications - before.certifications
					run.CertAborts = after.aborts - before.aborts
					run.Fsyncs = after.fsyncs - before.fsyncs
				}
				rep.Runs = append(rep.Runs, run)
				line := fmt.Sprintf("%s  %9.1f tps  %7.2f ms", head, res.TPS, res.LatencyMs)
				if res.Retries > 0 {
					line += fmt.Sprintf("  %.2f retries/txn", float64(res.Retries)/float64(max(res.Processed, 1)))
				}
				if res.Failed > 0 {
					line += fmt.Sprintf("  %d FAILED", res.Failed)
				}
				if r.cfg.Live {
					r.progress("\r\033[K%s", line)
				} else {
					r.progress("%s", line)
				}
				if err := r.settle(ctx, s); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// liveTicker returns a progress callback that rewrites one status line
// with the run's elapsed time and its current throughput (summed over the
// pgbench processes).
func (r *runner) liveTicker(head string, seconds, procs int) func(progressTick) {
	var mu sync.Mutex
	last := make([]progressTick, procs)
	return func(t progressTick) {
		mu.Lock()
		defer mu.Unlock()
		last[t.proc] = t
		var tps, latW float64
		for _, l := range last {
			tps += l.tps
			latW += l.latMs * l.tps
		}
		lat := 0.0
		if tps > 0 {
			lat = latW / tps
		}
		r.mu.Lock()
		fmt.Fprintf(r.cfg.Progress, "\r\033[K%s  %2.0f/%ds  %9.1f tps  %7.2f ms", head, t.seconds, seconds, tps, lat)
		r.mu.Unlock()
	}
}

// summarize turns the runs into one row per (clients, system): medians
// over the repeats, and the ratio to sync-on at the same client count.
func summarize(runs []RunResult, clients []int, systems []*system) []Row {
	var rows []Row
	for _, c := range clients {
		base := math.NaN()
		start := len(rows)
		for _, s := range systems {
			row := Row{System: s.kind, Label: s.label, Clients: c}
			var lats []float64
			var processed, retried, retries int64
			var certs, fsyncs uint64
			stmts := map[int][]float64{}
			for _, r := range runs {
				if r.System != s.kind || r.Clients != c {
					continue
				}
				for i, st := range r.Statements {
					if i == len(row.Statements) {
						row.Statements = append(row.Statements, StatementLatency{SQL: st.SQL})
					}
					stmts[i] = append(stmts[i], st.Ms)
					row.Statements[i].Retries += st.Retries
				}
				row.RunsTPS = append(row.RunsTPS, r.TPS)
				lats = append(lats, r.LatencyMs)
				processed += r.Processed
				retried += r.Retried
				retries += r.Retries
				row.Failed += r.Failed
				certs += r.Certifications
				fsyncs += r.Fsyncs
			}
			if len(row.RunsTPS) == 0 {
				continue
			}
			for i := range row.Statements {
				row.Statements[i].Ms = median(stmts[i])
			}
			row.Processed = processed
			row.TPS = median(row.RunsTPS)
			row.LatencyMs = median(lats)
			if processed > 0 {
				row.RetriedPct = 100 * float64(retried) / float64(processed)
				row.RetriesPerTxn = float64(retries) / float64(processed)
			}
			if fsyncs > 0 {
				row.CommitsPerFsync = float64(certs) / float64(fsyncs)
			}
			if s.kind == SyncOn {
				base = row.TPS
			}
			rows = append(rows, row)
		}
		for i := start; i < len(rows); i++ {
			rows[i].Ratio = rows[i].TPS / base
		}
	}
	return rows
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

// workDir is the directory a bench runs in: dir, or a new temporary one
// (removed afterwards unless keep). The postgres user must reach the data
// directories below it.
func workDir(dir string, keep bool) (path string, remove bool, err error) {
	if dir == "" {
		if path, err = os.MkdirTemp("", "tashkent-bench-"); err != nil {
			return "", false, err
		}
		remove = !keep
	} else {
		if path, err = filepath.Abs(dir); err != nil {
			return "", false, err
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return "", false, err
		}
	}
	return path, remove, os.Chmod(path, 0o755)
}

// profileDir creates dir, the --profile-dir of a run, and returns its
// absolute path (the certifiers and agents run elsewhere); "" stays "".
func profileDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return filepath.Abs(dir)
}
