package cluster_test

import (
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// tashkent verify --repair rebuilds the replica that differs from the
// majority, from one that agrees, and then finds the replicas equal.
func TestVerifyRepairRebuildsTheReplicaThatDiffers(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 3)
	query(t, st.Replicas[0].DSN(), "CREATE TABLE accounts (id int PRIMARY KEY, balance int)")
	query(t, st.Replicas[0].DSN(), "INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 1000) g")
	eventually(t, st.Replicas[1].DSN(), "SELECT count(*)::text FROM accounts", "1000")
	query(t, st.Replicas[1].DSN(), `DO $$ BEGIN
		PERFORM set_config('tashkent.maintenance', 'on', true);
		UPDATE accounts SET balance = 0 WHERE id = 7;
	END $$`)

	out, err := run(t, bin, "verify", "--data-dir", dir)
	if err == nil || !strings.Contains(out, "key (7): replica2 has other values") {
		t.Fatalf("verify before the repair: %v\n%s", err, out)
	}
	out = mustRun(t, bin, "verify", "--data-dir", dir, "--repair")
	if !strings.Contains(out, "rebuilding replica2 from replica1") || !strings.Contains(out, "replica1, replica2, replica3 are equal at version") {
		t.Fatalf("verify --repair printed:\n%s", out)
	}
	if got := query(t, st.Replicas[1].DSN(), "SELECT balance::text FROM accounts WHERE id = 7"); got != "100" {
		t.Errorf("replica2's row 7 after the repair: balance %s, want 100", got)
	}
}
