package guarantees_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Mode ed: eventual durability (Kashi, "Eventual Durability"). A commit is
// visible at its commit point, the certifier's decision, and durable once
// the certifier's log has it on disk. A safe transaction (synchronous_commit
// on, the replicas' default) is acknowledged only once durable (§2.2.1,
// property 5), a fast one (off) at its commit point (property 4); a safe
// read-only transaction waits until what it read is durable (property 5b,
// §2.2.3). The certifier's emulated slow disk (Config.SyncDelay, the hidden
// --unsafe-fault-fsync-delay) makes durability come durabilityDelay after
// the commit point.

// durabilityDelay is the emulated fsync of the certifier's log in these
// tests: long enough to tell a wait for it from a round trip on a busy
// machine.
const durabilityDelay = time.Second

// startED starts n replicas in mode ed (or mode) with a certifier whose
// every sync of its log takes durabilityDelay more, and a table t.
func startED(t *testing.T, n int, mode agent.Mode) *cluster {
	t.Helper()
	return startEDWith(t, n, mode, durabilityDelay)
}

func startEDWith(t *testing.T, n int, mode agent.Mode, syncDelay time.Duration) *cluster {
	t.Helper()
	c := start(t, n, clustertest.Options{Mode: mode,
		Certifier: func(cfg *certifier.Config) { cfg.SyncDelay = syncDelay }})
	execSQL(t, c.Connect(0), `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	execSQL(t, c.Connect(0), `INSERT INTO t VALUES (0, 0)`)
	for i := range n {
		c.awaitDurable(i)
	}
	return c
}

// fastConn is a connection to replica i whose transactions are fast: its
// reads never wait for durability.
func (c *cluster) fastConn(i int) *pgx.Conn {
	return c.connectAs(i, "postgres", func(cfg *pgx.ConnConfig) { cfg.RuntimeParams["synchronous_commit"] = "off" })
}

// timedExec runs sql on conn in the background; the result carries how
// long it took.
type timedResult struct {
	err  error
	took time.Duration
	at   time.Time // when it returned
}

func timedExec(conn *pgx.Conn, sql string, args ...any) <-chan timedResult {
	done := make(chan timedResult, 1)
	go func() {
		start := time.Now()
		_, err := conn.Exec(context.Background(), sql, args...)
		done <- timedResult{err: err, took: time.Since(start), at: time.Now()}
	}()
	return done
}

// awaitVisible waits up to 30 s until the row with id is visible through
// conn (a fast connection) and returns when it saw it.
func awaitVisible(t *testing.T, conn *pgx.Conn, id int) (seen time.Time, ok bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM t WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return time.Now(), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, false
}

// A safe COMMIT returns only once the certifier's log made it durable, and
// the commit is visible before that: other sessions, on this replica and
// on another, read the row while the COMMIT still waits (Alg. 2 of §3.7:
// visible at the commit point, acknowledged at durability).
func TestSafeCommitIsAcknowledgedOnlyWhenDurable(t *testing.T) {
	c := startED(t, 2, agent.ModeED)
	writer := c.Connect(0) // the server's synchronous_commit = on: safe
	here, there := c.fastConn(0), c.fastConn(1)

	done := timedExec(writer, `INSERT INTO t VALUES (1, 1)`)
	seenHere, okHere := awaitVisible(t, here, 1)
	seenThere, okThere := awaitVisible(t, there, 1)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !okHere || !okThere {
		t.Fatalf("the row was not visible (replica 1 %v, replica 2 %v)", okHere, okThere)
	}
	if r.took < durabilityDelay {
		t.Errorf("the safe COMMIT returned after %v, before the certifier's log could make it durable (sync takes %v)", r.took, durabilityDelay)
	}
	if !seenHere.Before(r.at) || !seenThere.Before(r.at) {
		t.Errorf("the row became visible only after the COMMIT returned (replica 1 %v, replica 2 %v after): it should be visible at the commit point",
			seenHere.Sub(r.at), seenThere.Sub(r.at))
	}
	t.Logf("safe COMMIT took %v; visible on replica 1 %v and on replica 2 %v before it returned", r.took, r.at.Sub(seenHere), r.at.Sub(seenThere))
}

// A fast transaction (synchronous_commit = off) is acknowledged at its
// commit point, before it is durable (§2.2.1, property 4); SET LOCAL
// chooses for one transaction. The certifier answers it as it decides
// it, without waiting for its write or the one in progress.
func TestFastCommitReturnsAtTheCommitPoint(t *testing.T) {
	c := startED(t, 1, agent.ModeED)
	writer := c.Connect(0)
	execSQL(t, writer, `SET synchronous_commit = off`)
	r := <-timedExec(writer, `INSERT INTO t VALUES (1, 1)`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.took >= durabilityDelay/2 {
		t.Errorf("the fast COMMIT took %v: it waited for durability (the certifier syncs in %v)", r.took, durabilityDelay)
	}
	execSQL(t, writer, `SET synchronous_commit = on`)
	c.awaitDurable(0)
	tx := begin(t, writer)
	if _, err := tx.Exec(context.Background(), `SET LOCAL synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `INSERT INTO t VALUES (2, 2)`); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	local := time.Since(started)
	if local >= durabilityDelay/2 {
		t.Errorf("the COMMIT of a transaction with SET LOCAL synchronous_commit = off took %v: it waited for durability", local)
	}
	c.awaitDurable(0)
	r2 := <-timedExec(writer, `INSERT INTO t VALUES (3, 3)`) // on again after SET LOCAL
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	if r2.took < durabilityDelay {
		t.Errorf("the session's next COMMIT (synchronous_commit on again) took %v: it did not wait for durability", r2.took)
	}
	t.Logf("fast COMMIT %v, with SET LOCAL %v, safe COMMIT %v", r.took, local, r2.took)
}

// A safe writer's row lock is released at the commit point, not at
// durability (§3.7: early visibility; the wait for durability follows the
// release of the locks): a second UPDATE of the same row, waiting for the
// first one's lock, proceeds once the first COMMIT passed its commit
// point, while that COMMIT still waits. Under mw the certifier answers
// only once durable, and the second UPDATE waits until then.
func TestEarlyVisibilityLetsAConflictingWriterProceed(t *testing.T) {
	for _, mode := range []agent.Mode{agent.ModeED, agent.ModeMW} {
		t.Run(string(mode), func(t *testing.T) {
			c := startED(t, 1, mode)
			first, second := c.Connect(0), c.fastConn(0)
			tx := begin(t, first)
			if _, err := tx.Exec(context.Background(), `UPDATE t SET v = v + 1 WHERE id = 0`); err != nil {
				t.Fatal(err)
			}
			tx2 := begin(t, second) // the UPDATE alone is timed, not its commit
			updated := timedExec(second, `UPDATE t SET v = v + 10 WHERE id = 0`)
			awaitLockWait(t, c)
			committed := make(chan timedResult, 1)
			go func() {
				started := time.Now()
				err := tx.Commit(context.Background())
				committed <- timedResult{err: err, took: time.Since(started), at: time.Now()}
			}()
			f, u := <-committed, <-updated
			if f.err != nil || u.err != nil {
				t.Fatalf("first: %v, second: %v", f.err, u.err)
			}
			if err := tx2.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Logf("the first COMMIT took %v; the second UPDATE returned %v before it", f.took, f.at.Sub(u.at))
			switch {
			case mode == agent.ModeED && f.at.Sub(u.at) < durabilityDelay/2:
				t.Errorf("the second UPDATE returned %v before the first one's COMMIT: it waited for the lock until close to durability", f.at.Sub(u.at))
			case mode == agent.ModeMW && u.at.Before(f.at.Add(-durabilityDelay/2)):
				t.Errorf("under mw the second UPDATE returned %v before the first one's COMMIT: the lock was released before durability", f.at.Sub(u.at))
			}
			if got := c.countOn(0, `SELECT v FROM t WHERE id = 0`); got != 11 {
				t.Errorf("v = %d, want 11: both updates, the second on the first", got)
			}
		})
	}
}

// awaitLockWait waits until a backend of replica 1 waits for a lock.
func awaitLockWait(t *testing.T, c *cluster) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); c.countOn(0, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the second UPDATE never waited for the first one's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A safe read-only transaction is acknowledged only once every version it
// may have read is durable (§2.2.1 property 5b, §2.2.3, the wait of
// §3.8); a fast one returns at once.
func TestSafeReadOnlyWaitsForDurability(t *testing.T) {
	c := startED(t, 1, agent.ModeED)
	writer := c.fastConn(0)
	reader := c.Connect(0) // safe
	fastReader := c.fastConn(0)

	if r := <-timedExec(writer, `INSERT INTO t VALUES (1, 1)`); r.err != nil || r.took >= durabilityDelay/2 {
		t.Fatalf("the fast insert: %v after %v", r.err, r.took)
	}
	fast := <-timedExec(fastReader, `SELECT count(*) FROM t`)
	safe := <-timedExec(reader, `SELECT count(*) FROM t`)
	if fast.err != nil || safe.err != nil {
		t.Fatalf("fast read: %v, safe read: %v", fast.err, safe.err)
	}
	if fast.took >= durabilityDelay/4 {
		t.Errorf("the fast read took %v: it waited for durability", fast.took)
	}
	if safe.took < durabilityDelay/4 {
		t.Errorf("the safe read took %v: it returned before the version it could read was durable (the certifier syncs in %v)", safe.took, durabilityDelay)
	}
	// once durable, a safe read does not wait
	again := <-timedExec(reader, `SELECT count(*) FROM t`)
	if again.err != nil || again.took >= durabilityDelay/4 {
		t.Errorf("a safe read of durable versions: %v after %v", again.err, again.took)
	}
	t.Logf("fast read %v, safe read %v, safe read of durable versions %v", fast.took, safe.took, again.took)
}

// The wait of a safe COMMIT runs after the commit, where PostgreSQL holds
// interrupts and an error would abort a committed transaction (a PANIC).
// A cancel is absorbed with a WARNING and the COMMIT is acknowledged once
// durable; a termination ends the connection after a WARNING that names
// the transaction, which stays committed; neither PANICs (as
// SyncRepWaitForLSN behaves, which Kashi's safe transactions wait in, §3.8).
func TestASafeCommitWaitTakesCancelAndTerminationWithoutPanic(t *testing.T) {
	const delay = 3 * time.Second
	c := startEDWith(t, 1, agent.ModeED, delay)
	writer, notices := c.connectWithNotices(0, "on")
	admin, watcher := c.fastConn(0), c.fastConn(0)
	signalDuringWait := func(id int, signal string) timedResult {
		done := timedExec(writer, `INSERT INTO t VALUES ($1, $1)`, id)
		if _, ok := awaitVisible(t, watcher, id); !ok {
			t.Fatalf("row %d never became visible", id)
		}
		execSQL(t, admin, `SELECT `+signal+`($1)`, writer.PgConn().PID())
		return <-done
	}

	r := signalDuringWait(1, "pg_cancel_backend")
	if r.err != nil || r.took < delay {
		t.Errorf("a cancelled safe COMMIT: %v after %v; want COMMIT once durable (%v)", r.err, r.took, delay)
	}
	if notices.count("canceling the wait for durability is not possible") != 1 {
		t.Errorf("no WARNING about the cancel: %q", notices.all())
	}
	r = signalDuringWait(2, "pg_terminate_backend")
	if r.err == nil {
		t.Errorf("a terminated safe COMMIT was acknowledged after %v", r.took)
	}
	if notices.count("txn_state") != 1 {
		t.Errorf("no WARNING naming the transaction's state: %q", notices.all())
	}
	awaitVisible(t, watcher, 2) // committed: it stays
	log, err := os.ReadFile(c.DBs[0].LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "PANIC") {
		t.Errorf("the server log has a PANIC:\n%s", c.DBs[0].LogTail(40))
	}
	t.Logf("notices: %q", notices.all())
}

// noticeLog collects the notices and warnings a connection receives.
type noticeLog struct {
	mu   sync.Mutex
	list []string
}

func (l *noticeLog) add(_ *pgconn.PgConn, n *pgconn.Notice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, n.Severity+" "+n.Code+" "+n.Message+" "+n.Hint)
}

// count is how many of them hold text.
func (l *noticeLog) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.list {
		if strings.Contains(s, text) {
			n++
		}
	}
	return n
}

func (l *noticeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.list...)
}

// connectWithNotices connects to replica i with synchronous_commit
// syncCommit, collecting the notices the session receives.
func (c *cluster) connectWithNotices(i int, syncCommit string) (*pgx.Conn, *noticeLog) {
	notices := &noticeLog{}
	conn := c.connectAs(i, "postgres", func(cfg *pgx.ConnConfig) {
		cfg.RuntimeParams["synchronous_commit"] = syncCommit
		cfg.OnNotice = notices.add
	})
	return conn, notices
}

// A safe transaction whose version the certifier loses before making it
// durable is never acknowledged: the certifier delivers entries and
// answers at the commit point and waits before writing each batch (hidden
// fault flags); kill -9 of it while a safe COMMIT waits loses the version.
// Its next generation tells the replicas to rewind; the waiting client gets
// FATAL TK006, never COMMIT; a safe read on another replica that saw the
// row gets 40001 (§2.2.3: it read from a failed transaction, so it fails
// too); the rewind takes the row off every replica
// (§2.2.1 property 3: a failed transaction stops being visible); and no
// server PANICs (the wait runs after the commit, where an error would).
func TestASafeTransactionWhoseVersionFailsIsNeverAcknowledged(t *testing.T) {
	cert, c := startFailable(t, 2)

	writer := c.Connect(0)
	done := timedExec(writer, `INSERT INTO t VALUES (1, 1)`)
	if _, ok := awaitVisible(t, c.fastConn(1), 1); !ok {
		t.Fatal("the row never reached replica 2")
	}
	read := timedExec(c.Connect(1), `SELECT count(*) FROM t`) // safe: waits for what it read
	time.Sleep(200 * time.Millisecond)
	cert.kill()
	cert.start()
	rr := <-read
	switch pe := pgError(rr.err); {
	case rr.err == nil:
		t.Errorf("a safe read of the version that failed was acknowledged (after %v)", rr.took)
	case pe != nil && pe.Code == pgcode.SerializationFailure:
		t.Logf("the safe reader got %s %s: %s", pe.Severity, pe.Code, pe.Message)
	case pe == nil || pe.Code == pgcode.AdminShutdown:
		t.Logf("the safe reader lost its connection (the rewind ended its transaction): %v", rr.err)
	default:
		t.Errorf("the safe reader got %s %s: %s; want 40001 or a lost connection", pe.Severity, pe.Code, pe.Message)
	}
	r := <-done
	switch pe := pgError(r.err); {
	case r.err == nil:
		t.Fatalf("the client was told COMMIT of a transaction whose version the certifier lost (after %v)", r.took)
	case pe != nil && pe.Code == pgcode.TransactionFailed:
		t.Logf("the client got %s %s: %s (hint: %s)", pe.Severity, pe.Code, pe.Message, pe.Hint)
	case pe == nil:
		// the agent reports the failure to the feed before its run ends,
		// well before the rewind ends the backend
		t.Errorf("the client lost its connection instead of hearing that its transaction failed (TK006): %v", r.err)
	default:
		t.Fatalf("the client got %s %s: %s; want FATAL TK006", pe.Severity, pe.Code, pe.Message)
	}
	for i := range c.DBs {
		awaitRowGone(t, c, i, 1)
	}
	// the cluster commits again, at the numbers that failed, once the
	// agents serve again after their rewind
	conn := c.Connect(1)
	for deadline := time.Now().Add(convergeLimit); ; time.Sleep(100 * time.Millisecond) {
		_, err := conn.Exec(context.Background(), `INSERT INTO t VALUES (2, 2)`)
		if err == nil {
			break
		}
		if pgcode.Of(err) != pgcode.CannotConnectNow || time.Now().After(deadline) {
			t.Fatalf("a write after the rewind: %v", err)
		}
	}
	c.converge()
	for i, db := range c.DBs {
		log, err := os.ReadFile(db.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(log), "PANIC") {
			t.Errorf("replica %d's server log has a PANIC:\n%s", i+1, db.LogTail(40))
		}
	}
}

// A fast commit is acknowledged at its commit point and can fail
// afterwards (Kashi §2.2.1, property 4). When it does, its session hears
// of it once, in a WARNING with SQLSTATE TK006 at its next statement (a
// prepared one executed again too), and txn_state names it failed.
func TestAFastCommitThatFailsIsReportedToItsSession(t *testing.T) {
	cert, c := startFailable(t, 1)

	writer, notices := c.connectWithNotices(0, "off")
	if r := <-timedExec(writer, `INSERT INTO t VALUES (1, 1)`); r.err != nil || r.took >= time.Second {
		t.Fatalf("the fast INSERT: %v after %v", r.err, r.took)
	}
	version, epoch := lastCommit(t, writer)
	// pgx prepares a statement with arguments once and then only binds
	// and executes it: the session hears at a statement that is not parsed
	execSQL(t, writer, `SELECT $1::int`, 0)
	cert.kill()
	cert.start()
	awaitRowGone(t, c, 0, 1)
	execSQL(t, writer, `SELECT $1::int`, 1)
	execSQL(t, writer, `SELECT $1::int`, 2)
	if n := notices.count(pgcode.TransactionFailed + " this session's last commit failed"); n != 1 {
		t.Errorf("the session heard %d times that its fast commit failed, want once: %q", n, notices.all())
	}
	// once the new epoch's first version reached the replica, its history
	// says where the failed epoch ended
	execSQL(t, c.fastConn(0), `INSERT INTO t VALUES (2, 2)`)
	if got := txnState(t, c.fastConn(0), version, epoch); got != "failed" {
		t.Errorf("txn_state(%d, %d) = %s, want failed", version, epoch, got)
	}
	t.Logf("version %d of epoch %d failed; notices %q", version, epoch, notices.all())
}

// startFailable starts n replicas in mode ed and a certifier process that
// delivers entries and answers before they are durable and waits 2s before
// writing each batch (hidden fault flags): kill -9 of it loses what it has
// not written, and its next generation tells the replicas to rewind. The
// table t has a first row, whose version, delivered before it was durable,
// starts the agents' pinned snapshots (usable once it is durable: a rewind
// goes back to one).
func startFailable(t *testing.T, n int) (*certifierProcess, *cluster) {
	t.Helper()
	cert := startCertifierProcess(t, "--unsafe-deliver-before-durable", "--unsafe-fault-write-delay=2s")
	c := start(t, n, clustertest.Options{Mode: agent.ModeED, Agent: func(i int, cfg *agent.Config) { cfg.Certifier = cert.addr }})
	admin := c.Connect(0)
	execSQL(t, admin, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	execSQL(t, admin, `INSERT INTO t VALUES (0, 0)`)
	awaitAll(t, c, cert.durable())
	time.Sleep(time.Second)
	return cert, c
}

// awaitRowGone waits until replica i has no row id in t.
func awaitRowGone(t *testing.T, c *cluster, i, id int) {
	t.Helper()
	deadline := time.Now().Add(convergeLimit)
	for {
		conn, err := pgx.Connect(context.Background(), c.dsn(i, "postgres")+"&options=-c%20synchronous_commit%3Doff")
		if err == nil {
			var n int
			err = conn.QueryRow(context.Background(), `SELECT count(*) FROM t WHERE id = $1`, id).Scan(&n)
			conn.Close(context.Background())
			if err == nil && n == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d still has row %d of a failed transaction after %v (last error %v)", i+1, id, convergeLimit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A safe commit in mode ed waits for the certifier's durability, never for
// the replica's WAL flush (safe.c sets synchronous_commit off for the
// commit record alone): N safe commits in a row write the WAL far fewer
// than N times (the WAL writer's rounds and the agent's progress reads
// only), where a flush per commit would write it at least N times.
func TestSafeCommitsDoNotFlushTheReplicasWAL(t *testing.T) {
	const n = 50
	c := startEDWith(t, 1, agent.ModeED, 0)
	writer := c.Connect(0) // safe
	stats := c.fastConn(0)
	walWrites := func() int64 {
		var w int64
		if err := stats.QueryRow(context.Background(), `SELECT wal_write FROM pg_stat_wal`).Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	before, began := walWrites(), time.Now()
	for i := 1; i <= n; i++ {
		execSQL(t, writer, `INSERT INTO t VALUES ($1, $1)`, i)
	}
	took := time.Since(began)
	// the writer's WAL statistics reach pg_stat_wal when it goes idle
	execSQL(t, writer, `SELECT pg_stat_force_next_flush()`)
	time.Sleep(100 * time.Millisecond)
	grew := walWrites() - before
	if grew >= n/2 {
		t.Errorf("%d safe commits wrote the WAL %d times in %v: they flush it each", n, grew, took)
	}
	t.Logf("%d safe commits wrote the WAL %d times in %v", n, grew, took)
}
