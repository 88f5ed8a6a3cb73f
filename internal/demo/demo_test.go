package demo_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/demo"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// TestDemoOnAFreshCluster runs what `tashkent up` runs on a new cluster:
// transfers from clients connected to both replicas' PostgreSQL, then the
// checks, which must find the replicas in sync and the total unchanged.
func TestDemoOnAFreshCluster(t *testing.T) {
	bin := testbin.Path(t)
	dir, err := os.MkdirTemp("", "tashkent-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user must reach pgdata
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cluster.Down(context.Background(), dir); err != nil { // by recorded PID
			t.Errorf("down: %v", err)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := cluster.Up(ctx, cluster.Options{Dir: dir, Replicas: 2, Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res, err := demo.Run(ctx, st, demo.Config{Duration: 2 * time.Second, Accounts: 100, Out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed == 0 || !res.Converged || !res.ChecksumsEqual || !res.BalanceUnchanged() {
		t.Fatalf("demo result: %+v", res)
	}
	for _, want := range []string{"in sync: same version, equal checksums", "unchanged", "2 per replica"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output does not say %q", want)
		}
	}
}
