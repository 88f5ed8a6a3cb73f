package cluster_test

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// Replicas that applied versions the certifier lost are rewound: they go
// back past them by undoing rows and catch up from the certifier's log,
// with no rebuild (Eventual Durability §2.2.3: durability is a prefix; a
// version decided but never durable fails, and with it every later one).
// The certifier delivers entries before they are durable and waits a
// second before writing each batch (hidden fault flags), so replica2,
// which applies replica1's commits, holds versions that are not durable
// yet. kill -9 of the certifier loses them, and its next generation
// numbers new transactions from the same versions. Each replica's agent
// sends its history; the certifier tells those holding lost versions to
// rewind to the last version they share with its log; they undo back to a
// pinned snapshot and replay. The cluster ends converged, every
// acknowledged commit on every replica, and nobody rebuilt.
func TestReplicasThatAppliedVersionsTheCertifierLostAreRewound(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newEarlyDeliveryCluster(t, bin)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	w := runGroupWorkload(ctx, t, &wg, r1.DSN())
	defer func() {
		cancel()
		wg.Wait()
	}()
	// The agents pin a snapshot every 100 ms, usable once durable: with a
	// write a second, a few seconds give them pins to undo to.
	time.Sleep(4 * time.Second)
	// On replica2, a transaction open across the rewind (its snapshot may
	// hold the lost versions) and an idle session.
	open, idle := connectTo(t, r2.DSN()), connectTo(t, r2.DSN())
	if _, err := open.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Exec(ctx, "SELECT count(*) FROM rows"); err != nil {
		t.Fatal(err)
	}
	killCertifierLosingVersions(t, bin, dir, r2, func() {})
	t.Log(awaitLogLine(t, r2.Agent.Log, "rewound: the replica went back past versions that failed"))
	qctx, qcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer qcancel()
	if _, err := open.Exec(qctx, "SELECT 1"); err == nil {
		t.Error("a transaction open on replica2 across the rewind was not ended")
	}
	// refused (57P03) until the agent lowers the rewind fence, right after
	// the line
	for {
		_, err := idle.Exec(qctx, "SELECT count(*) FROM rows")
		if err == nil {
			break
		}
		if pgcode.Of(err) != pgcode.CannotConnectNow || qctx.Err() != nil {
			t.Errorf("an idle session on replica2 was ended by the rewind: %v", err)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s := awaitHealthy(t, bin, dir)
	for _, r := range s.Replicas {
		if r.Rebuilt != nil {
			t.Errorf("%s was rebuilt (%+v): it should have been rewound", r.Name, r.Rebuilt)
		}
	}
	time.Sleep(2 * time.Second) // writes go on after the rewind
	cancel()
	wg.Wait()
	if w.count() < 3 {
		t.Fatalf("only %d commits acknowledged (last error %v): the workload did not run", w.count(), w.lastErr)
	}
	checkConverged(t, load(t, dir), w)
}

// A failure right after a barrier is rewound too. A TRUNCATE cannot be
// undone row by row, so a rewind needs a pin taken after it; the pins
// taken every 100 ms hold versions delivered early, usable only once
// durable, a second later here. The certifier delivers the TRUNCATE only
// once durable, and the agent pins at exactly its version as it applies
// it: the certifier is killed while replica2 holds versions after the
// TRUNCATE that are not durable yet, and replica2 goes back to the
// TRUNCATE or later instead of halting for a rebuild.
func TestAFailureRightAfterATruncateIsRewound(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newEarlyDeliveryCluster(t, bin)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	ctx, cancel := context.WithCancel(context.Background())
	admin := connectTo(t, r1.DSN())
	if _, err := admin.Exec(ctx, "CREATE TABLE scratch (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	w := runGroupWorkload(ctx, t, &wg, r1.DSN())
	defer func() {
		cancel()
		wg.Wait()
	}()
	time.Sleep(2 * time.Second)
	killCertifierLosingVersions(t, bin, dir, r2, func() { truncate(t, admin) })
	line := awaitLogLine(t, r2.Agent.Log, "rewound: the replica went back past versions that failed")
	t.Log(line)
	s := awaitHealthy(t, bin, dir)
	for _, r := range s.Replicas {
		if r.Rebuilt != nil {
			t.Errorf("%s was rebuilt (%+v): it should have been rewound", r.Name, r.Rebuilt)
		}
	}
	time.Sleep(time.Second) // writes go on after the rewind
	cancel()
	wg.Wait()
	checkConverged(t, load(t, dir), w)
}

// newEarlyDeliveryCluster starts two replicas whose certifier delivers
// entries before they are durable and waits a second before writing each
// batch (hidden fault flags), with setupTable's tables on both.
func newEarlyDeliveryCluster(t *testing.T, bin string) (string, *cluster.State) {
	t.Helper()
	dir, st := newCluster(t, bin, 2, "--certifier-arg=--unsafe-deliver-before-durable", "--certifier-arg=--unsafe-fault-write-delay=1s")
	setupTable(t, st)
	eventually(t, st.ReplicaByIndex(2).DSN(), "SELECT count(*)::text FROM hot", "10")
	return dir, st
}

// runGroupWorkload runs three clients of a groupWorkload on dsn until ctx
// ends, in wg: several clients, so that a batch, and what fails, holds
// several versions.
func runGroupWorkload(ctx context.Context, t *testing.T, wg *sync.WaitGroup, dsn string) *groupWorkload {
	w := &groupWorkload{acked: map[int]bool{}}
	for k := 1; k <= 3; k++ {
		wg.Go(func() { w.run(ctx, t, dsn, k) })
	}
	return w
}

// truncate truncates table scratch through conn, trying again for up to
// 30 seconds while its replica reconnects to a restarted certifier: each
// attempt of killCertifierLosingVersions kills the certifier right after
// a TRUNCATE.
func truncate(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := conn.Exec(ctx, "TRUNCATE scratch")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("TRUNCATE: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killCertifierLosingVersions runs before, then kills the certifier with
// SIGKILL while replica r holds versions it has not made durable, and
// starts it again with `up`. The kill may land between a batch's write
// and its sync, and then the restarted certifier finds the versions in
// its log: it tries again, up to five times, until a version r held is
// lost. The replica may have received later versions between the read of
// its version and the kill: a kill that kept the version read may still
// have lost those, and the replica is then asked to rewind (its agent's
// log says so), or is found rewinding by the next attempt.
func killCertifierLosingVersions(t *testing.T, bin, dir string, r *cluster.Replica, before func()) {
	t.Helper()
	for attempt := 1; attempt <= 5; attempt++ {
		st := load(t, dir)
		asked := rewindsAsked(t, r)
		before()
		held, durable, rewinding := awaitUndurableVersion(t, st, r)
		if rewinding && attempt == 1 {
			t.Fatalf("%s refused to say its version before any kill, as if rewinding", r.Name)
		}
		if rewinding {
			t.Logf("%s is rewinding: the last kill lost versions it received after its version was read", r.Name)
			return
		}
		if err := syscall.Kill(st.Certifier.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		process.WaitGone(context.Background(), st.Certifier.PID, 5*time.Second)
		mustRun(t, bin, "up", "--data-dir", dir, "--no-demo")
		// Nothing new is durable for a second (the write delay): the
		// durable version is what the certifier recovered.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rep, err := cluster.QueryCertifier(ctx, load(t, dir).CertifierAddr())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kill -9 of the certifier while %s held version %d, durable %d; it recovered up to %d", r.Name, held, durable, rep.DurableVersion)
		if rep.DurableVersion < held || awaitRewindAsked(t, r, asked, 3*time.Second) {
			return
		}
	}
	t.Fatalf("in five kills the certifier never lost a version %s held", r.Name)
}

// rewindAskedText is what an agent logs when admission asks it to rewind.
const rewindAskedText = "it goes back to where they agree before it serves again"

// rewindsAsked counts the rewinds replica r's agent was asked for.
func rewindsAsked(t *testing.T, r *cluster.Replica) int {
	t.Helper()
	return strings.Count(readFile(t, r.Agent.Log), rewindAskedText)
}

// awaitRewindAsked waits up to wait until r's agent was asked for more
// rewinds than the seen ones.
func awaitRewindAsked(t *testing.T, r *cluster.Replica, seen int, wait time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		if rewindsAsked(t, r) > seen {
			t.Logf("%s was asked to rewind: the kill lost versions it received after its version was read", r.Name)
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// awaitUndurableVersion waits until replica r holds a version above the
// certifier's durable one and returns both, or until r refuses the read
// because it is rewinding (the fence's 57P03, or 57P01 for a read the
// rewind ended), and returns rewinding.
func awaitUndurableVersion(t *testing.T, st *cluster.State, r *cluster.Replica) (held, durable uint64, rewinding bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		v, err := readReplicaVersion(r) // first: durable only grows
		if refusedByRewind(err) || pgcode.Of(err) == pgcode.AdminShutdown {
			return 0, 0, true
		}
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		rep, err := cluster.QueryCertifier(ctx, st.CertifierAddr())
		cancel()
		if err == nil && v > rep.DurableVersion {
			return v, rep.DurableVersion, false
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never held a version the certifier had not made durable", r.Name)
	return 0, 0, false
}

// awaitLogLine waits up to a minute until the log at path has a line that
// holds text, and returns that line.
func awaitLogLine(t *testing.T, path, text string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		log := readFile(t, path)
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, text) {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not say %q after a minute:\n%s", path, text, tailLines(log, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// connectTo opens a connection that ends with the test.
func connectTo(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
