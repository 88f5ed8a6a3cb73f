package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A go-tpc v1.0.12 tpcc run (plain output, 4 threads, 1 warehouse) on
// PostgreSQL 15 at REPEATABLE READ: a progress line, a line of the Go
// runtime, three of the failed transactions it printed, its summary.
const goTPCSample = `[Current] NEW_ORDER - Takes(s): 1.0, Count: 599, TPM: 36620.8, Sum(ms): 1841.3, Avg(ms): 3.1, 50th(ms): 2.6, 90th(ms): 5.8, 95th(ms): 7.3, 99th(ms): 10.5, 99.9th(ms): 13.1, Max(ms): 32.5
2026/11/29 19:09:19 maxprocs: Leaving GOMAXPROCS=2: CPU quota undefined
[2026-11-29 19:09:19] execute run failed, err exec UPDATE district SET d_ytd = d_ytd + ? WHERE d_w_id = ? AND d_id = ? failed pq: could not serialize access due to concurrent update
[2026-11-29 19:09:19] execute run failed, err exec UPDATE warehouse SET w_ytd = w_ytd + ? WHERE w_id = ? failed pq: could not serialize access due to concurrent update
[2026-11-29 19:09:19] execute run failed, err exec UPDATE warehouse SET w_ytd = w_ytd + ? WHERE w_id = ? failed pq: could not serialize access due to concurrent update
Finished
[Summary] DELIVERY - Takes(s): 4.0, Count: 184, TPM: 2784.3, Sum(ms): 1223.7, Avg(ms): 6.6, 50th(ms): 5.8, 90th(ms): 10.5, 95th(ms): 12.6, 99th(ms): 29.4, 99.9th(ms): 46.1, Max(ms): 46.1
[Summary] DELIVERY_ERR - Takes(s): 4.0, Count: 57, TPM: 862.5, Sum(ms): 304.0, Avg(ms): 5.4, 50th(ms): 4.7, 90th(ms): 8.4, 95th(ms): 17.8, 99th(ms): 25.2, 99.9th(ms): 27.3, Max(ms): 27.3
[Summary] NEW_ORDER - Takes(s): 4.0, Count: 2354, TPM: 35399.0, Sum(ms): 7480.5, Avg(ms): 3.2, 50th(ms): 3.1, 90th(ms): 5.8, 95th(ms): 7.3, 99th(ms): 12.6, 99.9th(ms): 26.2, Max(ms): 32.5
[Summary] NEW_ORDER_ERR - Takes(s): 4.0, Count: 494, TPM: 7428.7, Sum(ms): 1278.6, Avg(ms): 2.6, 50th(ms): 2.1, 90th(ms): 5.2, 95th(ms): 6.8, 99th(ms): 15.2, 99.9th(ms): 33.6, Max(ms): 33.6
[Summary] ORDER_STATUS - Takes(s): 3.9, Count: 264, TPM: 4079.1, Sum(ms): 270.6, Avg(ms): 1.2, 50th(ms): 1.0, 90th(ms): 2.1, 95th(ms): 3.1, 99th(ms): 6.3, 99.9th(ms): 16.8, Max(ms): 16.8
[Summary] PAYMENT - Takes(s): 4.0, Count: 1659, TPM: 24895.5, Sum(ms): 1999.6, Avg(ms): 1.3, 50th(ms): 1.0, 90th(ms): 2.6, 95th(ms): 3.1, 99th(ms): 5.2, 99.9th(ms): 9.4, Max(ms): 15.2
[Summary] PAYMENT_ERR - Takes(s): 4.0, Count: 993, TPM: 14901.3, Sum(ms): 1795.8, Avg(ms): 1.8, 50th(ms): 1.6, 90th(ms): 3.7, 95th(ms): 4.7, 99th(ms): 10.5, 99.9th(ms): 39.8, Max(ms): 46.1
[Summary] STOCK_LEVEL - Takes(s): 4.0, Count: 241, TPM: 3645.2, Sum(ms): 664.3, Avg(ms): 2.7, 50th(ms): 2.1, 90th(ms): 5.2, 95th(ms): 6.8, 99th(ms): 18.9, 99.9th(ms): 56.6, Max(ms): 56.6
tpmC: 35398.3, tpmTotal: 70801.9, efficiency: 275258.6%
`

// go-tpc's summary is read per transaction type, errors (NAME_ERR) go to
// their type, the failed transactions are counted by the server's
// message, the progress line is no result, and the suite's view sums the
// types: tps over all of them, latency weighted by count.
func TestParseGoTPC(t *testing.T) {
	r, err := parseGoTPC(goTPCSample)
	if err != nil {
		t.Fatal(err)
	}
	if r.TpmC != 35398.3 {
		t.Errorf("tpmC %v", r.TpmC)
	}
	no := r.txn("new_order")
	want := TPCCTxn{Name: "new_order", Count: 2354, Errors: 494, TPM: 35399.0, SumMs: 7480.5, P50Ms: 3.1, P90Ms: 5.8, P95Ms: 7.3, P99Ms: 12.6, MaxMs: 32.5}
	if no != want {
		t.Errorf("new_order %+v, want %+v", no, want)
	}
	if got := no.AvgMs(); math.Abs(got-7480.5/2354) > 1e-9 {
		t.Errorf("new_order mean %v: not the summed latency over the count", got)
	}
	if p := r.txn("payment"); p.Count != 1659 || p.Errors != 993 {
		t.Errorf("payment %+v", p)
	}
	if o := r.txn("order_status"); o.Count != 264 || o.Errors != 0 || o.P95Ms != 3.1 {
		t.Errorf("order_status %+v", o)
	}
	var names []string
	for _, x := range r.Txns {
		names = append(names, x.Name)
	}
	if !slices.Equal(names, TPCCTypes) {
		t.Errorf("types %v", names)
	}
	if r.ErrorCauses["could not serialize access due to concurrent update"] != 3 || len(r.ErrorCauses) != 1 {
		t.Errorf("causes %v", r.ErrorCauses)
	}
	s := r.suiteResult()
	if s.Processed != 184+2354+264+1659+241 || s.Failed != 57+494+993 || s.Retries != 0 || s.TPCC == nil {
		t.Errorf("suite view %+v", s)
	}
	if math.Abs(s.TPS-(2784.3+35399.0+4079.1+24895.5+3645.2)/60) > 1e-9 {
		t.Errorf("tps %v", s.TPS)
	}
	if math.Abs(s.LatencyMs-(1223.7+7480.5+270.6+1999.6+664.3)/float64(s.Processed)) > 1e-9 {
		t.Errorf("latency %v", s.LatencyMs)
	}
	if _, err := parseGoTPC("panic: prepare statement error\n"); err == nil {
		t.Error("output without a summary parsed")
	}
	if _, err := parseGoTPC(strings.Replace(goTPCSample, "[Summary] DELIVERY -", "[Summary] SHIPPING -", 1)); err == nil {
		t.Error("an unknown transaction type parsed")
	}
	if got := errorCause("item 99999 not found"); got != "item 99999 not found" {
		t.Errorf("a message without the server's: %q", got)
	}
}

// The progress lines become ticks (NewOrder per second), the failed
// transactions are counted while read and left out of what is kept.
func TestScanGoTPC(t *testing.T) {
	causes := map[string]int64{}
	var ticks []progressTick
	kept := scanGoTPC(strings.NewReader(goTPCSample), causes, func(p progressTick) { ticks = append(ticks, p) })
	if len(ticks) != 1 || ticks[0].seconds != 1 || math.Abs(ticks[0].tps-36620.8/60) > 1e-9 || math.Abs(ticks[0].latMs-1841.3/599) > 1e-9 {
		t.Errorf("ticks %+v", ticks)
	}
	if causes["could not serialize access due to concurrent update"] != 3 {
		t.Errorf("causes %v", causes)
	}
	if strings.Contains(kept, "[Current]") || strings.Contains(kept, "execute run failed") || !strings.Contains(kept, "[Summary] NEW_ORDER -") {
		t.Errorf("kept:\n%s", kept)
	}
}

// go-tpc gets one host and every endpoint's port (it opens connections on
// them in turn), the user and the database; endpoints on two hosts are
// refused.
func TestGoTPCArgs(t *testing.T) {
	got, err := goTPCRunArgs([]string{dsn(5001), dsn(5002)}, 3, 8, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tpcc", "run", "-d", "postgres", "-H", "127.0.0.1", "-P", "5001,5002", "-U", "postgres", "-D", "postgres",
		"--conn-params", "sslmode=disable", "--warehouses", "3", "-T", "8", "--time", "10s", "--interval", "1s", "--ignore-error", "--output", "plain"}
	if !slices.Equal(got, want) {
		t.Errorf("run args\n%v\nwant\n%v", got, want)
	}
	got, err = goTPCPrepareArgs("postgres://bench:secret@127.0.0.1:5003/db?sslmode=disable", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"tpcc", "prepare", "-d", "postgres", "-H", "127.0.0.1", "-P", "5003", "-U", "bench", "-D", "db",
		"--conn-params", "sslmode=disable", "-p", "secret", "--warehouses", "2", "-T", "2"}
	if !slices.Equal(got, want) {
		t.Errorf("prepare args\n%v\nwant\n%v", got, want)
	}
	if _, err := goTPCConn([]string{dsn(5001), "postgres://postgres@10.0.0.2:5002/postgres"}); err == nil {
		t.Error("endpoints on two hosts accepted")
	}
}

// mw-neworder-fast needs TPC-C's tables; tpcc defaults to one warehouse.
func TestTPCCOnlySystems(t *testing.T) {
	fast := []SystemSpec{{Kind: SyncOn, Replicas: 1}, {Kind: MWNewOrderFast, Replicas: 1}}
	c := SuiteConfig{Workload: TPCB, Systems: fast}
	if err := c.checkTPCC(); err == nil || !strings.Contains(err.Error(), "tpcc workload only") {
		t.Errorf("tpcb with mw-neworder-fast: %v", err)
	}
	c = SuiteConfig{Workload: TPCC, Systems: fast}
	if err := c.checkTPCC(); err != nil || c.Warehouses != 1 {
		t.Errorf("tpcc: %v, %d warehouses", err, c.Warehouses)
	}
	c.Warehouses = -1
	if err := c.checkTPCC(); err == nil {
		t.Error("-1 warehouses accepted")
	}
	pc := Config{Clients: []int{1}, Duration: time.Second, Scale: 1, Protocol: "prepared", Replicas: 1, Repeat: 1, Binary: "x",
		Systems: []System{MWNewOrderFast}}
	if err := pc.check(); err == nil || !strings.Contains(err.Error(), "tpcc") {
		t.Errorf("pgbench with mw-neworder-fast: %v", err)
	}
	if k, err := ParseSystem("mw-safe"); err != nil || !k.tashkent() || k.mode() != "ed" || MWNewOrderFast.mode() != "ed" || MW.mode() != "mw" {
		t.Errorf("mw-safe: %v %v", k, err)
	}
}

// The TPC-C table: tpmC medians over the repeats and their ratio to the
// baseline, per type medians of latency, errors summed, a failed run
// left out.
func TestTPCCRows(t *testing.T) {
	res := func(tpmC, noAvg float64, noErrs int64) *TPCCResult {
		r := &TPCCResult{TpmC: tpmC, ErrorCauses: map[string]int64{}}
		for _, name := range TPCCTypes {
			r.Txns = append(r.Txns, TPCCTxn{Name: name, Count: 100, TPM: 600, SumMs: 100 * 2})
		}
		r.Txns[0].SumMs, r.Txns[0].Errors = 100*noAvg, noErrs
		if noErrs > 0 {
			r.ErrorCauses["could not serialize access due to concurrent update"] = noErrs
		}
		return r
	}
	systems := []SystemSpec{{Kind: SyncOn, Replicas: 1}, {Kind: MWNewOrderFast, Replicas: 1}}
	rep := &SuiteReport{Config: SuiteConfig{Workload: TPCC, Systems: systems, Clients: []int{2}, Baseline: "pg sync=on", Warehouses: 1},
		Runs: []SuiteRun{
			{Label: "pg sync=on", Clients: 2, Repeat: 1, TPCC: res(1000, 4, 0)},
			{Label: "tashkent mw-neworder-fast", Clients: 2, Repeat: 1, TPCC: res(1500, 2, 1)},
			{Label: "pg sync=on", Clients: 2, Repeat: 2, TPCC: res(1200, 6, 0)},
			{Label: "tashkent mw-neworder-fast", Clients: 2, Repeat: 2, TPCC: res(1700, 1, 3)},
			{Label: "tashkent mw-neworder-fast", Clients: 2, Repeat: 3, Error: "go-tpc: exit status 2"},
		}}
	rows := rep.tpccRows()
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	base, fast := rows[0], rows[1]
	if base.TpmC != 1100 || base.Ratio != 1 || fast.TpmC != 1600 || math.Abs(fast.Ratio-1600.0/1100) > 1e-9 || len(fast.RunsTpmC) != 2 {
		t.Errorf("tpmC: base %+v fast %+v", base, fast)
	}
	no := fast.Txns[0]
	if no.Name != "new_order" || no.AvgMs != 1.5 || no.Errors != 4 || no.Count != 200 || math.Abs(no.LatencyRatio-1.5/5) > 1e-9 {
		t.Errorf("new_order %+v", no)
	}
	if math.Abs(no.ErrorPct()-100*4.0/204) > 1e-9 || fast.ErrorCauses["could not serialize access due to concurrent update"] != 4 {
		t.Errorf("errors %v %v", no.ErrorPct(), fast.ErrorCauses)
	}
	var out strings.Builder
	rep.writeTPCC(&out)
	for _, s := range []string{"| tashkent mw-neworder-fast | 2 | 1600 | 1.45x | 1500 1700 | 0.40 |", "| NewOrder |", "Errors of tashkent mw-neworder-fast at 2 clients"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the report lacks %q:\n%s", s, out.String())
		}
	}
	if csv := rep.tpccCSV(); len(csv) != 1+2*len(TPCCTypes) || csv[1][6] != "new_order" {
		t.Errorf("csv %v", csv)
	}
}

// Under mode ed with the NewOrder trigger (mw-neworder-fast), a
// transaction that inserts into new_order commits at the commit point,
// before the certifier's slow log sync makes it durable, while a
// Payment-like transaction on the same session stays safe: its COMMIT
// waits for the sync. The trigger's setting ends with its transaction.
func TestNewOrderTriggerMakesOnlyNewOrderFast(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server with the tashkent extension, a certifier and an agent")
	}
	const syncDelay = 500 * time.Millisecond
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := pgtest.PublicTempDir(t, "tashkent-tpcc-test-")
	r := &runner{binDir: binDir, dir: dir, maxClients: 1, cfg: Config{Binary: testbin.Path(t), FsyncDelay: syncDelay, Progress: io.Discard}}
	s := &system{kind: MWNewOrderFast, label: "tashkent mw-neworder-fast", replicas: 1, dir: filepath.Join(dir, "ed"),
		seed: func(ctx context.Context, dsn string) error {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, `CREATE TABLE new_order (no_o_id int, no_d_id int, no_w_id int, PRIMARY KEY (no_w_id, no_d_id, no_o_id));
				CREATE TABLE warehouse (w_id int PRIMARY KEY, w_ytd numeric(12, 2));
				INSERT INTO warehouse VALUES (1, 0)`); err != nil {
				return err
			}
			_, err = conn.Exec(ctx, newOrderFastSQL)
			return err
		}}
	r.systems = []*system{s}
	if err := r.prepareExtension(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Error(err)
		}
	})
	if err := s.start(ctx, r); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, s.endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	commit := func(what string, stmts ...string) time.Duration {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %s: %v", what, q, err)
			}
		}
		start := time.Now()
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: COMMIT: %v", what, err)
		}
		took := time.Since(start)
		t.Logf("%s: COMMIT took %v", what, took)
		return took
	}
	// The two differ only by the INSERT into new_order.
	for i := 1; i <= 3; i++ {
		if took := commit("NewOrder", "UPDATE warehouse SET w_ytd = w_ytd + 1 WHERE w_id = 1",
			fmt.Sprintf("INSERT INTO new_order VALUES (%d, 1, 1)", i)); took >= syncDelay/2 {
			t.Errorf("a transaction that inserts into new_order took %v to commit: it waited for durability (the certifier syncs in %v)", took, syncDelay)
		}
		if took := commit("Payment", "UPDATE warehouse SET w_ytd = w_ytd + 1 WHERE w_id = 1"); took < syncDelay {
			t.Errorf("a Payment-like transaction after a NewOrder on the same session took %v to commit: not safe (the certifier syncs in %v)", took, syncDelay)
		}
	}
}

// go-tpc comes from $TASHKENT_GO_TPC when set (and must exist), else from
// the cache; without it there and without a Go toolchain, the error says
// how to get one.
func TestGoTPCBinary(t *testing.T) {
	ctx := context.Background()
	quiet := func(string, ...any) {}
	t.Setenv(goTPCEnv, "/nonexistent/go-tpc")
	if _, err := goTPCBinary(ctx, quiet); err == nil || !strings.Contains(err.Error(), goTPCEnv) {
		t.Errorf("a missing $%s: %v", goTPCEnv, err)
	}
	bin := filepath.Join(t.TempDir(), "go-tpc")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(goTPCEnv, bin)
	if got, err := goTPCBinary(ctx, quiet); err != nil || got != bin {
		t.Errorf("$%s=%s: %q, %v", goTPCEnv, bin, got, err)
	}
	t.Setenv(goTPCEnv, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	if _, err := goTPCBinary(ctx, quiet); err == nil || !strings.Contains(err.Error(), "no Go toolchain") || !strings.Contains(err.Error(), goTPCEnv) {
		t.Errorf("no go-tpc and no go: %v", err)
	}
}
