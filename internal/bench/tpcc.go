package bench

// TPC-C, driven by go-tpc (PingCAP's TPC-C and TPC-H driver, module
// github.com/pingcap/go-tpc, PostgreSQL support from v1.0.9 on: `-d
// postgres`, lib/pq, server-side prepared statements). The bench does
// not carry its code: the first tpcc run builds the pinned version with
// `go install` into the user's cache directory and reuses it afterwards.
//
// The data are go-tpc's own: `go-tpc tpcc prepare` fills a throwaway
// PostgreSQL once per invocation (random rows, so they cannot be
// generated again in every replica), pg_dump saves them, and pg_restore
// loads the same rows into every system: through a standalone or peer
// system's endpoint once it runs, straight into every replica of a
// tashkent system before its certifier and agents start (seed.go).
// go-tpc's tables have primary keys but history, which TPC-C only
// inserts into; tashkent replicates it as a table without a key.
//
// go-tpc runs all five transaction types on the same connections, each
// thread drawing them from a deck (45% NewOrder, 43% Payment, 4% each of
// OrderStatus, Delivery and StockLevel). mw-neworder-fast makes NewOrder
// alone fast on the server: a statement trigger on INSERT into new_order,
// which only NewOrder does, sets synchronous_commit off for the rest of
// the transaction (SET LOCAL), which mode ed reads at COMMIT. The agents
// apply writesets with session_replication_role = replica, where the
// trigger does not fire.
//
// Isolation: go-tpc's default (--isolation 0) is the server's, READ
// COMMITTED, on every system. go-tpc does not retry: a transaction that
// fails (SQLSTATE 40001 on tashkent when certification aborts it, a
// deadlock) is counted as an error of its type (go-tpc's NAME_ERR) and,
// with --ignore-error, the thread goes on with its next transaction.
// tpmC counts NewOrder transactions that ended without error, the 1% that
// TPC-C rolls back on purpose (an unknown item) included, as go-tpc does.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
)

const (
	goTPCPackage = "github.com/pingcap/go-tpc/cmd/go-tpc"
	// goTPCVersion is the go-tpc the bench builds; v1.0.7 and older have
	// no PostgreSQL driver.
	goTPCVersion = "v1.0.12"
	// goTPCEnv names a go-tpc binary to use instead of building one.
	goTPCEnv = "TASHKENT_GO_TPC"
	// tpccErrorCauses bounds the distinct error messages a run keeps.
	tpccErrorCauses = 20
)

// checkTPCC checks what only the tpcc workload takes: --warehouses, and
// mw-neworder-fast, whose trigger is on TPC-C's new_order table.
func (c *SuiteConfig) checkTPCC() error {
	for _, sp := range c.Systems {
		if sp.Kind == MWNewOrderFast && c.Workload != TPCC {
			return fmt.Errorf("%s makes TPC-C's NewOrder transactions fast: it runs the tpcc workload only", sp.Kind)
		}
	}
	if c.Workload != TPCC {
		return nil
	}
	if c.Warehouses == 0 {
		c.Warehouses = 1
	}
	if c.Warehouses < 1 {
		return fmt.Errorf("warehouses %d: must be at least 1", c.Warehouses)
	}
	return nil
}

// TPCCTypes are go-tpc's transaction names, in TPC-C's order.
var TPCCTypes = []string{"new_order", "payment", "order_status", "delivery", "stock_level"}

// TPCCTxn is one transaction type's part of a go-tpc run.
type TPCCTxn struct {
	Name string
	// Count is the transactions that ended without error, Errors those
	// that failed (go-tpc's NAME_ERR); TPM is Count per minute.
	Count, Errors int64
	TPM           float64
	// SumMs is the latency of the Count transactions summed (exact);
	// the percentiles come from go-tpc's histogram (1 ms floor, one
	// significant digit).
	SumMs                             float64
	P50Ms, P90Ms, P95Ms, P99Ms, MaxMs float64
}

// AvgMs is the exact mean latency of the type's successful transactions;
// NaN when none ran.
func (t TPCCTxn) AvgMs() float64 {
	if t.Count == 0 {
		return nan
	}
	return t.SumMs / float64(t.Count)
}

// TPCCResult is what one go-tpc run reported.
type TPCCResult struct {
	// Txns are the five types in TPCCTypes order (zero when a type did
	// not run).
	Txns []TPCCTxn
	// TpmC is NewOrder transactions per minute.
	TpmC float64
	// ErrorCauses counts the failed transactions by the cause go-tpc
	// printed (the server's message), at most tpccErrorCauses of them.
	ErrorCauses map[string]int64
}

// txn returns the named type's part.
func (r *TPCCResult) txn(name string) TPCCTxn {
	for _, t := range r.Txns {
		if t.Name == name {
			return t
		}
	}
	return TPCCTxn{Name: name}
}

var (
	// A line of go-tpc's plain output, e.g. "[Summary] NEW_ORDER - Takes(s): 10.0, Count: 3346, TPM: 20145.5,
	// Sum(ms): 10539.3, Avg(ms): 3.1, 50th(ms): 2.6, 90th(ms): 5.8, 95th(ms): 7.9, 99th(ms): 14.2, 99.9th(ms): 31.5, Max(ms): 37.7".
	goTPCLineRE = regexp.MustCompile(`^\[(Summary|Current)\] ([A-Z_]+) - Takes\(s\): ([0-9.]+), Count: (\d+), TPM: ([0-9.]+), ` +
		`Sum\(ms\): ([0-9.]+), Avg\(ms\): ([0-9.]+), 50th\(ms\): ([0-9.]+), 90th\(ms\): ([0-9.]+), 95th\(ms\): ([0-9.]+), ` +
		`99th\(ms\): ([0-9.]+), 99\.9th\(ms\): ([0-9.]+), Max\(ms\): ([0-9.]+)`)
	goTPCTpmCRE = regexp.MustCompile(`^tpmC: ([0-9.]+), tpmTotal: ([0-9.]+)`)
	// go-tpc prints every failed transaction (without --silence):
	// "[2006-01-02 15:04:05] execute run failed, err exec ... failed pq: MESSAGE".
	goTPCFailedRE = regexp.MustCompile(`^\[[0-9: -]+\] execute run failed, err (.*)$`)
)

// goTPCLine is one parsed histogram line.
type goTPCLine struct {
	summary bool
	op      string // NEW_ORDER, NEW_ORDER_ERR, ...
	seconds float64
	txn     TPCCTxn
}

func parseGoTPCLine(line string) (goTPCLine, bool) {
	m := goTPCLineRE.FindStringSubmatch(line)
	if m == nil {
		return goTPCLine{}, false
	}
	f := func(i int) float64 { x, _ := strconv.ParseFloat(m[i], 64); return x }
	count, _ := strconv.ParseInt(m[4], 10, 64)
	return goTPCLine{summary: m[1] == "Summary", op: m[2], seconds: f(3),
		txn: TPCCTxn{Count: count, TPM: f(5), SumMs: f(6), P50Ms: f(8), P90Ms: f(9), P95Ms: f(10), P99Ms: f(11), MaxMs: f(13)}}, true
}

// errorCause is the part of a failed transaction's message that names
// the cause: the server's message after lib/pq's "pq: ", else the end of
// the message.
func errorCause(msg string) string {
	if i := strings.LastIndex(msg, "pq: "); i >= 0 {
		return strings.TrimSpace(msg[i+len("pq: "):])
	}
	if len(msg) > 120 {
		msg = "..." + msg[len(msg)-117:]
	}
	return strings.TrimSpace(msg)
}

// parseGoTPC reads go-tpc's output: its summary (after "Finished") and
// the failed transactions it printed.
func parseGoTPC(out string) (TPCCResult, error) {
	r := TPCCResult{ErrorCauses: map[string]int64{}}
	byName := map[string]*TPCCTxn{}
	for _, name := range TPCCTypes {
		r.Txns = append(r.Txns, TPCCTxn{Name: name})
	}
	for i := range r.Txns {
		byName[r.Txns[i].Name] = &r.Txns[i]
	}
	summaries, tpmC := 0, -1.0
	for _, line := range strings.Split(out, "\n") {
		if l, ok := parseGoTPCLine(line); ok && l.summary {
			name, isErr := strings.CutSuffix(strings.ToLower(l.op), "_err")
			t := byName[name]
			if t == nil {
				return r, fmt.Errorf("go-tpc reported an unknown transaction type %q", l.op)
			}
			if isErr {
				t.Errors = l.txn.Count
			} else {
				l.txn.Name, l.txn.Errors = name, t.Errors
				*t = l.txn
			}
			summaries++
		} else if m := goTPCTpmCRE.FindStringSubmatch(line); m != nil {
			tpmC, _ = strconv.ParseFloat(m[1], 64)
		} else if m := goTPCFailedRE.FindStringSubmatch(line); m != nil {
			addCause(r.ErrorCauses, m[1])
		}
	}
	if summaries == 0 {
		return r, errors.New("no \"[Summary]\" lines in go-tpc's output")
	}
	r.TpmC = tpmC
	if tpmC < 0 { // go-tpc prints tpmC only when a NewOrder succeeded
		r.TpmC = 0
	}
	return r, nil
}

// suiteResult is the run as the suite counts every workload's: tps and
// mean latency over every transaction that ended without error, failures
// as failed (go-tpc does not retry).
func (r TPCCResult) suiteResult() pgbenchResult {
	var out pgbenchResult
	var sumMs, tpm float64
	for _, t := range r.Txns {
		out.Processed += t.Count
		out.Failed += t.Errors
		sumMs += t.SumMs
		tpm += t.TPM
	}
	out.TPS = tpm / 60
	if out.Processed > 0 {
		out.LatencyMs = sumMs / float64(out.Processed)
	}
	out.TPCC = &r
	return out
}

// goTPCConn turns the endpoints of a run into go-tpc's connection flags:
// one host, every endpoint's port (go-tpc opens its connections on the
// host's ports in turn, so a run's threads spread evenly over the
// replicas), and the user and database of the first.
func goTPCConn(endpoints []string) ([]string, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("no endpoint")
	}
	var host, user, database, password string
	var ports []string
	for i, ep := range endpoints {
		cfg, err := pgconn.ParseConfig(ep)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			host, user, database, password = cfg.Host, cfg.User, cfg.Database, cfg.Password
		} else if cfg.Host != host {
			return nil, fmt.Errorf("go-tpc connects to the ports of one host; the endpoints are on %s and %s", host, cfg.Host)
		}
		ports = append(ports, strconv.Itoa(int(cfg.Port)))
	}
	args := []string{"-d", "postgres", "-H", host, "-P", strings.Join(ports, ","), "-U", user, "-D", database,
		"--conn-params", "sslmode=disable"}
	if password != "" {
		args = append(args, "-p", password)
	}
	return args, nil
}

// goTPCRunArgs is `go-tpc tpcc run` for one measured run: threads
// clients for seconds, a progress line per type every second, failed
// transactions counted and printed rather than ending their thread.
func goTPCRunArgs(endpoints []string, warehouses, threads, seconds int) ([]string, error) {
	conn, err := goTPCConn(endpoints)
	if err != nil {
		return nil, err
	}
	args := append([]string{"tpcc", "run"}, conn...)
	return append(args, "--warehouses", strconv.Itoa(warehouses), "-T", strconv.Itoa(threads),
		"--time", strconv.Itoa(seconds)+"s", "--interval", "1s", "--ignore-error", "--output", "plain"), nil
}

// goTPCPrepareArgs is `go-tpc tpcc prepare` into the loader.
func goTPCPrepareArgs(dsn string, warehouses, threads int) ([]string, error) {
	conn, err := goTPCConn([]string{dsn})
	if err != nil {
		return nil, err
	}
	args := append([]string{"tpcc", "prepare"}, conn...)
	return append(args, "--warehouses", strconv.Itoa(warehouses), "-T", strconv.Itoa(threads)), nil
}

// goTPCBinary is the go-tpc to run: $TASHKENT_GO_TPC, or the pinned
// version built once into the user's cache directory.
func goTPCBinary(ctx context.Context, progress func(format string, args ...any)) (string, error) {
	if p := os.Getenv(goTPCEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", goTPCEnv, p, err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("go-tpc: no cache directory to build it into (set %s to a go-tpc binary): %w", goTPCEnv, err)
	}
	dir := filepath.Join(cache, "tashkent", "go-tpc-"+goTPCVersion)
	bin := filepath.Join(dir, "go-tpc")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go-tpc %s is built on first use with `go install`, and no Go toolchain is on PATH: %w "+
			"(hint: install Go, or build go-tpc elsewhere and set %s to it)", goTPCVersion, err, goTPCEnv)
	}
	progress("building go-tpc %s into %s (once)", goTPCVersion, dir)
	cmd := exec.CommandContext(ctx, gobin, "install", goTPCPackage+"@"+goTPCVersion)
	cmd.Dir = os.TempDir() // outside any module: `go install pkg@version` builds the module's own go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build go-tpc: go install %s@%s: %w\n%s\n(hint: it needs the Go module proxy or a module cache that has it; "+
			"or set %s to a go-tpc binary)", goTPCPackage, goTPCVersion, err, process.OutputTail(string(out), 3000), goTPCEnv)
	}
	return bin, nil
}

// tpccData is an invocation's TPC-C: the go-tpc binary and the dump of
// the data every system loads.
type tpccData struct {
	bin        string
	warehouses int
	dump       string
	restore    string // pg_restore
}

// prepareTPCC builds go-tpc if needed and makes the invocation's data:
// go-tpc prepare into a throwaway PostgreSQL (no fsync: nothing of it has
// to survive), then pg_dump.
func (r *suiteRunner) prepareTPCC(ctx context.Context) error {
	if r.scfg.Workload != TPCC {
		return nil
	}
	bin, err := goTPCBinary(ctx, r.progress)
	if err != nil {
		return err
	}
	d := &tpccData{bin: bin, warehouses: r.scfg.Warehouses, dump: filepath.Join(r.dir, "tpcc.dump"),
		restore: filepath.Join(r.binDir, "pg_restore")}
	srv, err := pgserver.Init(ctx, pgserver.Config{DataDir: filepath.Join(r.dir, "tpcc-loader"), BinDir: r.binDir, NoSync: true,
		Settings: map[string]string{"shared_buffers": sharedBuffers, "fsync": "off", "full_page_writes": "off"}})
	if err != nil {
		return fmt.Errorf("tpcc loader: %w", err)
	}
	if _, err := srv.StartDetached(ctx); err != nil {
		return fmt.Errorf("tpcc loader: %w", err)
	}
	defer srv.Stop(context.Background())
	threads := min(d.warehouses, runtime.NumCPU())
	args, err := goTPCPrepareArgs(srv.DSN("postgres"), d.warehouses, threads)
	if err != nil {
		return err
	}
	r.progress("tpcc: go-tpc prepare, %d warehouse(s), into a loader PostgreSQL", d.warehouses)
	if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil || !strings.Contains(string(out), "\nFinished") {
		return fmt.Errorf("go-tpc %s: %v\n%s", strings.Join(args, " "), err, process.OutputTail(string(out), 3000))
	}
	dumpArgs := []string{"-Fc", "-f", d.dump, "-d", srv.DSN("postgres")}
	if out, err := exec.CommandContext(ctx, filepath.Join(r.binDir, "pg_dump"), dumpArgs...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_dump of the TPC-C data: %w\n%s", err, process.OutputTail(string(out), 3000))
	}
	r.tpcc = d
	return nil
}

// load restores the TPC-C data into dsn and, for mw-neworder-fast,
// installs the trigger that makes NewOrder fast.
func (d *tpccData) load(ctx context.Context, dsn string, kind System) error {
	args := []string{"--no-owner", "--exit-on-error", "-d", dsn, d.dump}
	if out, err := exec.CommandContext(ctx, d.restore, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_restore of the TPC-C data: %w\n%s", err, process.OutputTail(string(out), 3000))
	}
	if kind != MWNewOrderFast {
		return nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, newOrderFastSQL); err != nil {
		return fmt.Errorf("install the NewOrder-fast trigger: %w", err)
	}
	return nil
}

// newOrderFastSQL makes every transaction that inserts into new_order
// (TPC-C's NewOrder, and only it) fast under mode ed: SET LOCAL
// synchronous_commit = off, read at COMMIT.
const newOrderFastSQL = `CREATE FUNCTION tpcc_neworder_fast() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
	RETURN NULL;
END $$;
CREATE TRIGGER tpcc_neworder_fast BEFORE INSERT ON new_order FOR EACH STATEMENT EXECUTE FUNCTION tpcc_neworder_fast();`

// run runs go-tpc on the loads' endpoints with their clients as threads.
func (d *tpccData) run(ctx context.Context, loads []load, seconds int, tick func(progressTick)) (pgbenchResult, error) {
	var endpoints []string
	threads := 0
	for _, l := range loads {
		endpoints = append(endpoints, l.dsn)
		threads += l.clients
	}
	args, err := goTPCRunArgs(endpoints, d.warehouses, threads, seconds)
	if err != nil {
		return pgbenchResult{}, err
	}
	cmd := exec.CommandContext(ctx, d.bin, args...)
	if len(loads) > 0 && loads[0].options != "" {
		cmd.Env = append(os.Environ(), "PGOPTIONS="+loads[0].options) // go-tpc's lib/pq reads it
	}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return pgbenchResult{}, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return pgbenchResult{}, fmt.Errorf("start go-tpc: %w", err)
	}
	causes := map[string]int64{}
	out := scanGoTPC(pipe, causes, tick)
	werr := cmd.Wait()
	res, perr := parseGoTPC(out)
	for c, n := range causes {
		res.ErrorCauses[c] += n
	}
	switch {
	case ctx.Err() != nil:
		return pgbenchResult{}, ctx.Err()
	case werr != nil || perr != nil:
		return pgbenchResult{}, fmt.Errorf("go-tpc %s: %v %v\n%s", strings.Join(args, " "), perr, werr, process.OutputTail(out, 3000))
	}
	return res.suiteResult(), nil
}

// scanGoTPC reads go-tpc's output, passes every second's NewOrder line to
// tick, counts the failed transactions' causes into causes, and returns
// the rest: what the summary needs.
func scanGoTPC(rd io.Reader, causes map[string]int64, tick func(progressTick)) string {
	var kept strings.Builder
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	second := 0
	for sc.Scan() {
		line := sc.Text()
		if l, ok := parseGoTPCLine(line); ok && !l.summary {
			if l.op == "NEW_ORDER" && tick != nil {
				second++
				tick(progressTick{seconds: float64(second), tps: l.txn.TPM / 60, latMs: l.txn.AvgMs()})
			}
			continue
		}
		if m := goTPCFailedRE.FindStringSubmatch(line); m != nil {
			addCause(causes, m[1])
			continue
		}
		kept.WriteString(line)
		kept.WriteByte('\n')
	}
	io.Copy(io.Discard, rd)
	return kept.String()
}

// addCause counts a failed transaction's message by its cause, keeping
// at most tpccErrorCauses distinct ones.
func addCause(causes map[string]int64, msg string) {
	cause := errorCause(msg)
	if _, ok := causes[cause]; ok || len(causes) < tpccErrorCauses {
		causes[cause]++
	}
}
