package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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
	// TPCC is go-tpc's report of a tpcc run, per transaction type.
	TPCC *TPCCResult
	// Statements are the per-statement average latencies of pgbench -r
	// (SQL statements only, in script order); nil without -r.
	Statements []StatementLatency
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
)

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
			args = append(args, l.dsn)
			cmd := exec.CommandContext(ctx, p.path, args...)
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
