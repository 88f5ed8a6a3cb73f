package cluster_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/replica"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

var flagLeaderKills = flag.Int("leader-kills", 0, "kill -9 rounds of the certifier group's leader under a write workload on every replica (default 3, 2 with -short; the issue's full run: 20)")

// TestCertifierGroupLeaderKill9UnderLoad: `tashkent up --certifiers 3`,
// a write workload on every replica, and kill -9 of the certifier
// group's leader again and again (restarted each time by `up`). Every
// commit acknowledged to a client must be on every replica, the replicas
// must converge to equal checksums, and each failover pause (kill to the
// next acknowledged commit) is reported.
func TestCertifierGroupLeaderKill9UnderLoad(t *testing.T) {
	kills := 3
	if testing.Short() {
		kills = 2
	}
	if *flagLeaderKills > 0 {
		kills = *flagLeaderKills
	}
	bin := testbin.Path(t)
	dir := newClusterDir(t, "tashkent-group-test-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	o := cluster.Options{Dir: dir, Replicas: 3, Certifiers: 3, Binary: bin}
	st, err := cluster.Up(ctx, o)
	t.Cleanup(func() { cluster.Down(context.Background(), dir) }) // by recorded PID
	if err != nil {
		t.Fatal(err)
	}
	checkStartedFromConfig(t, st)
	// The group may still be electing its first leader (up returns once
	// every member listens): status shows it within the election timeout.
	var status string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		status = mustRun(t, bin, "status", "--data-dir", dir)
		if strings.Contains(status, "leader") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"certifier group of 3 members", "leader", "follower"} {
		if !strings.Contains(status, want) {
			t.Fatalf("tashkent status does not show %q:\n%s", want, status)
		}
	}
	setupTable(t, st)

	w := &groupWorkload{acked: map[int]bool{}}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for k, r := range st.Replicas {
		wg.Go(func() { w.run(wctx, t, r.DSN(), k) })
	}
	var pauses []time.Duration
	for round := 0; round < kills; round++ {
		time.Sleep(700 * time.Millisecond)
		leader := groupLeader(t, dir)
		before := w.count()
		if err := syscall.Kill(leader.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		for w.count() == before && time.Since(killed) < 20*time.Second {
			time.Sleep(2 * time.Millisecond)
		}
		if w.count() == before {
			stop()
			wg.Wait()
			logs := ""
			for _, r := range st.Replicas {
				b, _ := os.ReadFile(r.Agent.Log)
				logs += fmt.Sprintf("--- %s\n%s\n", r.Agent.Log, tailLines(string(b), 15))
			}
			t.Fatalf("round %d: no commit acknowledged within 20 s of killing certifier %d (%d acknowledged, %d aborts, %d unknown, last error %v)\n%s",
				round, leader.ID, w.count(), w.aborts, w.unknown, w.lastErr, logs)
		}
		pause := time.Since(killed)
		pauses = append(pauses, pause)
		t.Logf("round %d: kill -9 of leader certifier %d (pid %d); next acknowledged commit after %v", round, leader.ID, leader.PID, pause.Round(time.Millisecond))
		process.WaitGone(context.Background(), leader.PID, 5*time.Second)
		if st, err = cluster.Up(ctx, cluster.Options{Dir: dir, Binary: bin}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	wg.Wait()
	checkConverged(t, st, w)
	sort.Slice(pauses, func(i, j int) bool { return pauses[i] < pauses[j] })
	t.Logf("%d kills of the leader: %d commits acknowledged, %d aborts (40001), %d outcome unknown; failover pause min %v median %v max %v",
		kills, w.count(), w.aborts, w.unknown, pauses[0].Round(time.Millisecond), pauses[len(pauses)/2].Round(time.Millisecond),
		pauses[len(pauses)-1].Round(time.Millisecond))
}

func setupTable(t *testing.T, st *cluster.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.Replicas[0].DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE TABLE rows (id int PRIMARY KEY, v int)",
		"CREATE TABLE hot (id int PRIMARY KEY, n int)",
		"INSERT INTO hot SELECT g, 0 FROM generate_series(0, 9) g",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// groupWorkload inserts unique rows and updates hot rows (conflicts)
// with one client per replica, recording every acknowledged insert.
type groupWorkload struct {
	mu      sync.Mutex
	acked   map[int]bool
	aborts  int
	unknown int
	lastErr error
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (w *groupWorkload) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *groupWorkload) run(ctx context.Context, t *testing.T, uri string, k int) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for seq := 1; ctx.Err() == nil; seq++ {
		if conn == nil {
			c, err := pgx.Connect(ctx, uri)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conn = c
		}
		id := k*10_000_000 + seq
		qctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := transfer(qctx, conn, id, seq)
		cancel()
		w.mu.Lock()
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			w.acked[id] = true
		case errors.As(err, &pgErr) && pgErr.Code == pgcode.SerializationFailure:
			w.aborts++
		default:
			w.unknown++
			w.lastErr = err
			conn.Close(context.Background())
			conn = nil
		}
		w.mu.Unlock()
	}
}

// transfer inserts a unique row and bumps a hot counter in one transaction.
func transfer(ctx context.Context, conn *pgx.Conn, id, seq int) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "INSERT INTO rows VALUES ($1, $2)", id, seq); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = $1", seq%10); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// groupLeader is the member the group agrees leads, from the recorded
// state and each member's Status.
func groupLeader(t *testing.T, dir string) *cluster.Certifier {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st, err := cluster.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.CertifierMembers() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			rep, err := cluster.QueryCertifier(ctx, fmt.Sprintf("127.0.0.1:%d", m.Port))
			cancel()
			if err == nil && rep.Role == "leader" && int(rep.Pid) == m.PID {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no certifier leader within 20 s")
	return nil
}

// checkConverged waits until every replica holds the same version, then
// compares checksums and looks for every acknowledged row on each.
func checkConverged(t *testing.T, st *cluster.State, w *groupWorkload) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var conns []*pgx.Conn
	for _, r := range st.Replicas {
		c, err := pgx.Connect(ctx, r.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		conns = append(conns, c)
	}
	for {
		versions := map[uint64]bool{}
		for _, c := range conns {
			v, err := cluster.ReadVersion(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			versions[v] = true
		}
		rep, err := cluster.QueryCertifier(ctx, st.CertifierAddr())
		if err == nil && len(versions) == 1 && versions[rep.DurableVersion] {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("replicas did not converge: versions %v", versions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var first map[string]string
	for i, c := range conns {
		sums, err := replica.Checksum(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = sums
		} else if fmt.Sprint(sums) != fmt.Sprint(first) {
			t.Fatalf("replica %d checksums %v differ from replica 1's %v", i+1, sums, first)
		}
		rows, err := c.Query(ctx, "SELECT id FROM rows")
		if err != nil {
			t.Fatal(err)
		}
		have := map[int]bool{}
		for rows.Next() {
			var id int
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			have[id] = true
		}
		rows.Close()
		for id := range w.acked {
			if !have[id] {
				t.Fatalf("replica %d lacks row %d, whose commit was acknowledged", i+1, id)
			}
		}
	}
}
