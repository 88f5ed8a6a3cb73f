package guarantees_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	tkcluster "github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Mode ed, a failure meeting an agent restart and a slow durability feed.

// A backend holding a decided version that is not durable, across an
// agent restart during which that version fails, never commits it: the
// replica needs no rewind (the version was not committed there), the new
// epoch numbers another transaction at the same version, and the backend
// must not take that entry as its own. Its client never sees COMMIT, and
// the replicas agree afterwards.
func TestAFailedVersionHeldAcrossAnAgentRestartIsNeverCommitted(t *testing.T) {
	cert, c := startFailable(t, 2)

	// replica 1's local commits wait for their turn: its INSERT stays held
	holder := c.fastConn(0)
	execSQL(t, holder, `SELECT tashkent.hold_commits(tashkent.committed_version(), 60000)`)
	done := timedExec(c.Connect(0), `INSERT INTO t VALUES (1, 1)`)
	if _, ok := awaitVisible(t, c.fastConn(1), 1); !ok {
		t.Fatal("the row never reached replica 2")
	}
	time.Sleep(200 * time.Millisecond)
	cert.kill() // version of row 1 is lost: it was not durable
	c.StopAgent(0)
	cert.start()
	c.RunAgent(0, c.Config(0))
	awaitRowGone(t, c, 1, 1)
	conn := c.Connect(1)
	for deadline := time.Now().Add(convergeLimit); ; time.Sleep(100 * time.Millisecond) {
		_, err := conn.Exec(context.Background(), `INSERT INTO t VALUES (2, 2)`)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a write after the failure: %v", err)
		}
	}
	execSQL(t, holder, `SELECT tashkent.release_commits()`)
	select {
	case r := <-done:
		if r.err == nil {
			t.Errorf("the held INSERT, whose version failed, was acknowledged (after %v)", r.took)
		} else {
			t.Logf("the held INSERT ended: %v", r.err)
		}
	case <-time.After(convergeLimit):
		t.Error("the held INSERT never returned")
	}
	c.converge()
	for i := range c.DBs {
		id1 := c.countOn(i, `SELECT count(*) FROM t WHERE id = 1`)
		id2 := c.countOn(i, `SELECT count(*) FROM t WHERE id = 2`)
		if id1 != 0 || id2 != 1 {
			t.Errorf("replica %d has %d row(s) 1 (failed) and %d row(s) 2 (committed after the failure); want 0 and 1", i+1, id1, id2)
		}
	}
}

// The durability feed applies the agent's failure report ('X') in its own
// time: a report it applies late, after the agent rewound and serves a new
// epoch, never fails that epoch's commits at the same version numbers.
func TestALateFailureReportDoesNotFailALaterEpochsCommit(t *testing.T) {
	cert, c := startFailable(t, 2)
	feed := feedPID(t, c.DBs[0].PID())

	execSQL(t, c.fastConn(0), `INSERT INTO t VALUES (1, 1)`)
	time.Sleep(200 * time.Millisecond)
	cert.kill()
	cert.start()
	awaitServerLog(t, c, 0, "failed; the transactions that hold them end")
	// the feed applied 'X' C and now stalls: the agent's "none" and the
	// new epoch's durable versions wait in its socket
	if err := syscall.Kill(feed, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	resume := func() {
		if !continued {
			syscall.Kill(feed, syscall.SIGCONT)
			continued = true
		}
	}
	defer resume()
	var err error
	for deadline := time.Now().Add(convergeLimit); ; time.Sleep(50 * time.Millisecond) {
		// an upsert: an attempt whose outcome was unknown may have committed
		done := timedExec(c.Connect(0), `INSERT INTO t VALUES (2, 2) ON CONFLICT (id) DO UPDATE SET v = excluded.v`)
		var r timedResult
		select {
		case r = <-done:
		case <-time.After(2 * time.Second):
			resume() // it waits for durability, which the stalled feed holds back
			r = <-done
		}
		err = r.err
		// before the new epoch serves: the gate is closed (57P03), the
		// rewind ends the transactions in progress (57P01), or the agent's
		// run ends while the writeset is sent (08007)
		code := pgcode.Of(err)
		retry := code == pgcode.CannotConnectNow || code == pgcode.AdminShutdown || code == pgcode.TransactionResolutionUnknown
		if !retry || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("a safe INSERT of the new epoch on replica 1: %v", err)
	}
	c.converge()
	for i := range c.DBs {
		if n := c.countOn(i, `SELECT count(*) FROM t WHERE id = 2`); n != 1 {
			t.Errorf("replica %d has %d row(s) 2, want 1", i+1, n)
		}
	}
}

// feedPID finds the durability feed worker of the server postmaster.
func feedPID(t *testing.T, postmaster int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(stat))
		if len(f) > 3 && f[3] == strconv.Itoa(postmaster) && strings.Contains(string(cmdline), "tashkent durability feed") {
			return pid
		}
	}
	t.Fatal("the server has no durability feed process")
	return 0
}

// awaitServerLog waits until replica i's server log has text.
func awaitServerLog(t *testing.T, c *cluster, i int, text string) {
	t.Helper()
	for deadline := time.Now().Add(convergeLimit); ; time.Sleep(2 * time.Millisecond) {
		b, _ := os.ReadFile(c.DBs[i].LogPath())
		if strings.Contains(string(b), text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d's server log never said %q", i+1, text)
		}
	}
}

// tashkent's own reads of a replica (status, readiness, replica add) are
// fast in mode ed: they answer while the certifier is down and the
// replica holds a version that is not durable, which a safe read would
// wait for.
func TestTheGateIsReadWhileTheCertifierIsDown(t *testing.T) {
	cert, c := startFailable(t, 1)
	execSQL(t, c.fastConn(0), `INSERT INTO t VALUES (1, 1)`) // not durable for 2s
	cert.kill()
	defer cert.start() // the cluster's cleanup needs it
	began := time.Now()
	g, err := tkcluster.ReadGate(context.Background(), c.dsn(0, "postgres"))
	if err != nil {
		t.Fatalf("reading the gate while the certifier is down: %v (after %v)", err, time.Since(began))
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("reading the gate took %v: it waited for durability", took)
	}
	t.Logf("gate read in %v: version %d, admitting %v", time.Since(began), g.Version, g.Admitting)
}
