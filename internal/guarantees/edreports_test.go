package guarantees_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	tkcluster "github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// A fast commit of a new epoch whose version fails is reported to its
// session even when the durability feed applies an earlier epoch's
// failure report ('X') after the commit was decided: that report does not
// concern the commit, and the later one that does must still be heard.
func TestAFastCommitsFailureIsReportedAfterALateReportOfAnEarlierEpoch(t *testing.T) {
	cert, c := startFailable(t, 1)
	feed := feedPID(t, c.DBs[0].PID())
	writer, notices := c.connectWithNotices(0, "off")

	// the feed stalls: the first failure's 'X' waits in its socket
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

	execSQL(t, c.fastConn(0), `INSERT INTO t VALUES (1, 1)`)
	time.Sleep(200 * time.Millisecond)
	cert.kill() // first failure: row 1's version is lost
	cert.start()
	awaitRowGone(t, c, 0, 1)
	awaitAdmitting(t, c, 0)
	time.Sleep(time.Second) // a pin at the replica's version, durable, for the next rewind

	// the writer's fast commit of the new epoch, decided while the first
	// failure's 'X' is still unapplied
	execSQL(t, writer, `INSERT INTO t VALUES (2, 2)`)
	cert.kill() // second failure: row 2's version is lost too
	version, epoch := lastCommit(t, writer)
	cert.start()
	awaitRowGone(t, c, 0, 2)
	awaitAdmitting(t, c, 0)

	resume() // the feed applies both failures now, the first one late
	awaitServerLogCount(t, c, 0, "failed; the transactions that hold them end", 2)
	execSQL(t, writer, `SELECT $1::int`, 1)
	execSQL(t, writer, `SELECT $1::int`, 2)

	execSQL(t, c.fastConn(0), `INSERT INTO t VALUES (3, 3)`)
	state := txnState(t, c.fastConn(0), version, epoch)
	t.Logf("the writer's fast commit: version %d of epoch %d, %s; notices %q", version, epoch, state, notices.all())
	if state != "failed" {
		t.Fatalf("txn_state(%d, %d) = %s, want failed (the probe needs the commit to fail)", version, epoch, state)
	}
	if n := notices.count(pgcode.TransactionFailed + " this session's last commit failed"); n != 1 {
		t.Errorf("the session heard %d times that its fast commit (version %d, epoch %d) failed, want once", n, version, epoch)
	}
}

// awaitAdmitting waits until replica i's admission gate is open.
func awaitAdmitting(t *testing.T, c *cluster, i int) {
	t.Helper()
	for deadline := time.Now().Add(convergeLimit); ; time.Sleep(50 * time.Millisecond) {
		g, err := tkcluster.ReadGate(context.Background(), c.dsn(i, "postgres"))
		if err == nil && g.Admitting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d's gate never opened: %+v %v", i+1, g, err)
		}
	}
}

// awaitServerLogCount waits until replica i's server log has text n times.
func awaitServerLogCount(t *testing.T, c *cluster, i int, text string, n int) {
	t.Helper()
	for deadline := time.Now().Add(convergeLimit); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(c.DBs[i].LogPath())
		if strings.Count(string(b), text) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d's server log never said %q %d times", i+1, text, n)
		}
	}
}

// A backend that the agent ends because it holds a version not known to
// be durable (its version may have failed) does not tell its client that
// the transaction committed. The client is psql (libpq), which reads what
// the server sends after the FATAL.
func TestAnEndedHolderIsNotToldItCommitted(t *testing.T) {
	cert, c := startFailable(t, 1)
	holder := c.fastConn(0)
	execSQL(t, holder, `SELECT tashkent.hold_commits(tashkent.committed_version(), 60000)`)
	psql := exec.Command("psql", "-X", "-d", c.dsn(0, "postgres"), "-c", "INSERT INTO t VALUES (1, 1)")
	var out bytes.Buffer
	psql.Stdout, psql.Stderr = &out, &out
	if err := psql.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- psql.Wait() }()
	time.Sleep(500 * time.Millisecond)
	cert.kill() // row 1's version is lost: it was not durable
	c.StopAgent(0)
	cert.start()
	c.RunAgent(0, c.Config(0))
	select {
	case err := <-done:
		t.Logf("psql ended (%v):\n%s", err, out.String())
	case <-time.After(convergeLimit):
		psql.Process.Kill()
		t.Fatal("the held INSERT never returned")
	}
	execSQL(t, holder, `SELECT tashkent.release_commits()`)
	awaitRowGone(t, c, 0, 1)
	if strings.Contains(out.String(), "it committed") {
		t.Errorf("the client of a transaction whose version failed was told it committed:\n%s", out.String())
	}
}
