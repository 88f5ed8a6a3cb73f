package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/tashkent-db/tashkent/internal/process"
)

// pgbenchResult is what one pgbench process reported.
type pgbenchResult struct {
	TPS       float64 // without initial connection time
	LatencyMs float64 // latency average
	Processed int64   // transactions actually processed
	Failed    int64
	Retried   int64 // transactions retried (serialization failures)
	Retries   int64 // total number of retries
	// Statements are the per-statement average latencies of pgbench -r
	// (SQL statements only, in script order); nil without -r.
	Statements []StatementLatency
	// Scripts are the per-script statistics pgbench prints when it runs
	// several scripts (-f A@W -f B@W), in the order of the -f options;
	// nil with one script.
	Scripts []ScriptResult
}

// ScriptResult is one script's part of a pgbench run ("SQL script N:").
type ScriptResult struct {
	// Name is the script's file name without its directory and ".sql".
	Name      string
	TPS       float64
	LatencyMs float64 // NaN when the script ran no transaction
	Processed int64
	Failed    int64
	Retried   int64 // transactions retried
	Retries   int64 // total number of retries
}

// StatementLatency is one line of pgbench -r.
type StatementLatency struct {
	SQL     string
	Ms      float64 // average latency of the statement's executions
	Retries int64   // retries caused by an error at this statement
}

var (
	tpsRE       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	latencyRE   = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	processedRE = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	failedRE    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	retriedRE   = regexp.MustCompile(`(?m)^number of transactions retried: (\d+)`)
	retriesRE   = regexp.MustCompile(`(?m)^total number of retries: (\d+)`)
	progressRE  = regexp.MustCompile(`^progress: ([0-9.]+) s, ([0-9.]+) tps, lat ([0-9.]+) ms`)
	stmtHeadRE  = regexp.MustCompile(`(?m)^statement latencies in milliseconds.*:$`)
	// latency, failures, and (with --max-tries > 1) retries, then the
	// statement's first line.
	stmtLineRE = regexp.MustCompile(`^\s+([0-9.]+)\s+(\d+)(?:\s+(\d+))?\s+(\S.*)$`)
	// The per-script block: its head, then " - " lines.
	scriptHeadRE    = regexp.MustCompile(`^SQL script \d+: (.+)$`)
	scriptTxRE      = regexp.MustCompile(`^ - (\d+) transactions \([^,]*, tps = ([0-9.]+)\)`)
	scriptFailedRE  = regexp.MustCompile(`^ - number of failed transactions: (\d+)`)
	scriptRetriedRE = regexp.MustCompile(`^ - number of transactions retried: (\d+)`)
	scriptRetriesRE = regexp.MustCompile(`^ - total number of retries: (\d+)`)
	scriptLatencyRE = regexp.MustCompile(`^ - latency average = ([0-9.]+) ms`)
)

// parseScripts reads the per-script blocks of pgbench's summary.
func parseScripts(out string) []ScriptResult {
	var scripts []ScriptResult
	for _, line := range strings.Split(out, "\n") {
		if m := scriptHeadRE.FindStringSubmatch(line); m != nil {
			scripts = append(scripts, ScriptResult{Name: strings.TrimSuffix(filepath.Base(m[1]), ".sql"), LatencyMs: nan})
			continue
		}
		if len(scripts) == 0 || !strings.HasPrefix(line, " - ") {
			continue
		}
		sc := &scripts[len(scripts)-1]
		if m := scriptTxRE.FindStringSubmatch(line); m != nil {
			sc.Processed, _ = strconv.ParseInt(m[1], 10, 64)
			sc.TPS, _ = strconv.ParseFloat(m[2], 64)
		} else if m := scriptFailedRE.FindStringSubmatch(line); m != nil {
			sc.Failed, _ = strconv.ParseInt(m[1], 10, 64)
		} else if m := scriptRetriedRE.FindStringSubmatch(line); m != nil {
			sc.Retried, _ = strconv.ParseInt(m[1], 10, 64)
		} else if m := scriptRetriesRE.FindStringSubmatch(line); m != nil {
			sc.Retries, _ = strconv.ParseInt(m[1], 10, 64)
		} else if m := scriptLatencyRE.FindStringSubmatch(line); m != nil {
			sc.LatencyMs, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	return scripts
}

// parsePgbench reads pgbench's summary. tps and latency are required; the
// counters default to 0 when pgbench leaves them out.
func parsePgbench(out string) (pgbenchResult, error) {
	var r pgbenchResult
	m := tpsRE.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no \"tps = ... (without initial connection time)\" line in pgbench's output")
	}
	r.TPS, _ = strconv.ParseFloat(m[1], 64)
	m = latencyRE.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no \"latency average = ... ms\" line in pgbench's output")
	}
	r.LatencyMs, _ = strconv.ParseFloat(m[1], 64)
	if loc := stmtHeadRE.FindStringIndex(out); loc != nil {
		for _, line := range strings.Split(out[loc[1]:], "\n")[1:] {
			m := stmtLineRE.FindStringSubmatch(line)
			if m == nil {
				break
			}
			if strings.HasPrefix(m[4], "\\") { // a meta-command (\set), not SQL
				continue
			}
			st := StatementLatency{SQL: strings.TrimSpace(m[4])}
			st.Ms, _ = strconv.ParseFloat(m[1], 64)
			st.Retries, _ = strconv.ParseInt(m[3], 10, 64)
			r.Statements = append(r.Statements, st)
		}
	}
	for _, f := range []struct {
		re  *regexp.Regexp
		dst *int64
	}{{processedRE, &r.Processed}, {failedRE, &r.Failed}, {retriedRE, &r.Retried}, {retriesRE, &r.Retries}} {
		if m := f.re.FindStringSubmatch(out); m != nil {
			*f.dst, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	r.Scripts = parseScripts(out)
	return r, nil
}

// abortedRE matches pgbench's line for a client that stopped: its
// connection ended (e.g. a backend terminated), or an error it does not
// retry.
var abortedRE = regexp.MustCompile(`(?m)^pgbench: error: client \d+ (?:script \d+ )?aborted.*$`)

// abortedClients says whether clients of a pgbench run stopped before its
// end: pgbench goes on with the others and prints a summary ("Run was
// aborted; the above results are incomplete") whose tps counts fewer
// clients than the run had, so it measures another load. Such a run is an
// error, named by the first client's reason.
func abortedClients(stderr string, clients int) error {
	lines := abortedRE.FindAllString(stderr, -1)
	if len(lines) == 0 && !strings.Contains(stderr, "Run was aborted") {
		return nil
	}
	first := "(no client's reason printed)"
	if len(lines) > 0 {
		first = strings.TrimPrefix(lines[0], "pgbench: error: ")
	}
	return fmt.Errorf("%d of %d clients aborted, the results are incomplete; first: %s", len(lines), clients, first)
}

// progressTick is one `-P 1` line of one pgbench process.
type progressTick struct {
	proc    int
	seconds float64
	tps     float64
	latMs   float64
}

// pgbench runs the pgbench binary.
type pgbench struct{ path string }

func newPgbench(binDir string) pgbench { return pgbench{path: filepath.Join(binDir, "pgbench")} }

// init runs `pgbench -i -I steps -s scale` against dsn.
func (p pgbench) init(ctx context.Context, dsn, steps string, scale int) error {
	out, err := exec.CommandContext(ctx, p.path, "-i", "-I", steps, "-s", strconv.Itoa(scale), "-q", dsn).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench -i -I %s -s %d: %w\n%s", steps, scale, err, out)
	}
	return nil
}

// load is one pgbench process of a measured run.
type load struct {
	dsn     string
	clients int
	// offset is the number of clients of the loads before this one:
	// pgbench's :client_id restarts at 0 in every process, and a script
	// that gives every client its own rows adds :coff (pgbench -D).
	offset int
	// options are the PostgreSQL options of every session (PGOPTIONS,
	// which libpq reads in pgbench and sysbench alike); "": none.
	options string
}

// clientEnv is the environment of a client process of l.
func (l load) clientEnv() []string {
	if l.options == "" {
		return nil // the bench's own
	}
	return append(os.Environ(), "PGOPTIONS="+l.options)
}

// withOptions sets the session options of every load.
func withOptions(loads []load, options string) []load {
	for i := range loads {
		loads[i].options = options
	}
	return loads
}

// spread divides clients over the endpoints: one pgbench process per
// endpoint that gets at least one client.
func spread(endpoints []string, clients int) []load {
	var out []load
	n := len(endpoints)
	for i, e := range endpoints {
		c := clients / n
		if i < clients%n {
			c++
		}
		if c > 0 {
			off := 0
			if len(out) > 0 {
				off = out[len(out)-1].offset + out[len(out)-1].clients
			}
			out = append(out, load{dsn: e, clients: c, offset: off})
		}
	}
	return out
}

// runOpts are the pgbench options of a run besides its loads.
type runOpts struct {
	seconds      int
	protocol     string
	builtin      string
	perStatement bool               // -r
	tick         func(progressTick) // receives every progress line; may be nil
	// scripts, when set, replace the builtin: pgbench -f FILE[@WEIGHT].
	scripts []string
	// defines are pgbench -D NAME=VALUE, besides coff (load.offset).
	defines map[string]string
	// maxTries is pgbench --max-tries; 0: 1000 (retry 40001 until done).
	maxTries int
	// rate is the offered load in transactions per second over all the
	// loads (pgbench -R, shared by their clients); 0: as fast as they go.
	rate float64
}

// rateArgs is pgbench -R for one load: its clients' share of the rate.
func (o runOpts) rateArgs(l load, loads []load) []string {
	if o.rate <= 0 {
		return nil
	}
	total := 0
	for _, x := range loads {
		total += x.clients
	}
	return []string{"-R", strconv.FormatFloat(o.rate*float64(l.clients)/float64(total), 'f', 3, 64)}
}

// run runs the builtin script with every load at once for o.seconds and
// returns the sum of their throughput and the transaction-weighted mean of
// their latencies.
func (p pgbench) run(ctx context.Context, loads []load, o runOpts) (pgbenchResult, error) {
	type outcome struct {
		res pgbenchResult
		err error
	}
	outs := make([]outcome, len(loads))
	var wg sync.WaitGroup
	for i, l := range loads {
		wg.Go(func() {
			tries := o.maxTries
			if tries == 0 {
				tries = 1000
			}
			args := []string{"-n", "--max-tries", strconv.Itoa(tries), "-T", strconv.Itoa(o.seconds), "-M", o.protocol,
				"-c", strconv.Itoa(l.clients), "-j", strconv.Itoa(min(l.clients, 2)), "-P", "1"}
			if len(o.scripts) == 0 {
				args = append(args, "-b", o.builtin)
			}
			for _, f := range o.scripts {
				args = append(args, "-f", f)
			}
			if len(o.scripts) > 0 {
				args = append(args, "-D", "coff="+strconv.Itoa(l.offset))
			}
			for k, v := range o.defines {
				args = append(args, "-D", k+"="+v)
			}
			if o.perStatement {
				args = append(args, "-r")
			}
			args = append(args, o.rateArgs(l, loads)...)
			args = append(args, l.dsn)
			cmd := exec.CommandContext(ctx, p.path, args...)
			cmd.Env = l.clientEnv()
			var stdout, stderr bytes.Buffer
			cmd.Stdout = &stdout
			pipe, err := cmd.StderrPipe()
			if err != nil {
				outs[i].err = err
				return
			}
			if err := cmd.Start(); err != nil {
				outs[i].err = fmt.Errorf("start pgbench: %w", err)
				return
			}
			scanLines(pipe, &stderr, func(line string) {
				if m := progressRE.FindStringSubmatch(line); m != nil && o.tick != nil {
					t := progressTick{proc: i}
					t.seconds, _ = strconv.ParseFloat(m[1], 64)
					t.tps, _ = strconv.ParseFloat(m[2], 64)
					t.latMs, _ = strconv.ParseFloat(m[3], 64)
					o.tick(t)
				}
			})
			werr := cmd.Wait()
			res, perr := parsePgbench(stdout.String())
			if perr == nil {
				perr = abortedClients(stderr.String(), l.clients)
			}
			switch {
			case ctx.Err() != nil:
				outs[i].err = ctx.Err()
			case perr != nil:
				outs[i].err = fmt.Errorf("pgbench %s: %v (%v)\n%s%s", strings.Join(args, " "), perr, werr,
					process.OutputTail(stdout.String(), 2000), process.OutputTail(stderr.String(), 2000))
			default:
				// pgbench exits non-zero when some transactions failed
				// (after --max-tries); that shows in Failed, not as an error.
				outs[i].res = res
			}
		})
	}
	wg.Wait()
	var sum pgbenchResult
	var latWeighted float64
	for _, o := range outs {
		if o.err != nil {
			return sum, o.err
		}
		sum.TPS += o.res.TPS
		sum.Processed += o.res.Processed
		sum.Failed += o.res.Failed
		sum.Retried += o.res.Retried
		sum.Retries += o.res.Retries
		latWeighted += o.res.LatencyMs * float64(max(o.res.Processed, 1))
	}
	var weights float64
	for _, o := range outs {
		weights += float64(max(o.res.Processed, 1))
	}
	sum.LatencyMs = latWeighted / weights
	results := make([]pgbenchResult, len(outs))
	for i, o := range outs {
		results[i] = o.res
	}
	sum.Scripts = sumScripts(results)
	for i, o := range outs {
		w := float64(max(o.res.Processed, 1)) / weights
		for j, st := range o.res.Statements {
			if i == 0 {
				sum.Statements = append(sum.Statements, StatementLatency{SQL: st.SQL})
			}
			if j < len(sum.Statements) {
				sum.Statements[j].Ms += st.Ms * w
				sum.Statements[j].Retries += st.Retries
			}
		}
	}
	return sum, nil
}

// sumScripts adds up the per-script statistics of several pgbench
// processes that ran the same scripts: tps and counts summed, latency
// averaged weighted by transactions.
func sumScripts(results []pgbenchResult) []ScriptResult {
	if len(results) == 0 || len(results[0].Scripts) == 0 {
		return nil
	}
	out := make([]ScriptResult, len(results[0].Scripts))
	for j := range out {
		var latWeighted float64
		out[j].Name = results[0].Scripts[j].Name
		for _, r := range results {
			if j >= len(r.Scripts) {
				continue
			}
			sc := r.Scripts[j]
			out[j].TPS += sc.TPS
			out[j].Processed += sc.Processed
			out[j].Failed += sc.Failed
			out[j].Retried += sc.Retried
			out[j].Retries += sc.Retries
			if sc.Processed > 0 {
				latWeighted += sc.LatencyMs * float64(sc.Processed)
			}
		}
		out[j].LatencyMs = nan
		if out[j].Processed > 0 {
			out[j].LatencyMs = latWeighted / float64(out[j].Processed)
		}
	}
	return out
}

// scanLines copies r into keep and calls line for every line read.
func scanLines(r io.Reader, keep *bytes.Buffer, line func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		keep.WriteString(sc.Text())
		keep.WriteByte('\n')
		line(sc.Text())
	}
	io.Copy(io.Discard, r)
}
