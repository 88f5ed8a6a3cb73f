package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func (rep *SuiteReport) header() string {
	c := rep.Config
	h := fmt.Sprintf("tashkent bench %s: %s per run, median of %d run(s) per cell, systems interleaved, %d CPUs (shared machine)",
		c.Workload, c.Duration, c.Repeat, rep.CPUs)
	if c.Workload.tpcb() {
		h += fmt.Sprintf(", scale %d", c.Scale)
	}
	if c.Workload == TPCC {
		h += fmt.Sprintf(", %d warehouse(s), go-tpc %s", c.Warehouses, goTPCVersion)
	} else if !c.Workload.sysbench() {
		h += ", pgbench -M " + c.Protocol
	}
	if c.Delay > 0 {
		h += fmt.Sprintf(", %s one-way delay between hosts", c.Delay)
	}
	h += fsyncDelayNote(c.FsyncDelay)
	if c.Staleness > 0 {
		h += fmt.Sprintf(", tashkent agents with --staleness %s", c.Staleness)
	}
	if len(c.AgentArgs) > 0 {
		h += ", tashkent agents with " + strings.Join(c.AgentArgs, " ")
	}
	h += certifierGroupNote(c.Certifiers)
	if len(c.CertifierArgs) > 0 {
		h += ", certifiers with " + strings.Join(c.CertifierArgs, " ")
	}
	if c.OneWriter {
		h += ", every tashkent client on replica 1 (--one-writer)"
	}
	if c.Workload.oneServer() {
		h += ", every client on the system's first server (replica 1 of a running tashkent cluster)"
	}
	h += workloadNote(c)
	if !math.IsNaN(rep.LoadBefore) && !math.IsNaN(rep.LoadAfter) && (rep.LoadBefore > 0 || rep.LoadAfter > 0) {
		h += fmt.Sprintf("; load average %.2f when the runs began, %.2f when they ended", rep.LoadBefore, rep.LoadAfter)
	}
	return h
}

// workloadNote is the header's part that says how the contention and
// mixed workloads, the offered rate and mode ed's systems ran.
func workloadNote(c SuiteConfig) string {
	var h string
	switch c.Workload {
	case Contention:
		h += fmt.Sprintf(", one-row updates of %d rows at %s, a share c of them on the first (1-c) of the rows, aborts not retried",
			contentionRows, strings.ToUpper(c.Isolation))
	case Mixed:
		h += ", one INSERT per transaction, fast ones with SET LOCAL synchronous_commit = off, safe ones with = on"
	}
	if c.Rate > 0 {
		h += fmt.Sprintf(", offered rate %g tps (pgbench -R: latency counts from each transaction's scheduled start)", c.Rate)
	}
	if slices.ContainsFunc(c.Systems, func(sp SystemSpec) bool { return sp.Kind.eventualDurability() }) {
		h += ", mw-fast and mw-safe: tashkent mode ed with every session's synchronous_commit off (fast) or on (safe)"
	}
	return h
}

// fmtRatioSpread is a cell's per-repeat ratio: the median and, with more
// than one repeat, the range.
func fmtRatioSpread(r SuiteRow) string {
	if len(r.RepeatRatios) == 0 {
		return "-"
	}
	if len(r.RepeatRatios) == 1 {
		return fmtRatio(r.RepeatRatio)
	}
	return fmt.Sprintf("%.2fx (%.2f–%.2f)", r.RepeatRatio, r.RepeatRatioMin, r.RepeatRatioMax)
}

// showRepeatRatios: the per-repeat ratio column only says more than the
// ratio of medians when there are repeats.
func (rep *SuiteReport) showRepeatRatios() bool { return rep.Config.Repeat > 1 }

func fmtRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

// tableRows renders the rows as cells, the heading first.
func (rep *SuiteReport) tableRows() [][]string {
	param := rep.Config.Workload.paramName()
	scripts := rep.scriptNames()
	head := []string{"system", "clients"}
	if param != "" {
		head = append(head, param)
	}
	head = append(head, "tps", "lat avg ms", "abort %")
	for _, name := range scripts {
		head = append(head, name+" tps", name+" lat ms")
	}
	head = append(head, "vs "+rep.Config.Baseline, "lat vs "+rep.Config.Baseline, "tps of each run", "commits/fsync")
	if rep.showRepeatRatios() {
		head = append(head, "vs "+rep.Config.Baseline+" per repeat: median (min–max)")
	}
	out := [][]string{head}
	for _, r := range rep.Rows {
		row := []string{r.Label, strconv.Itoa(r.Clients)}
		if param != "" {
			row = append(row, fmtParam(rep.Config.Workload, r.Param))
		}
		runs := make([]string, len(r.RunsTPS))
		for i, t := range r.RunsTPS {
			runs[i] = fmt.Sprintf("%.0f", t)
		}
		cpf := "-"
		if r.CommitsPerFsync > 0 {
			cpf = fmt.Sprintf("%.1f", r.CommitsPerFsync)
		}
		if r.Error != "" {
			row = append(row, "FAILED", "-", "-")
			for range scripts {
				row = append(row, "-", "-")
			}
			row = append(row, "-", "-", "-", "-")
		} else {
			row = append(row, fmt.Sprintf("%.1f", r.TPS), fmt.Sprintf("%.2f", r.LatencyMs), fmt.Sprintf("%.2f", r.AbortPct))
			row = append(row, scriptCells(r, scripts)...)
			row = append(row, fmtRatio(r.Ratio), fmtRatio(r.LatencyRatio), strings.Join(runs, " "), cpf)
		}
		if rep.showRepeatRatios() {
			row = append(row, fmtRatioSpread(r))
		}
		out = append(out, row)
	}
	return out
}

// scriptNames are the scripts of a workload of several (mixed: fast and
// safe), in pgbench's order; nil for one script.
func (rep *SuiteReport) scriptNames() []string {
	for _, r := range rep.Rows {
		if len(r.Scripts) > 0 {
			names := make([]string, len(r.Scripts))
			for i, sc := range r.Scripts {
				names[i] = sc.Name
			}
			return names
		}
	}
	return nil
}

// scriptCells are a row's tps and latency of each named script; "-"
// where the script ran no transaction (the safe one at 100% fast).
func scriptCells(r SuiteRow, names []string) []string {
	var out []string
	for _, name := range names {
		i := slices.IndexFunc(r.Scripts, func(sc ScriptRow) bool { return sc.Name == name })
		if i < 0 || math.IsNaN(r.Scripts[i].LatencyMs) {
			out = append(out, "-", "-")
			continue
		}
		out = append(out, fmt.Sprintf("%.1f", r.Scripts[i].TPS), fmt.Sprintf("%.2f", r.Scripts[i].LatencyMs))
	}
	return out
}

// fmtParam prints a point's param: c with two decimals, a fast share as
// a whole percent.
func fmtParam(w Workload, x float64) string {
	if w == Mixed {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

const suiteFootnote = "Ratios divide by the baseline's median at the same point, measured in this invocation; " +
	"per repeat: each run divided by the baseline's run of the same repeat (made moments apart), median and range over the repeats. " +
	"abort %: attempts that ended in an abort (SQLSTATE 40001 and the like; retried by the client except in contention) over all attempts."

// WriteTable prints the table for people.
func (rep *SuiteReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n\n", rep.header())
	rows := rep.tableRows()
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, v := range r {
			width[i] = max(width[i], len(v))
		}
	}
	for i, r := range rows {
		if i > 1 && (rep.Rows[i-1].Clients != rep.Rows[i-2].Clients || rep.Rows[i-1].Param != rep.Rows[i-2].Param) {
			fmt.Fprintln(w)
		}
		var b strings.Builder
		for j, v := range r {
			if j == 0 {
				fmt.Fprintf(&b, "%-*s", width[j], v)
			} else {
				fmt.Fprintf(&b, "  %*s", width[j], v)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	fmt.Fprintf(w, "\n%s\n", suiteFootnote)
	if note := rep.tpcbScaleNote(); note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	rep.writeFailures(w)
	if so := rep.ScaleOut; so != nil {
		fmt.Fprintf(w, "\n%s\n", so.summary())
	}
	rep.writeBreakdown(w)
	rep.writeTPCC(w)
}

// writeFailures lists the cells that produced no result, and why.
func (rep *SuiteReport) writeFailures(w io.Writer) {
	for _, r := range rep.Rows {
		if r.Error != "" {
			fmt.Fprintf(w, "\nFAILED %s, %d clients: %s\n", r.Label, r.Clients, r.Error)
		}
	}
}

// WriteMarkdown writes the same table in Markdown.
func (rep *SuiteReport) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n", rep.header())
	writeMarkdownTable(w, rep.tableRows())
	fmt.Fprintf(w, "\n%s\n", suiteFootnote)
	if note := rep.tpcbScaleNote(); note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	rep.writeFailures(w)
	if so := rep.ScaleOut; so != nil {
		fmt.Fprintf(w, "\n%s\n", so.summary())
	}
	rep.writeBreakdown(w)
	rep.writeTPCC(w)
}

// tpcbScaleNote says which TPC-B cells a spec-conforming database of this
// scale could report: TPC-B (clause 4.2) sizes the database by the
// throughput it is configured for, one branch, 10 tellers and 100,000
// accounts per tps, so scale S carries at most S tps. pgbench's own rule
// is weaker: a scale of at least the clients, else the run mostly measures
// contention on the branch rows.
func (rep *SuiteReport) tpcbScaleNote() string {
	c := rep.Config
	if c.Workload != TPCB {
		return ""
	}
	var over []string
	for _, r := range rep.Rows {
		if r.Error == "" && r.TPS > float64(c.Scale) {
			over = append(over, fmt.Sprintf("%s at %d clients (%.0f tps)", r.Label, r.Clients, r.TPS))
		}
	}
	note := fmt.Sprintf("TPC-B scaling (clause 4.2: 1 branch, 10 tellers, 100,000 accounts per tps): scale %d carries at most %d tps; ", c.Scale, c.Scale)
	if len(over) == 0 {
		note += "every cell is within it."
	} else {
		note += fmt.Sprintf("%d of %d cells are over it, so not spec-conforming: %s.", len(over), len(rep.Rows), strings.Join(over, ", "))
	}
	if top := slices.Max(c.Clients); c.Scale < top {
		note += fmt.Sprintf(" The scale is also below the %d clients (pgbench's rule: at least the clients, else the run mostly measures update contention on the branch rows).", top)
	}
	return note
}

func (so *ScaleOut) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Scale-out model (Jiménez-Peris et al. §2.1), %s: on %s with %d clients all on replica 1, %d transactions; "+
		"PostgreSQL CPU of replica 1 (local execution) %s, of replica 2 (remote apply) %s: wo·w = %.3f, w = %.2f",
		so.Workload, so.Probe, so.Clients, so.Transactions, so.LocalCPU.Round(1e6), so.ApplyCPU.Round(1e6), so.WoW, so.W)
	if !math.IsNaN(so.Wo) {
		fmt.Fprintf(&b, ", wo = %.3f", so.Wo)
	}
	b.WriteString(".\nModel so(n) = n/(1+wo·w·(n−1)):")
	for n := 1; n <= 5; n++ {
		fmt.Fprintf(&b, " so(%d)=%.2f", n, ScaleOutModel(n, so.WoW))
	}
	if len(so.Measured) > 0 {
		b.WriteString(".\nMeasured tps(mw xN)/tps(mw x1) on this machine (2 shared cores: every replica shares them, so no scale-out can show):")
		for _, p := range so.Measured {
			fmt.Fprintf(&b, " %d: %.2f", p.Replicas, p.SO)
		}
		if !math.IsNaN(so.FittedWoW) {
			fmt.Fprintf(&b, "; least-squares wo·w fitted to these: %.3f", so.FittedWoW)
		}
	}
	b.WriteString(".")
	return b.String()
}

// WriteFiles writes WORKLOAD.csv, WORKLOAD-runs.csv, WORKLOAD.md and the
// PNG figures into dir, and returns the paths written.
func (rep *SuiteReport) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	name := string(rep.Config.Workload)
	if rep.Config.Workload.tpcb() && rep.Config.Scale > 1 {
		name += "-scale" + strconv.Itoa(rep.Config.Scale)
	}
	if rep.Config.Workload == TPCC {
		name += "-w" + strconv.Itoa(rep.Config.Warehouses)
	}
	if rep.Config.Delay > 0 {
		name += "-delay" + delayName(rep.Config.Delay)
	}
	if rep.Config.FsyncDelay > 0 {
		name += "-fsync" + delayName(rep.Config.FsyncDelay)
	}
	if rep.Config.Staleness > 0 {
		name += "-staleness" + delayName(rep.Config.Staleness)
	}
	if rep.Config.OneWriter {
		name += "-onewriter"
	}
	if rep.Config.Workload == Contention && rep.Config.Isolation == "serializable" {
		name += "-serializable"
	}
	if rep.Config.Rate > 0 {
		name += "-rate" + strconv.FormatFloat(rep.Config.Rate, 'f', -1, 64)
	}
	var written []string
	path := func(suffix string) string {
		p := filepath.Join(dir, name+suffix)
		written = append(written, p)
		return p
	}
	f3 := func(x float64) string {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	rows := [][]string{{"workload", "system", "kind", "replicas", "clients", "param", "tps_median", "latency_avg_ms_median", "abort_pct",
		"ratio_tps_vs_baseline", "ratio_latency_vs_baseline", "baseline", "commits_per_fsync", "runs_tps", "delay_ms",
		"ratio_per_repeat_median", "ratio_per_repeat_min", "ratio_per_repeat_max", "ratios_per_repeat", "load_before", "load_after"}}
	for _, r := range rep.Rows {
		runs := make([]string, len(r.RunsTPS))
		for i, t := range r.RunsTPS {
			runs[i] = f3(t)
		}
		ratios := make([]string, len(r.RepeatRatios))
		for i, x := range r.RepeatRatios {
			ratios[i] = f3(x)
		}
		rows = append(rows, []string{name, r.Label, string(r.Kind), strconv.Itoa(r.Replicas), strconv.Itoa(r.Clients), f3(r.Param),
			f3(r.TPS), f3(r.LatencyMs), f3(r.AbortPct), f3(r.Ratio), f3(r.LatencyRatio), rep.Config.Baseline, f3(r.CommitsPerFsync),
			strings.Join(runs, ";"), f3(float64(rep.Config.Delay.Microseconds()) / 1000),
			f3(r.RepeatRatio), f3(r.RepeatRatioMin), f3(r.RepeatRatioMax), strings.Join(ratios, ";"), f3(rep.LoadBefore), f3(rep.LoadAfter)})
	}
	if err := writeCSV(path(".csv"), rows); err != nil {
		return nil, err
	}
	runs := [][]string{{"system", "clients", "param", "repeat", "tps", "latency_avg_ms", "processed", "failed", "retries", "certifications", "fsyncs"}}
	for _, r := range rep.Runs {
		runs = append(runs, []string{r.Label, strconv.Itoa(r.Clients), f3(r.Param), strconv.Itoa(r.Repeat), f3(r.TPS), f3(r.LatencyMs),
			strconv.FormatInt(r.Processed, 10), strconv.FormatInt(r.Failed, 10), strconv.FormatInt(r.Retries, 10),
			strconv.FormatUint(r.Certifications, 10), strconv.FormatUint(r.Fsyncs, 10)})
	}
	if err := writeCSV(path("-runs.csv"), runs); err != nil {
		return nil, err
	}
	if scripts := rep.scriptTable(name, f3); len(scripts) > 1 {
		if err := writeCSV(path("-scripts.csv"), scripts); err != nil {
			return nil, err
		}
	}
	if cpu, commit := rep.breakdownTables(); len(cpu) > 1 {
		if err := writeCSV(path("-breakdown-cpu.csv"), cpu); err != nil {
			return nil, err
		}
		if err := writeCSV(path("-breakdown-commit.csv"), commit); err != nil {
			return nil, err
		}
	}
	if tpcc := rep.tpccCSV(); tpcc != nil {
		if err := writeCSV(path("-types.csv"), tpcc); err != nil {
			return nil, err
		}
	}
	md, err := os.Create(path(".md"))
	if err != nil {
		return nil, err
	}
	rep.WriteMarkdown(md)
	if err := md.Close(); err != nil {
		return nil, err
	}
	for suffix, fig := range rep.figures() {
		if err := fig.save(path(suffix)); err != nil {
			return nil, fmt.Errorf("plot %s: %w", suffix, err)
		}
	}
	slices.Sort(written)
	return written, nil
}

// scriptTable is WORKLOAD-scripts.csv: every cell's per-script medians
// (mixed: the fast and the safe transactions apart).
func (rep *SuiteReport) scriptTable(name string, f3 func(float64) string) [][]string {
	out := [][]string{{"workload", "system", "clients", "param", "script", "tps_median", "latency_avg_ms_median", "abort_pct"}}
	for _, r := range rep.Rows {
		for _, sc := range r.Scripts {
			out = append(out, []string{name, r.Label, strconv.Itoa(r.Clients), f3(r.Param), sc.Name, f3(sc.TPS), f3(sc.LatencyMs), f3(sc.AbortPct)})
		}
	}
	return out
}

// figures are the PNGs of the report, by file suffix.
func (rep *SuiteReport) figures() map[string]figure {
	c := rep.Config
	wl := string(c.Workload)
	base := c.Baseline
	figs := map[string]figure{}
	x := func(r SuiteRow) float64 { return float64(r.Clients) }
	xl := "clients"
	switch c.Workload {
	case Contention:
		x = func(r SuiteRow) float64 { return r.Param }
		xl = fmt.Sprintf("contention level c (a share c of the updates on the first 1-c of %d rows)", contentionRows)
	case Mixed:
		x = func(r SuiteRow) float64 { return r.Param }
		xl = "fast transactions (% of all)"
	}
	bySystem := func(y func(SuiteRow) float64) []series {
		var out []series
		for _, sp := range c.Systems {
			s := series{name: sp.label()}
			for _, r := range rep.Rows {
				if r.Label == sp.label() {
					s.xs, s.ys = append(s.xs, x(r)), append(s.ys, y(r))
				}
			}
			out = append(out, s)
		}
		return out
	}
	suffix := ""
	if c.Delay > 0 {
		suffix = fmt.Sprintf(", %s delay", c.Delay)
	}
	if c.FsyncDelay > 0 {
		suffix += fmt.Sprintf(", fsync +%s", c.FsyncDelay)
	}
	figs["-tps.png"] = figure{wl + ": throughput" + suffix, xl, "tps", bySystem(func(r SuiteRow) float64 { return r.TPS })}
	figs["-tps-ratio.png"] = figure{wl + ": throughput / " + base + suffix, xl, "ratio", bySystem(func(r SuiteRow) float64 { return r.Ratio })}
	figs["-latency.png"] = figure{wl + ": response time" + suffix, xl, "ms", bySystem(func(r SuiteRow) float64 { return r.LatencyMs })}
	figs["-latency-ratio.png"] = figure{wl + ": response time / " + base + suffix, xl, "ratio",
		bySystem(func(r SuiteRow) float64 { return r.LatencyRatio })}
	if names := rep.scriptNames(); names != nil {
		figs["-latency-by-script.png"] = figure{wl + ": response time of each kind of transaction" + suffix, xl, "ms", rep.scriptSeries(names, x)}
	}
	if c.Workload == Contention {
		figs["-aborts.png"] = figure{wl + ": abort rate" + suffix, xl, "% of attempts aborted", bySystem(func(r SuiteRow) float64 { return r.AbortPct })}
	}
	if tps, ratio, ok := rep.replicaFigures(); ok {
		figs["-replicas.png"], figs["-replicas-ratio.png"] = tps, ratio
	}
	if so := rep.ScaleOut; so != nil {
		figs["-scaleout.png"] = so.figure()
	}
	return figs
}

// scriptSeries are one line per system and script (mixed: "mw-safe fast",
// "mw-safe safe"), each script's median latency against x; a point where
// the script ran nothing is left out.
func (rep *SuiteReport) scriptSeries(names []string, x func(SuiteRow) float64) []series {
	var out []series
	for _, sp := range rep.Config.Systems {
		for _, name := range names {
			s := series{name: sp.label() + " " + name}
			for _, r := range rep.Rows {
				i := slices.IndexFunc(r.Scripts, func(sc ScriptRow) bool { return sc.Name == name })
				if r.Label != sp.label() || i < 0 || math.IsNaN(r.Scripts[i].LatencyMs) {
					continue
				}
				s.xs, s.ys = append(s.xs, x(r)), append(s.ys, r.Scripts[i].LatencyMs)
			}
			out = append(out, s)
		}
	}
	return out
}

// replicaFigures plot throughput against replicas at the last point, one
// line per kind that ran with two replica counts or more.
func (rep *SuiteReport) replicaFigures() (tps, ratio figure, ok bool) {
	pts := rep.Config.points()
	last := pts[len(pts)-1]
	byKind := map[System]*[2]series{}
	var kinds []System
	for _, r := range rep.Rows {
		if r.Clients != last.clients || r.Param != last.param || !r.Kind.replicated() {
			continue
		}
		if byKind[r.Kind] == nil {
			byKind[r.Kind] = &[2]series{{name: string(r.Kind)}, {name: string(r.Kind)}}
			kinds = append(kinds, r.Kind)
		}
		s := byKind[r.Kind]
		s[0].xs, s[0].ys = append(s[0].xs, float64(r.Replicas)), append(s[0].ys, r.TPS)
		s[1].xs, s[1].ys = append(s[1].xs, float64(r.Replicas)), append(s[1].ys, r.Ratio)
	}
	title := fmt.Sprintf("%s: throughput against replicas, %d clients", rep.Config.Workload, last.clients)
	tps = figure{title: title, xLabel: "replicas (servers)", yLabel: "tps"}
	ratio = figure{title: title + " / " + rep.Config.Baseline, xLabel: "replicas (servers)", yLabel: "ratio"}
	for _, k := range kinds {
		if len(byKind[k][0].xs) >= 2 {
			tps.series = append(tps.series, byKind[k][0])
			ratio.series = append(ratio.series, byKind[k][1])
			ok = true
		}
	}
	return tps, ratio, ok
}

func (so *ScaleOut) figure() figure {
	f := figure{title: fmt.Sprintf("%s: scale-out so(n) = n/(1+wo·w·(n−1))", so.Workload), xLabel: "replicas n", yLabel: "so(n)"}
	model := func(name string, woW float64) series {
		s := series{name: name, dashed: true}
		for n := 1; n <= 5; n++ {
			s.xs, s.ys = append(s.xs, float64(n)), append(s.ys, ScaleOutModel(n, woW))
		}
		return s
	}
	f.series = append(f.series, model(fmt.Sprintf("model, measured wo·w=%.3f", so.WoW), so.WoW))
	f.series = append(f.series, model("model, paper wo=0.15", 0.15*so.W))
	if len(so.Measured) > 0 {
		m := series{name: "measured (2 shared cores)"}
		for _, p := range so.Measured {
			m.xs, m.ys = append(m.xs, float64(p.Replicas)), append(m.ys, p.SO)
		}
		f.series = append(f.series, m)
	}
	return f
}

// delayName spells a delay for a file name, in ASCII: 2ms, 500us.
func delayName(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return strconv.FormatInt(d.Microseconds(), 10) + "us"
}
