package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// SystemSpec is one system of a suite run: a kind and its server count.
type SystemSpec struct {
	Kind     System
	Replicas int
}

func (sp SystemSpec) label() string { return label(sp.Kind, sp.Replicas) }

// peerServersDefault is the server count of streaming replication and
// pgpool when --systems does not say (the 3 backends).
const peerServersDefault = 3

// ParseSystemSpecs reads --systems: a comma-separated list of KIND or
// KIND:N. A tashkent kind without :N gets one system per entry of
// replicas; streaming and pgpool without :N get 3 servers; standalone
// PostgreSQL is always one server.
func ParseSystemSpecs(list string, replicas []int) ([]SystemSpec, error) {
	var out []SystemSpec
	seen := map[string]bool{}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, count, hasCount := strings.Cut(item, ":")
		k, err := ParseSystem(name)
		if err != nil {
			return nil, err
		}
		var ns []int
		switch {
		case hasCount:
			n, err := strconv.Atoi(count)
			if err != nil || n < 1 || n > 8 {
				return nil, fmt.Errorf("%s: server count %q must be 1 to 8", item, count)
			}
			ns = []int{n}
		case !k.replicated():
			ns = []int{1}
		case k.tashkent():
			ns = replicas
		default:
			ns = []int{peerServersDefault}
		}
		for _, n := range ns {
			if !k.replicated() {
				n = 1
			}
			if (k == PgpoolNative || k == PgpoolSI || k == Streaming) && n < 2 {
				return nil, fmt.Errorf("%s needs at least 2 servers", item)
			}
			sp := SystemSpec{Kind: k, Replicas: n}
			if seen[sp.label()] {
				return nil, fmt.Errorf("system %s given twice", sp.label())
			}
			seen[sp.label()] = true
			out = append(out, sp)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no systems")
	}
	return out, nil
}

// SuiteConfig describes one invocation of `tashkent bench WORKLOAD`.
type SuiteConfig struct {
	Workload Workload
	Systems  []SystemSpec
	// Clients are the client counts, one step each. Contention and mixed
	// run at the largest only and step through ContentionFractions or
	// FastShares instead.
	Clients []int
	// ContentionFractions are the contention levels c of the contention
	// workload (ED §4.4): with probability c a transaction updates one of
	// the first (1-c) of the rows.
	ContentionFractions []float64
	// FastShares are the mixed workload's shares of fast transactions, in
	// whole percent (ED §4.3).
	FastShares []float64
	// Isolation is the contention transactions' level: "repeatable read"
	// (default) or "serializable".
	Isolation string
	// Rate is the offered load in transactions per second (pgbench -R),
	// shared by all the clients; 0: every client as fast as it goes.
	Rate     float64
	Duration time.Duration
	Repeat   int
	Warmup   time.Duration
	// Warehouses is the TPC-C scale (tpcc).
	Warehouses int
	// Scale is the TPC-B scale (tpcb and select-only); Protocol is
	// pgbench -M.
	Scale    int
	Protocol string
	// Delay is the one-way delay added to the links between the hosts of
	// every replicated system (delay.go); 0: none.
	Delay time.Duration
	// FsyncDelay, when > 0, is the slow-disk regime (fsyncdelay.go): every
	// durable flush of every system takes this much longer.
	FsyncDelay time.Duration
	// Baseline is the label of the system every ratio divides by; empty:
	// the first system.
	Baseline string
	// ScaleOut measures the writing overhead wo on the first mw system
	// with at least 2 replicas and fits the scale-out model.
	ScaleOut bool
	// OneWriter sends every client of a tashkent system to its first
	// replica: one replica executes, the others only apply its writesets,
	// the topology of streaming replication (clients on the primary).
	OneWriter bool
	// Staleness is every tashkent agent's --staleness; 0: the agent's
	// default (100 ms).
	Staleness time.Duration
	// AgentArgs and CertifierArgs are extra flags of every tashkent agent
	// and certifier (Config.AgentArgs).
	AgentArgs, CertifierArgs []string
	// Certifiers is the size of every tashkent system's certifier group
	// (Config.Certifiers); --delay needs a single certifier.
	Certifiers int
	// Breakdown measures, in every run, CPU per process kind (PostgreSQL
	// split into client backends, the agents' sessions and the rest),
	// the agents' certifications, applies and dooms, and the replicas'
	// staleness (breakdown.go).
	Breakdown bool
	// ProfileDir, if set, makes every certifier and agent write a Go CPU
	// profile there (as Config.ProfileDir); seeding does not go through
	// them, so the profiles are the runs'.
	ProfileDir string
	Binary     string
	Dir        string
	Keep       bool
	// OutDir receives CSV, Markdown and PNG files.
	OutDir   string
	Progress io.Writer
	Live     bool
}

func (c *SuiteConfig) check() error {
	if err := checkRuns(c.Clients, c.Duration, c.Warmup); err != nil {
		return err
	}
	if err := checkFsyncDelay(c.FsyncDelay); err != nil {
		return err
	}
	if err := checkCertifiers(c.Certifiers, c.Delay); err != nil {
		return err
	}
	if c.Repeat < 1 {
		c.Repeat = 1
	}
	if c.Scale < 1 {
		c.Scale = 1
	}
	if c.Protocol == "" {
		c.Protocol = "prepared"
	}
	if err := c.checkWorkloadParams(); err != nil {
		return err
	}
	if len(c.Systems) == 0 {
		return errors.New("no systems")
	}
	found := c.Baseline == ""
	for _, sp := range c.Systems {
		if sp.Kind.tashkent() && c.Binary == "" {
			return errors.New("the tashkent binary (SuiteConfig.Binary) is required to run a tashkent system")
		}
		found = found || sp.label() == c.Baseline
	}
	if !found {
		return fmt.Errorf("baseline %q is not one of the systems", c.Baseline)
	}
	if c.Baseline == "" {
		c.Baseline = c.Systems[0].label()
	}
	if err := c.checkTPCC(); err != nil {
		return err
	}
	if c.Workload.sysbench() {
		if _, err := exec.LookPath(sysbenchBinary); err != nil {
			return fmt.Errorf("sysbench not found (apt-get install sysbench): %w", err)
		}
	}
	return nil
}

// checkWorkloadParams checks, and defaults, what the contention and mixed
// workloads step through, the isolation level and the rate.
func (c *SuiteConfig) checkWorkloadParams() error {
	if c.Workload == Contention && len(c.ContentionFractions) == 0 {
		c.ContentionFractions = []float64{0.5, 0.6, 0.7, 0.8, 0.9, 0.95}
	}
	for _, f := range c.ContentionFractions {
		if f <= 0 || f >= 1 {
			return fmt.Errorf("contention level c = %v: must be above 0 and below 1 (0.5 is uniform)", f)
		}
	}
	if c.Workload == Mixed && len(c.FastShares) == 0 {
		c.FastShares = []float64{0, 25, 50, 75, 100}
	}
	for _, f := range c.FastShares {
		if f < 0 || f > 100 || f != math.Trunc(f) {
			return fmt.Errorf("fast share %v: must be a whole percent from 0 to 100", f)
		}
	}
	switch c.Isolation {
	case "":
		c.Isolation = "repeatable read"
	case "repeatable read", "serializable":
	default:
		return fmt.Errorf("isolation %q: must be \"repeatable read\" or \"serializable\"", c.Isolation)
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) {
		return fmt.Errorf("rate %v: must be 0 (unthrottled) or a positive number of transactions per second", c.Rate)
	}
	if c.Rate > 0 && c.Workload.sysbench() {
		return errors.New("--rate throttles pgbench (-R); the sysbench workloads do not take it")
	}
	if c.Workload == Mixed && slices.ContainsFunc(c.Systems, func(sp SystemSpec) bool { return sp.Kind == MWFast }) &&
		slices.ContainsFunc(c.Systems, func(sp SystemSpec) bool { return sp.Kind == MWSafe }) {
		return errors.New("mixed: mw-fast and mw-safe run the same transactions (each script sets synchronous_commit itself); give one of them")
	}
	return nil
}

// point is one x of a figure: a client count, and for contention c or for
// mixed the fast share.
type point struct {
	clients int
	param   float64 // contention c, mixed fast share in percent; 0 otherwise
}

func (c *SuiteConfig) points() []point {
	var params []float64
	switch c.Workload {
	case Contention:
		params = c.ContentionFractions
	case Mixed:
		params = c.FastShares
	}
	if params != nil {
		top := slices.Max(c.Clients)
		var out []point
		for _, f := range params {
			out = append(out, point{clients: top, param: f})
		}
		return out
	}
	out := make([]point, len(c.Clients))
	for i, n := range c.Clients {
		out[i] = point{clients: n}
	}
	return out
}

// SuiteRun is one measured run of one system.
type SuiteRun struct {
	Label     string
	Kind      System
	Replicas  int
	Clients   int
	Param     float64
	Repeat    int
	TPS       float64
	LatencyMs float64
	Processed int64
	Failed    int64 // aborted and not retried (contention: --max-tries 1)
	Retries   int64 // aborted and re-run
	// Scripts are the per-script results of a run of several scripts
	// (mixed: fast and safe; readmostly: read and write).
	Scripts []ScriptResult
	// Certifier counters over the run (tashkent systems only).
	Certifications, Fsyncs uint64
	// Error is why the run produced no result (the client failed, e.g.
	// pgpool ended its sessions); the other systems' runs go on.
	Error string
	// Breakdown is where the run's time went (--breakdown only).
	Breakdown *Breakdown
	// TPCC is the run per TPC-C transaction type (tpcc only).
	TPCC *TPCCResult
}

// SuiteRow is the median over the repeats of one (system, point) cell.
type SuiteRow struct {
	Label     string
	Kind      System
	Replicas  int
	Clients   int
	Param     float64
	TPS       float64
	LatencyMs float64
	RunsTPS   []float64
	// AbortPct is aborted attempts (failed + retried) over all attempts.
	AbortPct        float64
	CommitsPerFsync float64
	// Scripts are the medians of each script's tps and latency over the
	// repeats, for a workload of several scripts.
	Scripts []ScriptRow
	// Ratio and LatencyRatio divide by the baseline's medians at the same
	// point, measured in the same invocation.
	Ratio, LatencyRatio float64
	// RepeatRatios divide each repeat's tps by the baseline's tps in the
	// same repeat (the runs made next to each other), for every repeat
	// both succeeded; RepeatRatio is their median, RepeatRatioMin and
	// RepeatRatioMax their spread. With one repeat they equal Ratio.
	RepeatRatios                                []float64
	RepeatRatio, RepeatRatioMin, RepeatRatioMax float64
	// Error is the first failed run's error when no run of the cell
	// succeeded.
	Error string
}

// SuiteReport is everything one invocation measured.
type SuiteReport struct {
	Config  SuiteConfig
	Started time.Time
	CPUs    int
	// LoadBefore and LoadAfter are the machine's 1-minute load averages
	// (/proc/loadavg, what uptime prints) when the measured runs began and
	// ended: how busy the shared machine was.
	LoadBefore, LoadAfter float64
	Runs                  []SuiteRun
	Rows                  []SuiteRow
	ScaleOut              *ScaleOut
	Files                 []string
}

// suiteRunner carries one invocation; it reuses runner's system control.
type suiteRunner struct {
	*runner
	scfg    SuiteConfig
	scripts []string
	// tpcc is the TPC-C driver and data (tpcc only; tpcc.go).
	tpcc *tpccData
}

// RunSuite starts every system, loads the workload into each, runs it on
// each for every point and repeat, alternating the systems, optionally
// measures the scale-out model, stops everything it started (by PID) and
// writes the output files.
func RunSuite(ctx context.Context, cfg SuiteConfig) (rep *SuiteReport, err error) {
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
	profiles, err := profileDir(cfg.ProfileDir)
	if err != nil {
		return nil, err
	}
	r := &suiteRunner{scfg: cfg, runner: &runner{binDir: binDir, pgbench: newPgbench(binDir), maxClients: slices.Max(cfg.Clients),
		cfg: Config{Binary: cfg.Binary, Scale: cfg.Scale, Protocol: cfg.Protocol, FsyncDelay: cfg.FsyncDelay, Staleness: cfg.Staleness, AgentArgs: cfg.AgentArgs,
			CertifierArgs: cfg.CertifierArgs, Certifiers: cfg.Certifiers,
			ProfileDir: profiles, Progress: cfg.Progress, Live: cfg.Live}}}
	var removeDir bool
	if r.dir, removeDir, err = workDir(cfg.Dir, cfg.Keep); err != nil {
		return nil, err
	}
	for _, sp := range cfg.Systems {
		s := &system{kind: sp.Kind, label: sp.label(), replicas: sp.Replicas, delay: cfg.Delay,
			dir: filepath.Join(r.dir, strings.ReplaceAll(sp.label(), " ", "-"))}
		s.seed = r.seedFor(s)
		r.systems = append(r.systems, s)
	}
	defer func() { err = r.cleanup(ctx, err, removeDir) }()

	rep = &SuiteReport{Config: cfg, Started: time.Now(), CPUs: runtime.NumCPU()}
	r.progress("tashkent bench %s: systems %s, clients %s, %s per run, %d repeat(s), delay %s, %d CPUs, work dir %s",
		cfg.Workload, r.labels(), joinInts(cfg.Clients), cfg.Duration, cfg.Repeat, cfg.Delay, rep.CPUs, r.dir)
	if cfg.Workload == TPCB && cfg.Scale < r.maxClients {
		r.progress("note: scale %d is below the %d clients; pgbench's documentation asks for at least as many branches as clients, "+
			"else the runs mostly measure update contention on the branch rows (TPC-B itself asks for one branch per tps)", cfg.Scale, r.maxClients)
	}
	if r.scripts, err = cfg.Workload.scripts(r.dir, cfg.Isolation); err != nil {
		return rep, err
	}
	if err := r.buildSlowDisk(); err != nil {
		return rep, err
	}
	if err := r.prepareExtension(ctx); err != nil {
		return rep, err
	}
	if err := r.prepareTPCC(ctx); err != nil {
		return rep, err
	}
	if err := r.setupAll(ctx); err != nil {
		return rep, err
	}
	rep.LoadBefore = loadAverage()
	if err := r.measureAll(ctx, rep); err != nil {
		return rep, err
	}
	rep.LoadAfter = loadAverage()
	if err := r.verifyAll(ctx); err != nil {
		return rep, err
	}
	rep.Rows = summarizeSuite(rep.Runs, cfg.points(), r.systems, cfg.Baseline)
	if cfg.ScaleOut {
		if rep.ScaleOut, err = r.scaleOut(ctx, rep.Rows); err != nil {
			return rep, err
		}
	}
	if cfg.OutDir != "" {
		if rep.Files, err = rep.WriteFiles(cfg.OutDir); err != nil {
			return rep, err
		}
		r.progress("wrote %s", strings.Join(rep.Files, ", "))
	}
	return rep, nil
}

func (r *suiteRunner) labels() string {
	out := make([]string, len(r.systems))
	for i, s := range r.systems {
		out[i] = s.label
	}
	return strings.Join(out, ", ")
}

// cleanup stops every system by the PIDs the bench started and removes
// the work directory unless it is worth keeping.
func (r *suiteRunner) cleanup(ctx context.Context, err error, removeDir bool) error {
	r.progress("stopping everything the bench started")
	var errs []error
	for _, s := range r.systems {
		if serr := s.stop(); serr != nil {
			errs = append(errs, serr)
		}
	}
	interrupted := ctx.Err() != nil
	if interrupted {
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
	return err
}

// setupAll starts every system and loads the workload, in parallel.
func (r *suiteRunner) setupAll(ctx context.Context) error {
	errs := make([]error, len(r.systems))
	var wg sync.WaitGroup
	for i, s := range r.systems {
		wg.Go(func() {
			t0 := time.Now()
			r.progress("setup %-20s starting", s.label)
			if err := s.start(ctx, r.runner); err != nil {
				errs[i] = fmt.Errorf("%s: start: %w", s.label, err)
				return
			}
			if err := r.loadWorkload(ctx, s); err != nil {
				errs[i] = fmt.Errorf("%s: load %s: %w", s.label, r.scfg.Workload, err)
				return
			}
			r.progress("setup %-20s ready in %s:%s", s.label, time.Since(t0).Round(100*time.Millisecond), s.pids())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if r.scfg.Warmup <= 0 {
		return nil
	}
	top := point{clients: r.maxClients, param: r.scfg.points()[0].param}
	for _, s := range r.systems {
		r.progress("warmup %-20s %d clients, %s (not measured)", s.label, top.clients, r.scfg.Warmup)
		if _, err := r.runOnce(ctx, s, r.loads(s, top.clients), top, int(r.scfg.Warmup/time.Second), nil); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Not fatal: the measured runs show whether the system copes.
			r.progress("warmup %-20s FAILED: %s", s.label, firstLine(err.Error()))
		}
		if err := r.settle(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// loadWorkload creates the workload's data through the system's first
// endpoint, unless it was seeded (seed.go), then settles the system.
func (r *suiteRunner) loadWorkload(ctx context.Context, s *system) error {
	w := r.scfg.Workload
	switch {
	case s.seed != nil: // loaded into every replica before the agents started
	case w.tpcb():
		return r.load(ctx, s)
	case w.sysbench():
		if err := sysbenchPrepare(ctx, s.endpoints()[0]); err != nil {
			return err
		}
	case w == TPCC:
		if err := r.tpcc.load(ctx, s.endpoints()[0], s.kind); err != nil {
			return err
		}
	default:
		if err := w.setup(ctx, s.endpoints()[0], r.maxClients); err != nil {
			return err
		}
	}
	return r.settle(ctx, s)
}

// runOnce runs the workload once on the given loads.
func (r *suiteRunner) runOnce(ctx context.Context, s *system, loads []load, p point, seconds int, tick func(progressTick)) (pgbenchResult, error) {
	w := r.scfg.Workload
	if w.sysbench() {
		return sysbenchRun(ctx, w, loads, seconds, tick)
	}
	if w == TPCC {
		return r.tpcc.run(ctx, loads, seconds, tick)
	}
	o := runOpts{seconds: seconds, protocol: r.scfg.Protocol, builtin: w.builtin(), tick: tick, scripts: r.scripts, rate: r.scfg.Rate}
	switch w {
	case Contention:
		o.defines = contentionDefines(p.param)
		o.maxTries = 1 // the abort rate is the measurement
	case Mixed:
		o.scripts = weightedScripts(r.scripts, p.param)
	}
	return r.pgbench.run(ctx, loads, o)
}

// loads spreads a run's clients over the system's client endpoints, with
// the system's session options.
func (r *suiteRunner) loads(s *system, clients int) []load {
	return withOptions(spread(r.clientEndpoints(s), clients), s.kind.sessionOptions())
}

// clientEndpoints are the endpoints the clients of a run connect to: all
// of them, or only the first: a tashkent system's first replica with
// OneWriter, every system's first server on select-only.
func (r *suiteRunner) clientEndpoints(s *system) []string {
	eps := s.endpoints()
	if (r.scfg.OneWriter && s.kind.tashkent()) || r.scfg.Workload.oneServer() {
		return eps[:1]
	}
	return eps
}

// measureAll makes every run: repeats outermost, then points, then every
// system in turn (A B C A B C).
func (r *suiteRunner) measureAll(ctx context.Context, rep *SuiteReport) error {
	points := r.scfg.points()
	total := r.scfg.Repeat * len(points) * len(r.systems)
	seconds := int(r.scfg.Duration / time.Second)
	n := 0
	for rpt := 1; rpt <= r.scfg.Repeat; rpt++ {
		for _, p := range points {
			for _, s := range r.systems {
				n++
				if err := ctx.Err(); err != nil {
					return err
				}
				head := fmt.Sprintf("[%d/%d] %-20s %3d clients", n, total, s.label, p.clients)
				switch r.scfg.Workload {
				case Contention:
					head += fmt.Sprintf("  c=%.2f", p.param)
				case Mixed:
					head += fmt.Sprintf("  fast %3.0f%%", p.param)
				}
				run, err := r.measureOne(ctx, s, p, seconds, head)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				line := fmt.Sprintf("%s  %9.1f tps  %7.2f ms  %5.1f%% aborts%s", head, run.TPS, run.LatencyMs, abortPct(run.Processed, run.Failed, run.Retries),
					scriptLatencies(run.Scripts))
				if err != nil { // the system failed this run: record it, go on with the others
					run.Error = firstLine(err.Error())
					line = fmt.Sprintf("%s  FAILED: %v", head, err)
				}
				run.Repeat = rpt
				rep.Runs = append(rep.Runs, run)
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

func (r *suiteRunner) measureOne(ctx context.Context, s *system, p point, seconds int, head string) (SuiteRun, error) {
	run := SuiteRun{Label: s.label, Kind: s.kind, Replicas: s.replicas, Clients: p.clients, Param: p.param}
	loads := r.loads(s, p.clients)
	before, err := s.certStatus(ctx)
	if err != nil {
		return run, err
	}
	var tick func(progressTick)
	if r.cfg.Live {
		tick = r.liveTicker(head, seconds, len(loads))
	}
	var probe *breakdownProbe
	if r.scfg.Breakdown {
		if probe, err = s.startBreakdown(ctx); err != nil {
			return run, err
		}
	}
	res, err := r.runOnce(ctx, s, loads, p, seconds, tick)
	if probe != nil {
		b, perr := probe.finish(ctx)
		if err == nil && perr != nil {
			return run, perr
		}
		run.Breakdown = b
	}
	if err != nil {
		return run, err
	}
	run.TPCC = res.TPCC
	run.TPS, run.LatencyMs, run.Processed, run.Failed, run.Retries = res.TPS, res.LatencyMs, res.Processed, res.Failed, res.Retries
	run.Scripts = res.Scripts
	if before != nil {
		after, err := s.certStatus(ctx)
		if err != nil {
			return run, err
		}
		run.Certifications = after.certifications - before.certifications
		run.Fsyncs = after.fsyncs - before.fsyncs
	}
	return run, nil
}

func abortPct(processed, failed, retries int64) float64 {
	attempts := processed + failed + retries
	if attempts == 0 {
		return 0
	}
	return 100 * float64(failed+retries) / float64(attempts)
}

// summarizeSuite makes one row per (point, system): medians over the
// repeats, ratios to the baseline at the same point.
func summarizeSuite(runs []SuiteRun, points []point, systems []*system, baseline string) []SuiteRow {
	var rows []SuiteRow
	for _, p := range points {
		start := len(rows)
		var base *SuiteRow
		for _, s := range systems {
			row := SuiteRow{Label: s.label, Kind: s.kind, Replicas: s.replicas, Clients: p.clients, Param: p.param}
			var lats []float64
			var processed, failed, retries int64
			var certs, fsyncs uint64
			for _, r := range runs {
				if r.Label != s.label || r.Clients != p.clients || r.Param != p.param {
					continue
				}
				if r.Error != "" {
					if row.Error == "" {
						row.Error = r.Error
					}
					continue
				}
				row.RunsTPS = append(row.RunsTPS, r.TPS)
				lats = append(lats, r.LatencyMs)
				processed += r.Processed
				failed += r.Failed
				retries += r.Retries
				certs += r.Certifications
				fsyncs += r.Fsyncs
			}
			if len(row.RunsTPS) == 0 {
				if row.Error != "" {
					row.TPS, row.LatencyMs = nan, nan
					rows = append(rows, row)
				}
				continue
			}
			row.Error = ""
			row.TPS, row.LatencyMs = median(row.RunsTPS), median(lats)
			row.Scripts = summarizeScripts(runs, row)
			row.AbortPct = abortPct(processed, failed, retries)
			if fsyncs > 0 {
				row.CommitsPerFsync = float64(certs) / float64(fsyncs)
			}
			rows = append(rows, row)
		}
		for i := start; i < len(rows); i++ {
			if rows[i].Label == baseline {
				base = &rows[i]
			}
		}
		for i := start; i < len(rows); i++ {
			rows[i].Ratio, rows[i].LatencyRatio = nan, nan
			rows[i].RepeatRatio, rows[i].RepeatRatioMin, rows[i].RepeatRatioMax = nan, nan, nan
			if base != nil {
				rows[i].Ratio = rows[i].TPS / base.TPS
				rows[i].LatencyRatio = rows[i].LatencyMs / base.LatencyMs
				rows[i].setRepeatRatios(runs, base.Label)
			}
		}
	}
	return rows
}

// ScriptRow is one script's part of a SuiteRow: medians over the repeats.
type ScriptRow struct {
	Name      string
	TPS       float64
	LatencyMs float64 // NaN when no run of the cell ran the script
	// AbortPct is the script's aborted attempts over its attempts, over
	// all the repeats.
	AbortPct float64
}

// summarizeScripts takes the medians of each script's tps and latency
// over the successful runs of row's cell (runs of no transaction of a
// script, e.g. the safe script at 100% fast, give it no latency).
func summarizeScripts(runs []SuiteRun, row SuiteRow) []ScriptRow {
	var out []ScriptRow
	for _, r := range runs {
		if r.Label != row.Label || r.Clients != row.Clients || r.Param != row.Param || r.Error != "" {
			continue
		}
		for j, sc := range r.Scripts {
			if j == len(out) {
				out = append(out, ScriptRow{Name: sc.Name})
			}
		}
	}
	for j := range out {
		var tps, lats []float64
		var processed, failed, retries int64
		for _, r := range runs {
			if r.Label != row.Label || r.Clients != row.Clients || r.Param != row.Param || r.Error != "" || j >= len(r.Scripts) {
				continue
			}
			sc := r.Scripts[j]
			tps = append(tps, sc.TPS)
			if sc.Processed > 0 {
				lats = append(lats, sc.LatencyMs)
			}
			processed, failed, retries = processed+sc.Processed, failed+sc.Failed, retries+sc.Retries
		}
		out[j].TPS, out[j].LatencyMs = median(tps), nan
		if len(lats) > 0 {
			out[j].LatencyMs = median(lats)
		}
		out[j].AbortPct = abortPct(processed, failed, retries)
	}
	return out
}

// scriptLatencies is the progress line's part for a run of several
// scripts: each one's tps and latency.
func scriptLatencies(scripts []ScriptResult) string {
	var b strings.Builder
	for _, sc := range scripts {
		if sc.Processed == 0 {
			fmt.Fprintf(&b, "  %s -", sc.Name)
			continue
		}
		fmt.Fprintf(&b, "  %s %.1f tps %.2f ms", sc.Name, sc.TPS, sc.LatencyMs)
	}
	return b.String()
}

// setRepeatRatios pairs each repeat of the row's cell with the baseline's
// run of the same repeat (made moments apart, so a noisy moment of the
// shared machine hits both) and records the median and range of their
// ratios.
func (row *SuiteRow) setRepeatRatios(runs []SuiteRun, baseline string) {
	tpsOf := func(label string) map[int]float64 {
		m := map[int]float64{}
		for _, r := range runs {
			if r.Label == label && r.Clients == row.Clients && r.Param == row.Param && r.Error == "" {
				m[r.Repeat] = r.TPS
			}
		}
		return m
	}
	mine, base := tpsOf(row.Label), tpsOf(baseline)
	row.RepeatRatios = nil
	for _, rpt := range slices.Sorted(maps.Keys(mine)) {
		if b, ok := base[rpt]; ok && b > 0 {
			row.RepeatRatios = append(row.RepeatRatios, mine[rpt]/b)
		}
	}
	if len(row.RepeatRatios) == 0 {
		return
	}
	row.RepeatRatio = median(row.RepeatRatios)
	row.RepeatRatioMin, row.RepeatRatioMax = slices.Min(row.RepeatRatios), slices.Max(row.RepeatRatios)
}

// loadAverage is the 1-minute load average, NaN where /proc/loadavg
// cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nan
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return nan
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return nan
	}
	return v
}

var nan = math.NaN()

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
