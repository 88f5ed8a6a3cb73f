package guarantees_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

func pgbenchPath(t *testing.T) string {
	t.Helper()
	dir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "pgbench")
}

var (
	failedRE    = regexp.MustCompile(`number of failed transactions: (\d+)`)
	processedRE = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	retriedRE   = regexp.MustCompile(`number of transactions retried: (\d+)`)
)

// TPC-B by pgbench on three replicas at once, clients connected to each
// replica's PostgreSQL, in each of pgbench's protocol modes: only
// serialization failures occur (retried by pgbench), and the replicas end
// equal with the TPC-B invariant holding. The tables come from a plain
// `pgbench -i` through replica 1, with its default steps (create the
// tables without primary keys, load them with COPY in one transaction,
// VACUUM, add the primary keys; pgbench_history never gets one), while
// replica 2 serves reads.
func TestPgbenchTPCBOnThreeReplicasInEveryProtocolMode(t *testing.T) {
	if testing.Short() {
		t.Skip("pgbench runs for 12 s on three replicas; not in -short")
	}
	c := start(t, 3, clustertest.Options{})
	reads := pgtest.ReadWhile(t, c.Connect(1), `SELECT count(*) FROM pg_catalog.pg_class`)
	out, err := exec.Command(pgbenchPath(t), "-i", "-s", "1", c.dsn(0, "postgres")).CombinedOutput()
	n := reads()
	if err != nil || n == 0 {
		t.Fatalf("pgbench -i on replica 1: %v (%d reads on replica 2 meanwhile)\n%s", err, n, out)
	}
	t.Logf("pgbench -i -s 1 on replica 1, %d reads on replica 2 meanwhile", n)
	c.converge()
	for i := range c.DBs {
		if n := c.countOn(i, `SELECT count(*) FROM pgbench_accounts`); n != 100000 {
			t.Fatalf("replica %d has %d accounts, want 100000", i+1, n)
		}
		if n := c.countOn(i, `SELECT count(*) FROM pg_catalog.pg_index WHERE indisprimary AND indrelid::regclass::text LIKE 'pgbench_%'`); n != 3 {
			t.Fatalf("replica %d has %d pgbench primary keys, want 3", i+1, n)
		}
	}
	for _, mode := range []string{"simple", "extended", "prepared"} {
		t.Run(mode, func(t *testing.T) {
			var wg sync.WaitGroup
			outs := make([][]byte, len(c.DBs))
			errs := make([]error, len(c.DBs))
			for i := range c.DBs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := exec.Command(pgbenchPath(t), "-M", mode, "-c", "2", "-T", "4", "--max-tries", "1000", "-n", c.dsn(i, "postgres"))
					outs[i], errs[i] = cmd.CombinedOutput()
				}()
			}
			wg.Wait()
			total, retried := 0, 0
			for i := range c.DBs {
				if errs[i] != nil {
					t.Fatalf("pgbench -M %s on replica %d: %v\n%s", mode, i+1, errs[i], outs[i])
				}
				if m := failedRE.FindSubmatch(outs[i]); m == nil || string(m[1]) != "0" {
					t.Fatalf("pgbench -M %s on replica %d had failed transactions:\n%s", mode, i+1, outs[i])
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
				t.Fatal("no transactions processed")
			}
			version := c.converge()
			checkTPCBInvariant(t, c)
			t.Logf("-M %s: %d transactions on 3 replicas (%d retried after 40001), cluster at version %d, replicas equal",
				mode, total, retried, version)
		})
	}
}

// checkTPCBInvariant: every transaction adds the same delta to one
// account, its teller and its branch, and records it in the history.
func checkTPCBInvariant(t *testing.T, c *cluster) {
	t.Helper()
	var accounts, tellers, branches, history int64
	err := c.Connect(2).QueryRow(context.Background(), `SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(tbalance) FROM pgbench_tellers),
		(SELECT sum(bbalance) FROM pgbench_branches), (SELECT coalesce(sum(delta), 0) FROM pgbench_history)`).Scan(&accounts, &tellers, &branches, &history)
	if err != nil {
		t.Fatal(err)
	}
	if accounts != history || tellers != history || branches != history {
		t.Fatalf("TPC-B balances disagree: accounts %d, tellers %d, branches %d, history %d", accounts, tellers, branches, history)
	}
}
