package bench

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A cluster seeded with TPC-B straight into its replicas (seed.go) runs
// pgbench's simple-update (TPC-B without the teller and branch updates)
// with clients on both replicas, and ends with identical replicas at the
// same version: the same checksums, one history row per committed
// transaction, the accounts' balances summing to the history's deltas.
// Not tpcb-like: its few branch rows, written from both replicas, make
// the agents doom local transactions for remote writesets, which is the
// agents' to test, not the seeding's.
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
	dir := pgtest.PublicTempDir(t, "tashkent-seed-test-")
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
	res, err := r.pgbench.run(ctx, spread(s.endpoints(), 4), runOpts{seconds: 2, protocol: "prepared", builtin: "simple-update"})
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
		var history, accounts, deltas int64
		err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgbench_history), (SELECT sum(abalance) FROM pgbench_accounts),
			(SELECT coalesce(sum(delta), 0) FROM pgbench_history)`).Scan(&history, &accounts, &deltas)
		conn.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if history != res.Processed || accounts != deltas {
			t.Errorf("replica %d: %d history rows for %d committed transactions; accounts sum %d, history deltas sum %d",
				i+1, history, res.Processed, accounts, deltas)
		}
	}
}
