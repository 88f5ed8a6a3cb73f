package bench

// The breakdown (--breakdown) says where a system's time goes in each
// run, so that a ratio can be explained rather than only reported:
//
//   - CPU per committed transaction and share of the machine's cores, per
//     kind of process (PostgreSQL servers, proxies, certifier, pgpool, the
//     pgbench clients, the bench itself), from /proc/PID/stat before and
//     after the run, and what every other process of the shared machine
//     took meanwhile (/proc/stat busy time minus ours). On two cores a
//     replicated system competes with its own clients and with everything
//     else; this shows by how much.
//   - For tashkent systems, the proxies' commit phases (Tashkent §6.2:
//     collect, certify, order, local; the tashkent_proxy_commit_phase_seconds
//     histogram's sum and count over the run), the proxies' outcomes
//     (certification aborts, preemptions) and so how many of the client's
//     retries PostgreSQL itself caused (first updater wins on one replica),
//     and the replicas' staleness: the certifier's version minus each
//     replica's committed version, sampled every stalenessSampleEvery during
//     the run. A transaction starts on its replica's version (§6.2), so the
//     sampled staleness is how many committed versions a transaction
//     starting at a random moment does not see, each one a chance of a
//     first-committer-wins abort at certification.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

const stalenessSampleEvery = 50 * time.Millisecond

// cpuParts are the kinds of process a breakdown reports, in table order.
var cpuParts = []string{"postgres", "proxies", "certifier", "pgpool", "pgbench", "bench", "others"}

// Breakdown is what one run's processes did.
type Breakdown struct {
	Wall time.Duration
	// CPU is the CPU time per part over the run (cpuParts; "others" is the
	// rest of the machine's busy time).
	CPU map[string]time.Duration
	// Phases are the proxies' COMMIT phase totals over the run, summed
	// over the proxies: seconds and count per phase.
	PhaseSeconds map[string]float64
	PhaseCount   map[string]float64
	// Outcomes are the proxies' update transactions by outcome.
	Outcomes map[string]float64
	// Staleness samples (versions behind the certifier), over every
	// replica and sample.
	StalenessSum   float64
	StalenessMax   float64
	StalenessCount int
}

// cpuSnapshot is the cumulative CPU of every part, and of the machine.
type cpuSnapshot struct {
	parts       map[string]time.Duration
	machineBusy time.Duration
}

// snapshotCPU reads the CPU used so far by each part of the system, the
// bench's own process (its reaped children: the pgbench clients) and the
// whole machine.
func (s *system) snapshotCPU() cpuSnapshot {
	snap := cpuSnapshot{parts: map[string]time.Duration{}}
	add := func(part string, pid int) {
		if t, err := postgresCPU(pid); err == nil { // the process, its live and its exited children
			snap.parts[part] += t
		}
	}
	for _, pg := range s.pgs {
		if pg != nil {
			add("postgres", pg.PID())
		}
	}
	for _, p := range s.proxies {
		if p != nil {
			add("proxies", p.pid())
		}
	}
	if s.certifier != nil {
		add("certifier", s.certifier.pid())
	}
	if s.pgpool != nil {
		add("pgpool", s.pgpool.pid())
	}
	if own, children, _, err := procTimes(os.Getpid()); err == nil {
		snap.parts["bench"] = own
		snap.parts["pgbench"] = children // the clients, once reaped
	}
	snap.machineBusy = machineBusy()
	return snap
}

// machineBusy is the machine's busy CPU time so far (/proc/stat: all but
// idle and iowait).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 && i < 8 { // user nice system [idle iowait] irq softirq steal; guest is in user already
			busy += n
		}
	}
	return time.Duration(busy) * (time.Second / clockTicksPerSecond)
}

// cpuBetween is the CPU of every part between two snapshots; "others" is
// the machine's busy time no part of ours accounts for.
func cpuBetween(a, b cpuSnapshot) map[string]time.Duration {
	out := map[string]time.Duration{}
	var ours time.Duration
	for part, t := range b.parts {
		out[part] = max(0, t-a.parts[part])
		ours += out[part]
	}
	out["others"] = max(0, b.machineBusy-a.machineBusy-ours)
	return out
}

// proxyMetrics scrapes one proxy's /metrics.
func proxyMetrics(ctx context.Context, port int) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// parseMetrics reads Prometheus's text format into "name{labels}" → value
// (comments and malformed lines skipped).
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] += v
	}
	return out, sc.Err()
}

// sumMetrics scrapes every proxy of the system and adds their counters up.
func (s *system) sumMetrics(ctx context.Context) (map[string]float64, error) {
	total := map[string]float64{}
	for _, port := range s.metricsPort {
		m, err := proxyMetrics(ctx, port)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			total[k] += v
		}
	}
	return total, nil
}

// breakdownProbe measures one run: start before it, finish after it.
type breakdownProbe struct {
	s       *system
	started time.Time
	cpu     cpuSnapshot
	metrics map[string]float64
	stop    chan struct{}
	done    sync.WaitGroup
	mu      sync.Mutex
	stale   []float64
}

func (s *system) startBreakdown(ctx context.Context) (*breakdownProbe, error) {
	p := &breakdownProbe{s: s, stop: make(chan struct{})}
	if len(s.metricsPort) > 0 {
		m, err := s.sumMetrics(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: proxy metrics: %w", s.label, err)
		}
		p.metrics = m
		p.done.Go(func() { p.sampleStaleness(ctx) })
	}
	p.started, p.cpu = time.Now(), s.snapshotCPU()
	return p, nil
}

// sampleStaleness records, every stalenessSampleEvery until stopped, how
// many versions each replica is behind the certifier.
func (p *breakdownProbe) sampleStaleness(ctx context.Context) {
	tick := time.NewTicker(stalenessSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		st, err := cluster.QueryCertifier(ctx, p.s.certAddr)
		if err != nil {
			continue
		}
		for _, port := range p.s.metricsPort {
			m, err := proxyMetrics(ctx, port)
			if err != nil {
				continue
			}
			v, ok := m["tashkent_proxy_replica_version"]
			if !ok {
				continue
			}
			p.mu.Lock()
			p.stale = append(p.stale, max(0, float64(st.Version)-v))
			p.mu.Unlock()
		}
	}
}

// finish ends the measurement of the run (the clients have exited).
func (p *breakdownProbe) finish(ctx context.Context) (*Breakdown, error) {
	cpu := p.s.snapshotCPU()
	wall := time.Since(p.started)
	close(p.stop)
	p.done.Wait()
	b := &Breakdown{Wall: wall, CPU: cpuBetween(p.cpu, cpu), PhaseSeconds: map[string]float64{}, PhaseCount: map[string]float64{},
		Outcomes: map[string]float64{}}
	for _, v := range p.stale {
		b.StalenessSum += v
		b.StalenessMax = max(b.StalenessMax, v)
	}
	b.StalenessCount = len(p.stale)
	if p.metrics == nil {
		return b, nil
	}
	after, err := p.s.sumMetrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: proxy metrics: %w", p.s.label, err)
	}
	for _, phase := range []string{"collect", "certify", "order", "local"} {
		key := `{phase="` + phase + `"}`
		b.PhaseSeconds[phase] = after["tashkent_proxy_commit_phase_seconds_sum"+key] - p.metrics["tashkent_proxy_commit_phase_seconds_sum"+key]
		b.PhaseCount[phase] = after["tashkent_proxy_commit_phase_seconds_count"+key] - p.metrics["tashkent_proxy_commit_phase_seconds_count"+key]
	}
	for _, o := range []string{"commit", "abort", "preempted", "unknown"} {
		key := `tashkent_proxy_transactions_total{outcome="` + o + `"}`
		b.Outcomes[o] = after[key] - p.metrics[key]
	}
	return b, nil
}

// add sums another run's breakdown into b (the cell's total over its
// repeats).
func (b *Breakdown) add(o *Breakdown) {
	b.Wall += o.Wall
	for _, m := range []struct{ dst, src map[string]float64 }{{b.PhaseSeconds, o.PhaseSeconds}, {b.PhaseCount, o.PhaseCount}, {b.Outcomes, o.Outcomes}} {
		for k, v := range m.src {
			m.dst[k] += v
		}
	}
	for k, v := range o.CPU {
		b.CPU[k] += v
	}
	b.StalenessSum += o.StalenessSum
	b.StalenessMax = max(b.StalenessMax, o.StalenessMax)
	b.StalenessCount += o.StalenessCount
}

func newBreakdown() *Breakdown {
	return &Breakdown{CPU: map[string]time.Duration{}, PhaseSeconds: map[string]float64{}, PhaseCount: map[string]float64{},
		Outcomes: map[string]float64{}}
}

// cellBreakdown sums the breakdowns of a cell's successful runs, and
// their committed transactions and attempts.
func cellBreakdown(runs []SuiteRun, row SuiteRow) (b *Breakdown, processed, retries int64) {
	for _, r := range runs {
		if r.Label != row.Label || r.Clients != row.Clients || r.Param != row.Param || r.Error != "" || r.Breakdown == nil {
			continue
		}
		if b == nil {
			b = newBreakdown()
		}
		b.add(r.Breakdown)
		processed += r.Processed
		retries += r.Retries + r.Failed
	}
	return b, processed, retries
}

// breakdownTables renders the breakdown of every cell: CPU per committed
// transaction and share of the cores; and for tashkent the commit phases,
// the sources of aborts and the staleness.
func (rep *SuiteReport) breakdownTables() (cpu, commit [][]string) {
	cores := float64(rep.CPUs)
	if cores < 1 {
		cores = float64(runtime.NumCPU())
	}
	head := []string{"system", "clients", "commits"}
	for _, p := range cpuParts {
		head = append(head, p+" ms/commit")
	}
	for _, p := range cpuParts {
		head = append(head, p+" % of cores")
	}
	cpu = [][]string{head}
	commit = [][]string{{"system", "clients", "collect ms", "certify ms", "order ms", "local ms", "certifier aborts", "preempted",
		"PostgreSQL aborts", "retries/commit", "stale versions mean", "stale max", "stale ms mean"}}
	for _, row := range rep.Rows {
		b, processed, retries := cellBreakdown(rep.Runs, row)
		if b == nil || processed == 0 {
			continue
		}
		line := []string{row.Label, strconv.Itoa(row.Clients), strconv.FormatInt(processed, 10)}
		for _, p := range cpuParts {
			line = append(line, fmt.Sprintf("%.2f", float64(b.CPU[p].Microseconds())/1000/float64(processed)))
		}
		for _, p := range cpuParts {
			line = append(line, fmt.Sprintf("%.0f", 100*b.CPU[p].Seconds()/(b.Wall.Seconds()*cores)))
		}
		cpu = append(cpu, line)
		if !row.Kind.tashkent() {
			continue
		}
		mean := func(p string) string {
			if b.PhaseCount[p] == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", 1000*b.PhaseSeconds[p]/b.PhaseCount[p])
		}
		// The client retries every abort; those neither the certifier
		// nor a preemption caused were PostgreSQL's own (a concurrent
		// update on the same replica, first updater wins).
		pgAborts := math.Max(0, float64(retries)-b.Outcomes["abort"]-b.Outcomes["preempted"])
		staleMean, staleMs := "-", "-"
		if b.StalenessCount > 0 {
			m := b.StalenessSum / float64(b.StalenessCount)
			staleMean = fmt.Sprintf("%.1f", m)
			if rate := float64(processed) / b.Wall.Seconds(); rate > 0 {
				staleMs = fmt.Sprintf("%.1f", 1000*m/rate)
			}
		}
		commit = append(commit, []string{row.Label, strconv.Itoa(row.Clients), mean("collect"), mean("certify"), mean("order"), mean("local"),
			fmt.Sprintf("%.0f", b.Outcomes["abort"]), fmt.Sprintf("%.0f", b.Outcomes["preempted"]), fmt.Sprintf("%.0f", pgAborts),
			fmt.Sprintf("%.2f", float64(retries)/float64(processed)), staleMean, fmt.Sprintf("%.0f", b.StalenessMax), staleMs})
	}
	return cpu, commit
}

const breakdownFootnote = "CPU from /proc/PID/stat over each run (10 ms ticks), summed over the cell's repeats and divided by its " +
	"committed transactions; a part's processes include their exited children (PostgreSQL backends, pgpool children, the " +
	"pgbench clients). others: the rest of the machine's busy time meanwhile (/proc/stat): other processes of the shared machine. " +
	"% of cores: share of all the machine's cores over the run's wall time. Commit phases (Tashkent §6.2): the proxies' mean per " +
	"COMMIT of an update transaction. certifier aborts: COMMITs the certifier refused (write-write conflict with a transaction " +
	"committed at another replica after this one's start version); preempted: local transactions aborted for a remote writeset " +
	"(lock-watch); PostgreSQL aborts: the client's other retries (40001 from PostgreSQL itself: a concurrent update of the same " +
	"row on the same replica). Staleness: the certifier's version minus each replica's, sampled every 50 ms during the run, " +
	"over all replicas; in ms at the run's commit rate."

// writeBreakdown writes both breakdown tables in Markdown, when the run
// made any.
func (rep *SuiteReport) writeBreakdown(w io.Writer) {
	cpu, commit := rep.breakdownTables()
	if len(cpu) < 2 {
		return
	}
	fmt.Fprintf(w, "\nWhere the time goes (--breakdown): CPU per committed transaction, and share of the %d cores\n\n", rep.CPUs)
	writeMarkdownTable(w, cpu)
	if len(commit) > 1 {
		fmt.Fprintf(w, "\ntashkent: commit phases, aborts by cause, replica staleness\n\n")
		writeMarkdownTable(w, commit)
	}
	fmt.Fprintf(w, "\n%s\n", breakdownFootnote)
}

// writeMarkdownTable writes rows (the first is the header) as a Markdown
// table, the first column left-aligned and the others right-aligned.
func writeMarkdownTable(w io.Writer, rows [][]string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(rows[0], " | "))
	aligns := make([]string, len(rows[0]))
	for i := range aligns {
		aligns[i] = "---:"
	}
	aligns[0] = "---"
	fmt.Fprintf(w, "| %s |\n", strings.Join(aligns, " | "))
	for _, r := range rows[1:] {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}
