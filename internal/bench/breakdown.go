package bench

// The breakdown (--breakdown) says where a system's time goes in each
// run, so that a ratio can be explained rather than only reported:
//
//   - CPU per committed transaction and share of the machine's cores, per
//     kind of process (PostgreSQL servers, tashkent agents, certifier,
//     pgpool, the pgbench clients, the bench itself), from /proc/PID/stat
//     before and after the run, and what every other process of the shared
//     machine took meanwhile (/proc/stat busy time minus ours). On two
//     cores a replicated system competes with its own clients and with
//     everything else; this shows by how much.
//   - PostgreSQL's CPU split by process (pgsampler.go): the client
//     backends (sessions over TCP: pgbench's, or pgpool's), the agents'
//     sessions (the applier and the control connection, over the Unix
//     socket), and the rest (postmaster, WAL writer, checkpointer,
//     autovacuum, walsenders). The commit hook, the capture triggers and
//     the wait for the certifier's decision run in the client backends.
//   - For tashkent systems, the agents' counters over the run
//     (/metrics, summed over the agents): certifications by outcome and
//     their mean round trip to the certifier (a backend's request to the
//     certifier's reply: in mw, until the version is durable in the
//     certifier's log), dooms (local transactions made to give way to a
//     remote writeset, Tashkent §8.2), remote versions applied and per
//     apply transaction; so how many of the client's retries PostgreSQL
//     itself caused (first updater wins on one replica); and the
//     replicas' staleness: the certifier's version minus each replica's
//     committed version (tashkent.committed_version(), read by the bench's
//     own session on each replica, whose CPU the split leaves out of the
//     client backends; the agents learn of local commits only every
//     --staleness), sampled every stalenessSampleEvery during the run. A
//     transaction's snapshot holds its replica's versions, so the sampled
//     staleness is how many certified versions a transaction starting at a
//     random moment does not see, each one a chance of a
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

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/process"
)

const stalenessSampleEvery = 50 * time.Millisecond

// stalenessSampleMax bounds one sample's question to the certifier: one
// that does not answer (stopped by a fault) does not hold up the run's end.
const stalenessSampleMax = 2 * time.Second

// cpuParts are the kinds of process a breakdown reports, in table order;
// together they are the machine's busy time.
var cpuParts = []string{"postgres", "agents", "certifier", "pgpool", "pgbench", "bench", "others"}

// postgresParts split the "postgres" part (pgsampler.go).
var postgresParts = []string{partClientBackends, partAgentSessions, partPostgresRest}

// systemParts are the processes of the system itself, not its clients,
// the bench or the rest of the machine: what a commit costs the servers.
var systemParts = []string{"postgres", "agents", "certifier", "pgpool"}

const (
	partClientBackends = "client backends"
	partAgentSessions  = "agent sessions"
	partPostgresRest   = "pg other"
)

// Breakdown is what one run's processes did.
type Breakdown struct {
	Wall time.Duration
	// CPU is the CPU time per part over the run (cpuParts and
	// postgresParts; "others" is the rest of the machine's busy time).
	CPU map[string]time.Duration
	// Agent are the agents' counters over the run, summed over the agents
	// (agentCounters' keys).
	Agent map[string]float64
	// Staleness samples (versions behind the certifier), over every
	// replica and sample.
	StalenessSum   float64
	StalenessMax   float64
	StalenessCount int
}

// agentCounters are the agent metrics a breakdown reads: its key, and the
// metric (a prefix ending in "{" sums every label).
var agentCounters = []struct{ key, metric string }{
	{"certify_seconds", "tashkent_agent_certify_seconds_sum"},
	{"certify_count", "tashkent_agent_certify_seconds_count"},
	{"commit", `tashkent_agent_certifications_total{outcome="commit"}`},
	{"abort", `tashkent_agent_certifications_total{outcome="abort"}`},
	{"unknown", `tashkent_agent_certifications_total{outcome="unknown"}`},
	{"unavailable", `tashkent_agent_certifications_total{outcome="unavailable"}`},
	{"dooms", "tashkent_agent_dooms_total{"},
	{"applied", "tashkent_agent_remote_versions_applied_total"},
	{"apply_txns", "tashkent_agent_apply_batch_versions_count"},
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
	add := func(part string, pid int, cpu func(int) (time.Duration, error)) {
		if t, err := cpu(pid); err == nil {
			snap.parts[part] += t
		}
	}
	for _, pg := range s.pgs {
		if pg != nil {
			add("postgres", pg.PID(), postgresCPU) // the server, its live and its exited children
		}
	}
	for _, p := range s.agents {
		if p != nil {
			add("agents", p.pid(), processCPU)
		}
	}
	for _, p := range s.certifiers { // a group's members, summed
		add("certifier", p.pid(), processCPU)
	}
	if s.pgpool != nil {
		add("pgpool", s.pgpool.pid(), postgresCPU) // pgpool's children too
	}
	if self, ok := process.ReadStat(os.Getpid()); ok {
		snap.parts["bench"] = self.CPU
		snap.parts["pgbench"] = self.ChildrenCPU // the clients, once reaped
	}
	snap.machineBusy = machineBusy()
	return snap
}

// processCPU is the CPU time of one process and its reaped children.
func processCPU(pid int) (time.Duration, error) {
	st, ok := process.ReadStat(pid)
	if !ok {
		return 0, fmt.Errorf("process %d: no /proc/%d/stat", pid, pid)
	}
	return st.CPU + st.ChildrenCPU, nil
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
	return time.Duration(busy) * process.ClockTick
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

// agentMetrics scrapes one agent's /metrics.
func agentMetrics(ctx context.Context, port int) (map[string]float64, error) {
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

// counters picks agentCounters out of scraped metrics.
func counters(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, c := range agentCounters {
		if strings.HasSuffix(c.metric, "{") {
			for k, v := range m {
				if strings.HasPrefix(k, c.metric) {
					out[c.key] += v
				}
			}
			continue
		}
		out[c.key] = m[c.metric]
	}
	return out
}

// sumAgentCounters scrapes every agent of the system and adds their
// counters up.
func (s *system) sumAgentCounters(ctx context.Context) (map[string]float64, error) {
	total := map[string]float64{}
	for i, port := range s.metricsPort {
		m, err := agentMetrics(ctx, port)
		if err != nil {
			return nil, fmt.Errorf("agent %d metrics: %w", i+1, err)
		}
		for k, v := range counters(m) {
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
	pg      *pgSampler
	agent   map[string]float64
	// conns read the replicas' versions, certifier the certifier's
	// (staleness), each over one connection for the whole run.
	conns     []*pgx.Conn
	certifier *cluster.StatusQuerier
	stop      chan struct{}
	done      sync.WaitGroup
	mu        sync.Mutex
	stale     []float64
}

func (s *system) startBreakdown(ctx context.Context) (*breakdownProbe, error) {
	p := &breakdownProbe{s: s, stop: make(chan struct{}), pg: newPgSampler(s.postmasters())}
	if len(s.metricsPort) > 0 {
		m, err := s.sumAgentCounters(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.label, err)
		}
		p.agent = m
		p.certifier = cluster.NewStatusQuerier(s.certAddr)
		for _, pg := range s.pgs {
			conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
			if err != nil {
				p.closeConns()
				return nil, fmt.Errorf("%s: %w", s.label, err)
			}
			p.conns = append(p.conns, conn)
			p.pg.exclude[int(conn.PgConn().PID())] = true
		}
		p.done.Go(func() { p.sampleStaleness(ctx) })
	}
	p.pg.sample()
	p.done.Go(p.samplePostgres)
	p.started, p.cpu = time.Now(), s.snapshotCPU()
	return p, nil
}

// postmasters are the PIDs of the system's PostgreSQL servers.
func (s *system) postmasters() []int {
	var out []int
	for _, pg := range s.pgs {
		if pg != nil {
			out = append(out, pg.PID())
		}
	}
	return out
}

// samplePostgres samples the servers' processes until stopped.
func (p *breakdownProbe) samplePostgres() {
	tick := time.NewTicker(pgSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
			p.pg.sample()
		}
	}
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
		qctx, cancel := context.WithTimeout(ctx, stalenessSampleMax)
		st, err := p.certifier.Query(qctx)
		cancel()
		if err != nil {
			continue
		}
		for _, conn := range p.conns {
			v, err := committedVersion(ctx, conn)
			if err != nil {
				continue
			}
			p.mu.Lock()
			p.stale = append(p.stale, max(0, float64(st.Version)-float64(v)))
			p.mu.Unlock()
		}
	}
}

func (p *breakdownProbe) closeConns() {
	for _, c := range p.conns {
		c.Close(context.Background())
	}
	if p.certifier != nil {
		p.certifier.Close()
	}
}

// finish ends the measurement of the run (the clients have exited).
func (p *breakdownProbe) finish(ctx context.Context) (*Breakdown, error) {
	cpu := p.s.snapshotCPU()
	wall := time.Since(p.started)
	close(p.stop)
	p.done.Wait()
	p.closeConns()
	p.pg.sample()
	b := &Breakdown{Wall: wall, CPU: cpuBetween(p.cpu, cpu), Agent: map[string]float64{}}
	split := p.pg.byClass()
	b.CPU[partClientBackends] = min(split[partClientBackends], b.CPU["postgres"])
	b.CPU[partAgentSessions] = min(split[partAgentSessions], b.CPU["postgres"]-b.CPU[partClientBackends])
	b.CPU[partPostgresRest] = b.CPU["postgres"] - b.CPU[partClientBackends] - b.CPU[partAgentSessions]
	for _, v := range p.stale {
		b.StalenessSum += v
		b.StalenessMax = max(b.StalenessMax, v)
	}
	b.StalenessCount = len(p.stale)
	if p.agent == nil {
		return b, nil
	}
	after, err := p.s.sumAgentCounters(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.s.label, err)
	}
	for _, c := range agentCounters {
		b.Agent[c.key] = after[c.key] - p.agent[c.key]
	}
	return b, nil
}

// add sums another run's breakdown into b (the cell's total over its
// repeats).
func (b *Breakdown) add(o *Breakdown) {
	b.Wall += o.Wall
	for k, v := range o.Agent {
		b.Agent[k] += v
	}
	for k, v := range o.CPU {
		b.CPU[k] += v
	}
	b.StalenessSum += o.StalenessSum
	b.StalenessMax = max(b.StalenessMax, o.StalenessMax)
	b.StalenessCount += o.StalenessCount
}

func newBreakdown() *Breakdown {
	return &Breakdown{CPU: map[string]time.Duration{}, Agent: map[string]float64{}}
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

// systemCPU is the CPU of the system's own processes (systemParts).
func (b *Breakdown) systemCPU() time.Duration {
	var t time.Duration
	for _, p := range systemParts {
		t += b.CPU[p]
	}
	return t
}

// breakdownTables renders the breakdown of every cell: CPU per committed
// transaction and share of the cores; and for tashkent the agents'
// counters, the sources of aborts and the staleness.
func (rep *SuiteReport) breakdownTables() (cpu, commit [][]string) {
	cores := float64(rep.CPUs)
	if cores < 1 {
		cores = float64(runtime.NumCPU())
	}
	head := []string{"system", "clients", "commits", "system ms/commit", "vs " + rep.Config.Baseline}
	for _, p := range cpuParts {
		head = append(head, p+" ms/commit")
		if p == "postgres" {
			for _, sp := range postgresParts {
				head = append(head, sp+" ms/commit")
			}
		}
	}
	for _, p := range cpuParts {
		head = append(head, p+" % of cores")
	}
	cpu = [][]string{head}
	commit = [][]string{{"system", "clients", "certify ms", "certified", "certifier aborts", "unknown or unavailable", "dooms",
		"PostgreSQL aborts", "retries/commit", "remote versions applied", "versions/apply txn", "stale versions mean", "stale max",
		"stale ms mean"}}
	perCommit := map[string]float64{} // label/clients/param -> system CPU per commit
	key := func(r SuiteRow, label string) string { return fmt.Sprintf("%s/%d/%v", label, r.Clients, r.Param) }
	for _, row := range rep.Rows {
		if b, processed, _ := cellBreakdown(rep.Runs, row); b != nil && processed > 0 {
			perCommit[key(row, row.Label)] = b.systemCPU().Seconds() / float64(processed)
		}
	}
	for _, row := range rep.Rows {
		b, processed, retries := cellBreakdown(rep.Runs, row)
		if b == nil || processed == 0 {
			continue
		}
		ms := func(t time.Duration) string { return fmt.Sprintf("%.3f", t.Seconds()*1000/float64(processed)) }
		ratio := "-"
		if base, ok := perCommit[key(row, rep.Config.Baseline)]; ok && base > 0 {
			ratio = fmtRatio(perCommit[key(row, row.Label)] / base)
		}
		line := []string{row.Label, strconv.Itoa(row.Clients), strconv.FormatInt(processed, 10), ms(b.systemCPU()), ratio}
		for _, p := range cpuParts {
			line = append(line, ms(b.CPU[p]))
			if p == "postgres" {
				for _, sp := range postgresParts {
					line = append(line, ms(b.CPU[sp]))
				}
			}
		}
		for _, p := range cpuParts {
			line = append(line, fmt.Sprintf("%.0f", 100*b.CPU[p].Seconds()/(b.Wall.Seconds()*cores)))
		}
		cpu = append(cpu, line)
		if !row.Kind.tashkent() {
			continue
		}
		commit = append(commit, agentLine(row, b, processed, retries))
	}
	return cpu, commit
}

// agentLine is a tashkent cell's line of the commit table.
func agentLine(row SuiteRow, b *Breakdown, processed, retries int64) []string {
	a := b.Agent
	certifyMs := "-"
	if a["certify_count"] > 0 {
		certifyMs = fmt.Sprintf("%.3f", 1000*a["certify_seconds"]/a["certify_count"])
	}
	perApply := "-"
	if a["apply_txns"] > 0 {
		perApply = fmt.Sprintf("%.1f", a["applied"]/a["apply_txns"])
	}
	// The client retries every abort; those neither the certifier nor a
	// doom caused were PostgreSQL's own (a concurrent update of the same
	// row on the same replica, first updater wins).
	pgAborts := math.Max(0, float64(retries)-a["abort"]-a["dooms"])
	staleMean, staleMs := "-", "-"
	if b.StalenessCount > 0 {
		m := b.StalenessSum / float64(b.StalenessCount)
		staleMean = fmt.Sprintf("%.1f", m)
		if rate := float64(processed) / b.Wall.Seconds(); rate > 0 {
			staleMs = fmt.Sprintf("%.1f", 1000*m/rate)
		}
	}
	f0 := func(x float64) string { return fmt.Sprintf("%.0f", x) }
	return []string{row.Label, strconv.Itoa(row.Clients), certifyMs, f0(a["commit"]), f0(a["abort"]), f0(a["unknown"] + a["unavailable"]),
		f0(a["dooms"]), f0(pgAborts), fmt.Sprintf("%.2f", float64(retries)/float64(processed)), f0(a["applied"]), perApply,
		staleMean, fmt.Sprintf("%.0f", b.StalenessMax), staleMs}
}

const breakdownFootnote = "CPU from /proc/PID/stat over each run (10 ms ticks), summed over the cell's repeats and divided by its " +
	"committed transactions; a part's processes include their exited children (PostgreSQL backends, pgpool children, the " +
	"pgbench clients); certifier: every member of a certifier group, summed. system: postgres + agents + certifier + pgpool, the servers' CPU per commit, and its ratio to the " +
	"baseline's. postgres is split by process, sampled every 100 ms: client backends (sessions over TCP; the commit hook, " +
	"capture and the wait for the certifier run there), agent sessions (the agents' applier and control connections, over " +
	"the Unix socket), pg other (postmaster, WAL writer, checkpointer, autovacuum, walsenders, and what the sampling " +
	"missed). others: the rest of the machine's busy time meanwhile (/proc/stat): other processes of the shared machine. " +
	"% of cores: share of all the machine's cores over the run's wall time. certify ms: the agents' mean time from a " +
	"backend's request to the certifier's reply (in mw, until the version is durable in the certifier's log). certified: " +
	"certifications that committed; certifier aborts: refused (write-write conflict with a version committed after the " +
	"transaction's snapshot); dooms: local transactions made to give way to a remote writeset; PostgreSQL aborts: the " +
	"client's other retries (40001 from PostgreSQL itself: a concurrent update of the same row on the same replica). " +
	"Staleness: the certifier's version minus each replica's (tashkent.committed_version()), sampled every 50 ms during " +
	"the run, over all replicas; in ms at the run's commit rate."

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
		fmt.Fprintf(w, "\ntashkent: certifications, applies, aborts by cause, replica staleness (the agents' counters)\n\n")
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
