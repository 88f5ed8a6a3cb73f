package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A cluster seeded with TPC-B straight into its replicas (seed.go) runs
// TPC-B with clients on both replicas and ends with identical replicas at
// the same version: the same checksums, one history row per committed
// transaction, and TPC-B's consistency condition (the branches' balances
// sum to the accounts').
func TestSeededTPCBClusterConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers, a certifier and two agents")
	}
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := testbin.Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "tashkent-seed-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &suiteRunner{scfg: SuiteConfig{Workload: TPCB, Scale: 2, Protocol: "prepared"},
		runner: &runner{binDir: binDir, pgbench: newPgbench(binDir), maxClients: 4, dir: dir,
			cfg: Config{Binary: bin, Scale: 2, Protocol: "prepared", Progress: io.Discard}}}
	s := &system{kind: MW, label: "tashkent mw x2", replicas: 2, dir: filepath.Join(dir, "mw")}
	if s.seed = r.seedFor(s); s.seed == nil {
		t.Fatal("the suite does not seed a tashkent system on TPC-B")
	}
	r.systems = []*system{s}
	if err := r.prepareExtension(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Error(err)
		}
	})
	if err := s.start(ctx, r.runner); err != nil {
		t.Fatal(err)
	}
	if err := r.loadWorkload(ctx, s); err != nil {
		t.Fatal(err)
	}
	if v, err := s.verify(ctx); err != nil || v != 0 {
		t.Fatalf("seeded replicas: version %d, %v; want equal at version 0 (the seed is not certified)", v, err)
	}
	res, err := r.runOnce(ctx, s, spread(s.endpoints(), 4), point{clients: 4}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed == 0 {
		t.Fatal("no transaction committed")
	}
	v, err := s.verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v < uint64(res.Processed) {
		t.Errorf("version %d after %d committed transactions", v, res.Processed)
	}
	for i, pg := range s.pgs {
		conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		var history, accounts, branches int64
		err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgbench_history), (SELECT sum(abalance) FROM pgbench_accounts),
			(SELECT sum(bbalance) FROM pgbench_branches)`).Scan(&history, &accounts, &branches)
		conn.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if history != res.Processed || accounts != branches {
			t.Errorf("replica %d: %d history rows for %d committed transactions; accounts sum %d, branches sum %d",
				i+1, history, res.Processed, accounts, branches)
		}
	}
}
