package proxy_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// applyBackendName is the application_name of a proxy's apply connection
// (replication.go).
const applyBackendName = "tashkent-proxy-apply"

// TestApplySessionIsPreparedAgainAfterItsDatabaseRestarts: after its
// replica's PostgreSQL is killed (SIGKILL) and restarted under it, the
// proxy's new apply connection keeps session_replication_role = replica for
// its whole session (replica.PrepareApplySession, called by
// reconnectAndResume), as the first one did. What that buys is what the
// test observes: the applier's prepared statements keep their plans from
// one apply to the next. A session that set the role only per apply
// transaction would have PostgreSQL drop every cached plan at each change
// of the role, and build them all again at every apply (Tashkent §6.2
// C5's serial apply is the replica's critical path; BENCHMARKS.md session
// 6 measured 14% of the replicas' CPU). debug_print_plan logs every plan
// built, and log_line_prefix names the session's application, so the
// server log tells how many plans the apply backend built: none in the
// last applies, after the warm-up of custom plans every prepared statement
// with parameters goes through (TestApplyKeepsItsPlansOnAPreparedSession
// in internal/replica counts the same way, on one session).
func TestApplySessionIsPreparedAgainAfterItsDatabaseRestarts(t *testing.T) {
	const (
		warmups = 6 // PostgreSQL plans the first five executions afresh
		counted = 2
	)
	c := startCluster(t, 2, proxy.ModeMW)
	origin := c.connect(1)
	execSQL(t, origin, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	c.converge(20 * time.Second)

	// Both settings take effect at the restart: every new session of
	// replica 1 logs the plans it builds, each line led by its
	// application_name. The replica runs with synchronous_commit off (mw):
	// the ALTER ROLE must commit durably to outlive the kill.
	admin := c.direct(0)
	for _, sql := range []string{`SET synchronous_commit = on`, `ALTER SYSTEM SET log_line_prefix = '%a: '`,
		`ALTER ROLE postgres SET debug_print_plan = on`} {
		if _, err := admin.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := c.dbs[0].Kill9(); err != nil {
		t.Fatal(err)
	}
	if err := c.dbs[0].Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitApplyBackend(t, c, 0, 30*time.Second)

	write := func(n int) {
		execSQL(t, origin, `INSERT INTO t VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET v = excluded.v`, fmt.Sprintf("v%d", n))
		waitVersion(t, c, 0, c.certifier.Service.DurableVersion(), 20*time.Second)
	}
	for n := range warmups {
		write(n)
	}
	warmupPlans, offset := applyPlansLogged(t, c, 0, 0)
	if warmupPlans == 0 {
		t.Fatalf("the apply backend logged no plan in %d applies after the restart: the test no longer sees what it checks\n%s",
			warmups, c.dbs[0].LogTail(40))
	}
	for n := warmups; n < warmups+counted; n++ {
		write(n)
	}
	if plans, _ := applyPlansLogged(t, c, 0, offset); plans != 0 {
		t.Errorf("the apply connection opened after the database restarted built %d plans in its last %d applies, want 0: "+
			"its session_replication_role is not replica for the whole session (PrepareApplySession)", plans, counted)
	}
	c.converge(20 * time.Second)
}

// waitApplyBackend waits until replica i's database has a backend of the
// proxy's apply connection, and the proxy serves clients again.
func waitApplyBackend(t *testing.T, c *testCluster, i int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	conn := c.direct(i)
	for {
		var n int
		err := conn.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, applyBackendName).Scan(&n)
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no apply backend (application_name %s) on the restarted database within %s: %d, %v",
				applyBackendName, timeout, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		err := servesClients(c.dsn(i))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy %d does not serve clients after its database restarted: %v", i+1, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// servesClients connects to dsn and runs one query.
func servesClients(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `SELECT 1`)
	return err
}

// applyPlansLogged counts the plans replica i's apply backend logged in
// its server log from byte offset on, and returns the log's end.
func applyPlansLogged(t *testing.T, c *testCluster, i int, offset int64) (plans int, end int64) {
	t.Helper()
	data, err := os.ReadFile(c.dbs[i].LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data[offset:]), applyBackendName+": LOG:  plan:"), int64(len(data))
}
