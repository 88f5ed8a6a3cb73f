package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RatioColumn is the heading of the ratio column in every table.
const RatioColumn = "vs sync=on"

func (rep *Report) header() string {
	c := rep.Config
	return fmt.Sprintf("pgbench -b %s, scale %d, -M %s, %s per run, median of %d run(s) per cell, systems interleaved, %d CPUs; "+
		"tashkent systems have %d replica(s)", c.Builtin, c.Scale, c.Protocol, c.Duration, c.Repeat, rep.CPUs, c.Replicas) +
		certifierGroupNote(c.Certifiers) + fsyncDelayNote(c.FsyncDelay)
}

// fileBase is the name the output files start with: pgbench, with
// -scaleN above scale 1 and -fsyncD in the slow-disk regime (as the
// suite's).
func (c Config) fileBase() string {
	base := "pgbench"
	if c.Scale > 1 {
		base += "-scale" + strconv.Itoa(c.Scale)
	}
	if c.FsyncDelay > 0 {
		base += "-fsync" + delayName(c.FsyncDelay)
	}
	return base
}

type cells struct {
	system, clients, tps, lat, retried, ratio, runs, cpf string
}

func (r Row) cells() cells {
	c := cells{
		system:  r.Label,
		clients: strconv.Itoa(r.Clients),
		tps:     fmt.Sprintf("%.1f", r.TPS),
		lat:     fmt.Sprintf("%.2f", r.LatencyMs),
		retried: fmt.Sprintf("%.2f", r.RetriesPerTxn),
		ratio:   "-",
		cpf:     "-",
	}
	if !math.IsNaN(r.Ratio) && !math.IsInf(r.Ratio, 0) {
		c.ratio = fmt.Sprintf("%.2fx", r.Ratio)
	}
	if r.CommitsPerFsync > 0 {
		c.cpf = fmt.Sprintf("%.1f", r.CommitsPerFsync)
	}
	if r.Failed > 0 {
		c.retried += fmt.Sprintf(" (%d failed)", r.Failed)
	}
	runs := make([]string, len(r.RunsTPS))
	for i, t := range r.RunsTPS {
		runs[i] = fmt.Sprintf("%.0f", t)
	}
	c.runs = strings.Join(runs, " ")
	return c
}

var heads = cells{"system", "clients", "tps", "lat avg ms", "retries/txn", RatioColumn, "tps of each run", "commits/fsync"}

// WriteTable prints the table for people: one block per client count.
func (rep *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n\n", rep.header())
	all := []cells{heads}
	for _, r := range rep.Rows {
		all = append(all, r.cells())
	}
	cols := func(c cells) []string {
		return []string{c.system, c.clients, c.tps, c.lat, c.retried, c.ratio, c.runs, c.cpf}
	}
	width := make([]int, len(cols(heads)))
	for _, c := range all {
		for i, v := range cols(c) {
			width[i] = max(width[i], len(v))
		}
	}
	last := 0
	for i, c := range all {
		if i > 0 {
			if last != 0 && rep.Rows[i-1].Clients != last {
				fmt.Fprintln(w)
			}
			last = rep.Rows[i-1].Clients
		}
		var b strings.Builder
		for j, v := range cols(c) {
			if j == 0 {
				fmt.Fprintf(&b, "%-*s", width[j], v) // the system: left
			} else {
				fmt.Fprintf(&b, "  %*s", width[j], v)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	fmt.Fprintf(w, "\n%s: tps over the median tps of %s at the same client count, measured in this invocation.\n"+
		"retries/txn: re-runs by pgbench after SQLSTATE 40001 (serialization failure or certification abort) per transaction.\n"+
		"commits/fsync: the certifier's certifications per log fsync during the runs (group commit).\n",
		RatioColumn, label(SyncOn, 1))
	rep.writeStatements(w)
}

// writeStatements prints, per client count, each statement's average
// latency on every system (pgbench -r), when it was measured.
func (rep *Report) writeStatements(w io.Writer) {
	byClients := map[int][]Row{}
	var order []int
	for _, r := range rep.Rows {
		if len(r.Statements) == 0 {
			continue
		}
		if _, ok := byClients[r.Clients]; !ok {
			order = append(order, r.Clients)
		}
		byClients[r.Clients] = append(byClients[r.Clients], r)
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintf(w, "\nper-statement latency, ms (pgbench -r; median of the runs; includes waits for row locks);\n"+
		"[r]: 40001 retries that started at this statement, per transaction processed:\n")
	for _, c := range order {
		rows := byClients[c]
		first := fmt.Sprintf("%d clients", c)
		width := len(first)
		for _, st := range rows[0].Statements {
			width = max(width, min(len(st.SQL), 60))
		}
		fmt.Fprintf(w, "\n%-*s", width, first)
		for _, r := range rows {
			fmt.Fprintf(w, "  %20s", r.Label)
		}
		fmt.Fprintln(w)
		for i, st := range rows[0].Statements {
			sql := st.SQL
			if len(sql) > 60 {
				sql = sql[:57] + "..."
			}
			fmt.Fprintf(w, "%-*s", width, sql)
			for _, r := range rows {
				cell := "-"
				if i < len(r.Statements) {
					cell = fmt.Sprintf("%.3f", r.Statements[i].Ms)
					if n := r.Statements[i].Retries; n > 0 {
						cell += fmt.Sprintf(" [%.2f]", float64(n)/float64(max(r.Processed, 1)))
					}
				}
				fmt.Fprintf(w, "  %20s", cell)
			}
			fmt.Fprintln(w)
		}
	}
}

// WriteMarkdown writes the same table in Markdown.
func (rep *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n", rep.header())
	line := func(c cells) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", c.system, c.clients, c.tps, c.lat, c.retried, c.ratio, c.runs, c.cpf)
	}
	line(heads)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rep.Rows {
		line(r.cells())
	}
	fmt.Fprintf(w, "\n%s: tps over the median tps of %s at the same client count, measured in the same invocation.\n",
		RatioColumn, label(SyncOn, 1))
}

// WriteFiles writes pgbench.csv (the table), pgbench-runs.csv (every run)
// and pgbench.md (the table in Markdown) into dir (named by fileBase).
func (rep *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f2 := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	summary := [][]string{{"system", "label", "replicas", "clients", "tps_median", "latency_avg_ms_median", "retried_pct", "retries_per_txn", "failed",
		"ratio_vs_sync_on", "commits_per_fsync", "runs_tps", "builtin", "scale", "protocol", "duration_s"}}
	for _, r := range rep.Rows {
		ratio := ""
		if !math.IsNaN(r.Ratio) && !math.IsInf(r.Ratio, 0) {
			ratio = f2(r.Ratio)
		}
		runs := make([]string, len(r.RunsTPS))
		for i, t := range r.RunsTPS {
			runs[i] = f2(t)
		}
		reps := "1"
		if r.System.tashkent() {
			reps = strconv.Itoa(rep.Config.Replicas)
		}
		summary = append(summary, []string{string(r.System), r.Label, reps, strconv.Itoa(r.Clients), f2(r.TPS), f2(r.LatencyMs),
			f2(r.RetriedPct), f2(r.RetriesPerTxn), strconv.FormatInt(r.Failed, 10), ratio, f2(r.CommitsPerFsync), strings.Join(runs, ";"),
			rep.Config.Builtin, strconv.Itoa(rep.Config.Scale), rep.Config.Protocol, strconv.Itoa(int(rep.Config.Duration.Seconds()))})
	}
	runs := [][]string{{"system", "label", "clients", "repeat", "tps", "latency_avg_ms", "processed", "retried", "retries", "failed",
		"certifications", "certifier_aborts", "fsyncs"}}
	for _, r := range rep.Runs {
		runs = append(runs, []string{string(r.System), r.Label, strconv.Itoa(r.Clients), strconv.Itoa(r.Repeat), f2(r.TPS), f2(r.LatencyMs),
			strconv.FormatInt(r.Processed, 10), strconv.FormatInt(r.Retried, 10), strconv.FormatInt(r.Retries, 10), strconv.FormatInt(r.Failed, 10),
			strconv.FormatUint(r.Certifications, 10), strconv.FormatUint(r.CertAborts, 10), strconv.FormatUint(r.Fsyncs, 10)})
	}
	base := rep.Config.fileBase()
	for name, recs := range map[string][][]string{base + ".csv": summary, base + "-runs.csv": runs} {
		if err := writeCSV(filepath.Join(dir, name), recs); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(dir, base+".md"))
	if err != nil {
		return err
	}
	rep.WriteMarkdown(f)
	return f.Close()
}

func writeCSV(path string, recs [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(recs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
