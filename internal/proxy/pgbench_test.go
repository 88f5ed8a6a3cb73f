package proxy_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/proxy"
)

func pgbenchPath(t *testing.T) string {
	t.Helper()
	dir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "pgbench")
}

// initPgbench creates pgbench's TPC-B tables through a proxy. tashkent
// replicates only tables with a primary key: pgbench_history, which has
// none, gets one before any data is written, and the other tables get
// theirs before the data too (steps dt, then pg, instead of dtgvp).
func initPgbench(t *testing.T, c *testCluster, scale int) {
	t.Helper()
	pgbenchInit(t, c, "dt", scale)
	execSQL(t, c.connect(0), `ALTER TABLE pgbench_history ADD COLUMN hid uuid PRIMARY KEY DEFAULT gen_random_uuid()`)
	pgbenchInit(t, c, "pg", scale)
	c.converge(30 * time.Second)
}

func pgbenchInit(t *testing.T, c *testCluster, steps string, scale int) {
	t.Helper()
	out, err := exec.Command(pgbenchPath(t), "-i", "-I", steps, "-s", strconv.Itoa(scale), c.dsn(0)).CombinedOutput()
	if err != nil {
		t.Fatalf("pgbench -i -I %s through the proxy: %v\n%s", steps, err, out)
	}
}

var failedRE = regexp.MustCompile(`number of failed transactions: (\d+)`)
var processedRE = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
var retriedRE = regexp.MustCompile(`number of transactions retried: (\d+)`)

// TPC-B through the proxies of a 3-replica cluster, in each of pgbench's
// protocol modes, clients on every replica: only serialization failures
// (retried by pgbench) may occur, and the replicas end equal.
func TestPgbenchTPCBOnThreeReplicasInEveryProtocolMode(t *testing.T) {
	c := startCluster(t, 3, proxy.ModeMW)
	initPgbench(t, c, 1)
	for _, mode := range []string{"simple", "extended", "prepared"} {
		t.Run(mode, func(t *testing.T) {
			var wg sync.WaitGroup
			outs := make([][]byte, len(c.proxies))
			errs := make([]error, len(c.proxies))
			for i := range c.proxies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := exec.Command(pgbenchPath(t), "-M", mode, "-c", "2", "-T", "4", "--max-tries", "1000", "-n", c.dsn(i))
					outs[i], errs[i] = cmd.CombinedOutput()
				}()
			}
			wg.Wait()
			total, retried := 0, 0
			for i := range c.proxies {
				if errs[i] != nil {
					t.Fatalf("pgbench -M %s through replica %d: %v\n%s", mode, i+1, errs[i], outs[i])
				}
				if m := failedRE.FindSubmatch(outs[i]); m == nil || string(m[1]) != "0" {
					t.Fatalf("pgbench -M %s through replica %d had failed transactions:\n%s", mode, i+1, outs[i])
				}
				m := processedRE.FindSubmatch(outs[i])
				if m == nil {
					t.Fatalf("no result from pgbench:\n%s", outs[i])
				}
				n, _ := strconv.Atoi(string(m[1]))
				total += n
				if r := retriedRE.FindSubmatch(outs[i]); r != nil {
					k, _ := strconv.Atoi(string(r[1]))
					retried += k
				}
			}
			if total == 0 {
				t.Fatalf("no transactions processed")
			}
			version := c.converge(30 * time.Second)
			checkTPCBInvariant(t, c)
			t.Logf("-M %s: %d transactions over 3 replicas (%d retried after 40001), cluster at version %d, replicas equal",
				mode, total, retried, version)
		})
	}
}

// checkTPCBInvariant: every transaction adds the same delta to one
// account, its teller and its branch, and records it in the history.
func checkTPCBInvariant(t *testing.T, c *testCluster) {
	t.Helper()
	ctx := context.Background()
	conn := c.connect(2)
	var accounts, tellers, branches, history int64
	err := conn.QueryRow(ctx, `SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(tbalance) FROM pgbench_tellers),
		(SELECT sum(bbalance) FROM pgbench_branches), (SELECT coalesce(sum(delta), 0) FROM pgbench_history)`).Scan(&accounts, &tellers, &branches, &history)
	if err != nil {
		t.Fatal(err)
	}
	if accounts != history || tellers != history || branches != history {
		t.Fatalf("TPC-B balances disagree: accounts %d, tellers %d, branches %d, history %d", accounts, tellers, branches, history)
	}
}
