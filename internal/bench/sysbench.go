package bench

// sysbench (Debian's 1.0, pgsql driver) for the oltp_read_write and
// oltp_read_only workloads. sysbench connects with libpq on its own and
// uses server-side prepared statements (--db-ps-mode=auto): the extended
// protocol. Its pgsql driver treats SQLSTATE 40001
// (serialization failure, and so a certification abort) as an "ignored
// error" and re-runs the transaction; those count as retries here.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/tashkent-db/tashkent/internal/process"
)

const sysbenchBinary = "sysbench"

var (
	sbTransactionsRE = regexp.MustCompile(`(?m)^\s+transactions:\s+(\d+)\s+\(([0-9.]+) per sec\.\)`)
	sbIgnoredRE      = regexp.MustCompile(`(?m)^\s+ignored errors:\s+(\d+)`)
	sbLatencyAvgRE   = regexp.MustCompile(`(?m)^\s+avg:\s+([0-9.]+)`)
	sbProgressRE     = regexp.MustCompile(`^\[ (\d+)s \] thds: \d+ tps: ([0-9.]+) .* lat \(ms,95%\): ([0-9.]+)`)
)

// parseSysbench reads sysbench's final report.
func parseSysbench(out string) (pgbenchResult, error) {
	var r pgbenchResult
	m := sbTransactionsRE.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no \"transactions: N (X per sec.)\" line in sysbench's output")
	}
	r.Processed, _ = strconv.ParseInt(m[1], 10, 64)
	r.TPS, _ = strconv.ParseFloat(m[2], 64)
	if m := sbLatencyAvgRE.FindStringSubmatch(out); m != nil {
		r.LatencyMs, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := sbIgnoredRE.FindStringSubmatch(out); m != nil {
		r.Retries, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return r, nil
}

// sysbenchConn turns a DSN into sysbench's --pgsql-* options.
func sysbenchConn(dsn string) ([]string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return []string{"--db-driver=pgsql", "--pgsql-host=" + cfg.Host, "--pgsql-port=" + strconv.Itoa(int(cfg.Port)),
		"--pgsql-user=" + cfg.User, "--pgsql-db=" + cfg.Database}, nil
}

// sysbenchTableArgs are the options of every sysbench call. --auto_inc=off:
// sysbench numbers the rows itself. With its default, prepare fills the
// tables through a SERIAL column, which on a tashkent replica advances by
// the sequence stride (ids 1, 17, 33, ...), while run picks ids from 1 to
// --table-size: most of its reads and updates would find no row, a
// different workload from the baselines'.
func sysbenchTableArgs() []string {
	return []string{"--tables=" + strconv.Itoa(sysbenchTables), "--table-size=" + strconv.Itoa(sysbenchTableRows), "--auto_inc=off"}
}

// sysbenchPrepare creates and fills sysbench's tables through dsn.
func sysbenchPrepare(ctx context.Context, dsn string) error {
	conn, err := sysbenchConn(dsn)
	if err != nil {
		return err
	}
	args := append(append([]string{"oltp_read_write"}, conn...), sysbenchTableArgs()...)
	args = append(args, "prepare")
	if out, err := exec.CommandContext(ctx, sysbenchBinary, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("sysbench %s: %w\n%s", strings.Join(args, " "), err, process.OutputTail(string(out), 3000))
	}
	return nil
}

// sysbenchRun runs the script with every load at once (one sysbench
// process per endpoint) and sums them like pgbench.run does.
func sysbenchRun(ctx context.Context, script Workload, loads []load, seconds int, tick func(progressTick)) (pgbenchResult, error) {
	outs := make([]pgbenchResult, len(loads))
	errs := make([]error, len(loads))
	var wg sync.WaitGroup
	for i, l := range loads {
		wg.Go(func() {
			conn, err := sysbenchConn(l.dsn)
			if err != nil {
				errs[i] = err
				return
			}
			args := append(append([]string{string(script)}, conn...), sysbenchTableArgs()...)
			args = append(args, "--threads="+strconv.Itoa(l.clients), "--time="+strconv.Itoa(seconds),
				"--report-interval=1", "--db-ps-mode=auto", "--rand-seed="+strconv.Itoa(i+1), "run")
			cmd := exec.CommandContext(ctx, sysbenchBinary, args...)
			cmd.Env = l.clientEnv()
			var all bytes.Buffer
			pipe, err := cmd.StdoutPipe()
			if err != nil {
				errs[i] = err
				return
			}
			cmd.Stderr = &all
			if err := cmd.Start(); err != nil {
				errs[i] = fmt.Errorf("start sysbench: %w", err)
				return
			}
			var kept bytes.Buffer
			scanLines(pipe, &kept, func(line string) {
				if m := sbProgressRE.FindStringSubmatch(line); m != nil && tick != nil {
					t := progressTick{proc: i}
					t.seconds, _ = strconv.ParseFloat(m[1], 64)
					t.tps, _ = strconv.ParseFloat(m[2], 64)
					t.latMs, _ = strconv.ParseFloat(m[3], 64)
					tick(t)
				}
			})
			werr := cmd.Wait()
			res, perr := parseSysbench(kept.String())
			switch {
			case ctx.Err() != nil:
				errs[i] = ctx.Err()
			case perr != nil || werr != nil:
				errs[i] = fmt.Errorf("sysbench %s: %v %v\n%s%s", strings.Join(args, " "), perr, werr,
					process.OutputTail(kept.String(), 2000), process.OutputTail(all.String(), 2000))
			default:
				outs[i] = res
			}
		})
	}
	wg.Wait()
	var sum pgbenchResult
	var latW, weights float64
	for i, o := range outs {
		if errs[i] != nil {
			return sum, errs[i]
		}
		sum.TPS += o.TPS
		sum.Processed += o.Processed
		sum.Retries += o.Retries
		latW += o.LatencyMs * float64(max(o.Processed, 1))
		weights += float64(max(o.Processed, 1))
	}
	sum.LatencyMs = latW / weights
	return sum, nil
}
