package wire_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// The frames of transaction states and of the durability feed, byte by
// byte as channel.c writes and reads them, and the decision with its
// epoch and the durable version known when it was sent.
func TestStateAndFeedFramesAreLaidOutAsTheBackendExpects(t *testing.T) {
	for _, c := range []struct {
		m    wire.Message
		want []byte
	}{
		{wire.StateQuery{Version: 0x0102030405060708, HasEpoch: true, Epoch: 9},
			[]byte{0, 0, 0, 18, 'Q', 1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 0, 0, 0, 0, 0, 0, 9}},
		{wire.StateAnswer{State: wire.StateFailed, Final: true, Durable: 7, Text: "ab"},
			[]byte{0, 0, 0, 15, 'q', 3, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 2, 'a', 'b'}},
		{wire.Durable{Version: 0x0a0b},
			[]byte{0, 0, 0, 9, 'V', 0, 0, 0, 0, 0, 0, 0x0a, 0x0b}},
		{wire.Failed{After: 0x0c0d, Epoch: 0x0e},
			[]byte{0, 0, 0, 17, 'X', 0, 0, 0, 0, 0, 0, 0x0c, 0x0d, 0, 0, 0, 0, 0, 0, 0, 0x0e}},
		{wire.Decision{Kind: wire.Commit, Version: 5, Epoch: 6, Durable: 4},
			[]byte{0, 0, 0, 31, 'D', 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0}},
	} {
		if got := wire.Encode(c.m); !bytes.Equal(got, c.want) {
			t.Errorf("%T: % x, want % x", c.m, got, c.want)
		}
		typ, p, err := wire.ReadFrame(bufio.NewReader(bytes.NewReader(c.want)), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := wire.Decode(typ, p); err != nil || back != c.m {
			t.Errorf("%T round trip: %+v, %v", c.m, back, err)
		}
	}
	for name, frame := range map[string][]byte{
		"short state query":  {0, 0, 0, 10, 'Q', 0, 0, 0, 0, 0, 0, 0, 1, 1},
		"short state answer": {0, 0, 0, 11, 'q', 1, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		"short durable":      {0, 0, 0, 5, 'V', 0, 0, 0, 1},
	} {
		typ, p, err := wire.ReadFrame(bufio.NewReader(bytes.NewReader(frame)), 1<<20)
		if err == nil {
			_, err = wire.Decode(typ, p)
		}
		if !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func awaitFeed(t *testing.T, a *agenttest.Agent) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); a.Feeds() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server's durability feed did not connect within 30s (%d connected)", a.Feeds())
		}
	}
}

// The server's durability feed connects to the agent's socket by itself,
// and tashkent.durable_version() is what the agent told it last, never
// lower than before (durability is a prefix that only grows: Kashi
// §2.2.1, property 2); NULL before the agent said anything.
func TestTheDurabilityFeedCarriesTheDurableVersion(t *testing.T) {
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	awaitFeed(t, a)
	if got := pgtest.DurableVersion(t, c); got != nil {
		t.Fatalf("durable_version() before the agent said anything: %s; want NULL", pgtest.ShowVersion(got))
	}
	a.SetDurable(42)
	pgtest.AwaitDurableVersion(t, c, 42, 30*time.Second)
	// 40, then 43 after a while on the same connection: until 43 shows,
	// every read is taken after 40 arrived or before, and none may be
	// below 42
	a.SetDurable(40)
	go func() {
		time.Sleep(300 * time.Millisecond)
		a.SetDurable(43)
	}()
	reads := 0
	for deadline := time.Now().Add(30 * time.Second); ; reads++ {
		got := pgtest.DurableVersion(t, c)
		if got == nil || *got < 42 {
			t.Fatalf("durable_version() after the agent said 40: %s; want 42, the highest heard", pgtest.ShowVersion(got))
		}
		if *got == 43 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("durable_version() is %d 30s after the agent said 43", *got)
		}
	}
	if reads < 10 {
		t.Fatalf("only %d reads while the agent said 40, then 43: too few to see a lower value", reads)
	}
}

// The postmaster starts the durability feed again when it dies: once
// terminated (SIGTERM), it connects to the agent again and carries the durable
// version on.
func TestTheDurabilityFeedComesBackAfterItIsTerminated(t *testing.T) {
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	awaitFeed(t, a)
	a.SetDurable(10)
	pgtest.AwaitDurableVersion(t, c, 10, 30*time.Second)
	// SIGTERM, as pg_terminate_backend sends; which cannot reach the feed:
	// a worker without a database is not in the server's process array
	first := a.FeedPIDs()[0]
	if err := syscall.Kill(int(first), syscall.SIGTERM); err != nil {
		t.Fatalf("terminate the feed (pid %d): %v", first, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if pids := a.FeedPIDs(); len(pids) == 1 && pids[0] != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new durability feed connected 30s after the first one (pid %d) was terminated: %v", first, a.FeedPIDs())
		}
	}
	a.SetDurable(20)
	pgtest.AwaitDurableVersion(t, c, 20, 30*time.Second)
}

// tashkent.last_commit() is the session's last writing commit with the
// epoch the decision carried; last_commit_version() its version.
func TestLastCommitCarriesTheEpochOfTheDecision(t *testing.T) {
	ctx := context.Background()
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	var version, epoch *int64
	if err := c.QueryRow(ctx, `SELECT version, epoch FROM tashkent.last_commit()`).Scan(&version, &epoch); err != nil || version != nil || epoch != nil {
		t.Fatalf("last_commit() of a session that wrote nothing: %v, %v, %v; want NULLs", version, epoch, err)
	}
	a.SetDecide(func(r agenttest.Request, next uint64) wire.Decision {
		return wire.Decision{Kind: wire.Commit, Version: next, Epoch: 77}
	})
	for _, sql := range []string{`CREATE TABLE t (k int PRIMARY KEY)`, `INSERT INTO t VALUES (1)`} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var last int64
	if err := c.QueryRow(ctx, `SELECT version, epoch, tashkent.last_commit_version() FROM tashkent.last_commit()`).Scan(&version, &epoch, &last); err != nil {
		t.Fatal(err)
	}
	if version == nil || epoch == nil || *version != 2 || *epoch != 77 || last != 2 {
		t.Fatalf("last_commit() after versions 1 and 2 of epoch 77: (%v, %v), last_commit_version %d; want (2, 77), 2", version, epoch, last)
	}
}

// tashkent.txn_state asks the agent, with the epoch when one is given,
// and names its answer; an agent that cannot judge is 57P03 with why.
func TestTxnStateAsksTheAgent(t *testing.T) {
	ctx := context.Background()
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	a.SetState(func(q wire.StateQuery) wire.StateAnswer {
		return wire.StateAnswer{State: wire.TxnState(q.Version), Durable: 3}
	})
	for v, want := range map[int64]string{1: "durable", 2: "committed", 3: "failed", 4: "unknown"} {
		var got string
		if err := c.QueryRow(ctx, `SELECT tashkent.txn_state($1, 9)`, v).Scan(&got); err != nil || got != want {
			t.Errorf("txn_state(%d, 9) answered %v: %q, %v; want %q", v, wire.TxnState(v), got, err, want)
		}
	}
	var got string
	if err := c.QueryRow(ctx, `SELECT tashkent.txn_state(1)`).Scan(&got); err != nil || got != "durable" {
		t.Fatalf("txn_state(1): %q, %v", got, err)
	}
	qs := a.StateQueries()
	if last := qs[len(qs)-1]; last != (wire.StateQuery{Version: 1}) || qs[0] != (wire.StateQuery{Version: qs[0].Version, HasEpoch: true, Epoch: 9}) {
		t.Fatalf("the agent was asked %+v, want epoch 9 given, then none", qs)
	}
	var durable int64
	if err := c.QueryRow(ctx, `SELECT tashkent.durable_version()`).Scan(&durable); err != nil || durable != 3 {
		t.Fatalf("durable_version() after the agent answered with durable version 3: %d, %v", durable, err)
	}
	var null *string
	if err := c.QueryRow(ctx, `SELECT tashkent.txn_state(NULL)`).Scan(&null); err != nil || null != nil {
		t.Fatalf("txn_state(NULL): %v, %v; want NULL", null, err)
	}
	for _, sql := range []string{`SELECT tashkent.txn_state(0)`, `SELECT tashkent.txn_state(1, -1)`, `SELECT tashkent.wait_durable(1, -1)`} {
		if _, err := c.Exec(ctx, sql); pgcode.Of(err) != pgcode.InvalidParameterValue {
			t.Errorf("%s: %v, want 22023", sql, err)
		}
	}
	a.SetState(func(wire.StateQuery) wire.StateAnswer {
		return wire.StateAnswer{Text: "the tashkent agent is catching_up: the replica is catching up"}
	})
	_, err := c.Exec(ctx, `SELECT tashkent.txn_state(1)`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.CannotConnectNow || !strings.Contains(pe.Message, "catching up") || pe.Hint == "" {
		t.Fatalf("txn_state while the agent cannot judge: %v, want 57P03 with its reason and a hint", err)
	}
}

// answerAt answers as an agent whose durable version is durable: durable
// up to it, committed after it, failed in epoch 1.
func answerAt(durable uint64) func(q wire.StateQuery) wire.StateAnswer {
	return func(q wire.StateQuery) wire.StateAnswer {
		switch {
		case q.HasEpoch && q.Epoch == 1:
			return wire.StateAnswer{State: wire.StateFailed, Durable: durable}
		case q.Version <= durable:
			return wire.StateAnswer{State: wire.StateDurable, Durable: durable}
		}
		return wire.StateAnswer{State: wire.StateCommitted, Durable: durable}
	}
}

// awaitExtensionWaitOf waits until c's backend waits on an extension's
// wait event.
func awaitExtensionWaitOf(t *testing.T, admin, c *pgx.Conn) {
	t.Helper()
	awaitExtensionWait(t, admin, c.PgConn().PID())
}

// tashkent.wait_durable returns as soon as the agent says durable or
// failed. While it says committed, the backend sleeps until the feed
// brings the version (its latch is set; it asks again without one only
// after 4s), asks again, and returns; after its timeout it fails with TK004 and a hint; a cancel and
// statement_timeout end it.
func TestWaitDurableWakesWhenTheFeedBringsTheVersion(t *testing.T) {
	ctx := context.Background()
	a := agenttest.Start(t)
	admin := a.Connect("postgres")
	c := a.Connect("postgres")
	awaitFeed(t, a)
	a.SetDurable(42)
	a.SetState(answerAt(42))
	var got string
	if err := c.QueryRow(ctx, `SELECT tashkent.wait_durable(40)`).Scan(&got); err != nil || got != "durable" {
		t.Fatalf("wait_durable of a durable version: %q, %v", got, err)
	}
	if err := c.QueryRow(ctx, `SELECT tashkent.wait_durable(50, 10000, 1)`).Scan(&got); err != nil || got != "failed" {
		t.Fatalf("wait_durable of a failed version: %q, %v", got, err)
	}

	waited := make(chan error, 1)
	asked := len(a.StateQueries())
	go func() { waited <- c.QueryRow(ctx, `SELECT tashkent.wait_durable(50, 60000)`).Scan(&got) }()
	for len(a.StateQueries()) == asked {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // into the latch wait
	asked = len(a.StateQueries())
	a.SetState(answerAt(50))
	advanced := time.Now()
	a.SetDurable(50)
	if err := <-waited; err != nil || got != "durable" {
		t.Fatalf("wait_durable while the version became durable: %q, %v", got, err)
	}
	// without a wake-up, the wait would ask again only after 4s
	if took := time.Since(advanced); took > 1500*time.Millisecond {
		t.Fatalf("wait_durable returned %v after the feed brought the version: the feed did not wake it", took)
	}
	if n := len(a.StateQueries()) - asked; n != 1 {
		t.Errorf("the wait asked the agent %d times after the advance, want once", n)
	}

	_, err := c.Exec(ctx, `SELECT tashkent.wait_durable(60, 200)`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.VersionWaitTimedOut || !strings.Contains(pe.Message, "version 60 is not durable after 200 ms") ||
		!strings.Contains(pe.Detail, "committed") || pe.Hint == "" {
		t.Fatalf("wait_durable past its timeout: %v, want TK004 naming the version, its state and a hint", err)
	}
	go func() {
		_, err := c.Exec(ctx, `SELECT tashkent.wait_durable(60, 60000)`)
		waited <- err
	}()
	awaitExtensionWaitOf(t, admin, c)
	if _, err := admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, int32(c.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("a cancelled wait_durable: %v, want 57014", err)
	}
	if _, err := c.Exec(ctx, `SET statement_timeout = 100; SELECT tashkent.wait_durable(60, 60000)`, pgx.QueryExecModeSimpleProtocol); pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("wait_durable past statement_timeout: %v, want 57014", err)
	}
}

// Where the agent's durable version has passed the version but its
// history does not reach it yet (it is catching up), no advance is coming
// to wake the wait: wait_durable asks again after short sleeps, returns
// soon after the history reaches the version, and does not ask in a busy
// loop meanwhile. If the history never reaches it, TK004 says that the
// state is still unknown although the durable version passed it.
func TestWaitDurableAsksAgainWhileTheHistoryIsBehind(t *testing.T) {
	ctx := context.Background()
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	caughtUp := time.Now().Add(400 * time.Millisecond)
	a.SetState(func(q wire.StateQuery) wire.StateAnswer {
		if time.Now().Before(caughtUp) {
			return wire.StateAnswer{State: wire.StateUnknown, Durable: 50}
		}
		return wire.StateAnswer{State: wire.StateDurable, Final: true, Durable: 50}
	})
	began := time.Now()
	var got string
	if err := c.QueryRow(ctx, `SELECT tashkent.wait_durable(45, 10000)`).Scan(&got); err != nil || got != "durable" {
		t.Fatalf("wait_durable while the history catches up: %q, %v", got, err)
	}
	if took := time.Since(began); took > 1500*time.Millisecond {
		t.Fatalf("wait_durable returned %v after it began, the history reaching the version at 400ms: it did not ask again soon", took)
	}
	if n := len(a.StateQueries()); n < 3 || n > 40 {
		t.Fatalf("wait_durable asked the agent %d times in about 400ms; want a few (short sleeps, no busy loop)", n)
	}

	a.SetState(func(wire.StateQuery) wire.StateAnswer { return wire.StateAnswer{State: wire.StateUnknown, Durable: 50} })
	_, err := c.Exec(ctx, `SELECT tashkent.wait_durable(45, 300)`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.VersionWaitTimedOut ||
		!strings.Contains(pe.Message, "still unknown") || !strings.Contains(pe.Message, "durable version (50) has passed it") || pe.Detail == "" {
		t.Fatalf("wait_durable past its timeout while the durable version passed the version: %v; want TK004 saying the state is still unknown although the durable version passed it", err)
	}
}

// An 'unknown' that the agent marks final (a version before the
// replica's history, say) can never change: wait_durable fails at once
// with 22023 naming the pair and why, whatever its timeout; txn_state
// answers unknown.
func TestWaitDurableDoesNotWaitForAnUnknownThatStays(t *testing.T) {
	ctx := context.Background()
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	const why = "this replica's history begins at version 100 (epoch 7): it holds no record of earlier versions"
	a.SetState(func(wire.StateQuery) wire.StateAnswer {
		return wire.StateAnswer{State: wire.StateUnknown, Final: true, Durable: 120, Text: why}
	})
	began := time.Now()
	_, err := c.Exec(ctx, `SELECT tashkent.wait_durable(20, 5000, 3)`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.InvalidParameterValue || !strings.Contains(pe.Message, "version 20 of epoch 3") || !strings.Contains(pe.Message, why) {
		t.Fatalf("wait_durable of an unknown that stays: %v; want 22023 naming version 20 of epoch 3 and why", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("wait_durable of an unknown that stays took %v: it waited", took)
	}
	var got string
	if err := c.QueryRow(ctx, `SELECT tashkent.txn_state(20, 3)`).Scan(&got); err != nil || got != "unknown" {
		t.Fatalf("txn_state of an unknown that stays: %q, %v; want unknown", got, err)
	}
}

// A question to the agent gets no more time than the wait it serves
// (100ms at least): against an agent that stalls, wait_durable(v, 100)
// ends with TK004 near 100ms, saying the agent did not answer, and the
// next question is answered on a new connection.
func TestWaitDurableEndsOnTimeWhenTheAgentStalls(t *testing.T) {
	ctx := context.Background()
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	a.SetState(func(wire.StateQuery) wire.StateAnswer {
		time.Sleep(3 * time.Second)
		return wire.StateAnswer{State: wire.StateCommitted, Durable: 50}
	})
	began := time.Now()
	_, err := c.Exec(ctx, `SELECT tashkent.wait_durable(60, 100)`)
	took := time.Since(began)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.VersionWaitTimedOut || !strings.Contains(pe.Message, "did not answer in time") {
		t.Fatalf("wait_durable(60, 100) against a stalled agent: %v; want TK004 saying the agent did not answer in time", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("wait_durable(60, 100) against a stalled agent took %v; want about 100ms", took)
	}
	a.SetState(answerAt(60))
	var got string
	if err := c.QueryRow(ctx, `SELECT tashkent.wait_durable(60, 10000)`).Scan(&got); err != nil || got != "durable" {
		t.Fatalf("wait_durable once the agent answers again: %q, %v", got, err)
	}
}

// Without an agent, the state functions fail with 57P03 naming the
// socket, durable_version() is NULL, and the feed says once in the log
// that it cannot reach the agent, however often it tries; once an agent
// listens, the feed follows it and says so.
func TestWithoutAnAgentTheFeedRetriesQuietlyAndTheFunctionsSaySo(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tashkent-feed-") // the postgres user must reach the socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "agent.sock")
	srv := pgtest.Start(t, pgtest.WithTashkent(), pgtest.WithSettings(map[string]string{"tashkent.agent_socket": socket}))
	c := pgtest.Connect(t, srv, "postgres")
	if _, err := c.Exec(ctx, `CREATE EXTENSION tashkent`); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`SELECT tashkent.txn_state(1)`, `SELECT tashkent.wait_durable(1, 100)`} {
		_, err := c.Exec(ctx, sql)
		if pe := pgError(err); pe == nil || pe.Code != pgcode.CannotConnectNow || !strings.Contains(pe.Message, "not running") || !strings.Contains(pe.Hint, socket) {
			t.Errorf("%s without an agent: %v, want 57P03 saying it is not running, naming the socket", sql, err)
		}
	}
	var null *int64
	if err := c.QueryRow(ctx, `SELECT tashkent.durable_version()`).Scan(&null); err != nil || null != nil {
		t.Fatalf("durable_version() without an agent: %v, %v; want NULL", null, err)
	}
	time.Sleep(3 * time.Second) // several tries
	const unreachable = "the durability feed cannot reach this replica's tashkent agent"
	if n := strings.Count(readLog(t, srv.LogPath()), unreachable); n != 1 {
		t.Fatalf("the server log says %d times that the feed cannot reach the agent, want once", n)
	}

	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(socket, 0o777); err != nil {
		t.Fatal(err)
	}
	// an agent that takes the feed and drops it at once is as good as none
	if n := welcomeAndDropFeeds(t, ln, 2500*time.Millisecond); n == 0 {
		t.Fatal("the feed did not try the agent's socket in 2.5s")
	}
	log := readLog(t, srv.LogPath())
	if n := strings.Count(log, unreachable); n != 1 || strings.Contains(log, "following the agent") {
		t.Fatalf("after an agent that drops the feed: the server log says %d times that the feed cannot reach the agent (want once), following it: %v",
			n, strings.Contains(log, "following the agent"))
	}
	go serveOneFeed(t, ln, 7)
	pgtest.AwaitDurableVersion(t, c, 7, 30*time.Second)
	if log := readLog(t, srv.LogPath()); !strings.Contains(log, "tashkent durability feed: following the agent at") {
		t.Fatalf("the server log does not say the feed reached the agent:\n%s", log)
	}
}

// welcomeAndDropFeeds welcomes each feed that connects within d and
// closes its connection at once; it returns how many came.
func welcomeAndDropFeeds(t *testing.T, ln net.Listener, d time.Duration) int {
	t.Helper()
	ul := ln.(*net.UnixListener)
	ul.SetDeadline(time.Now().Add(d))
	defer ul.SetDeadline(time.Time{})
	n := 0
	for {
		nc, err := ul.Accept()
		if err != nil {
			return n
		}
		if _, _, err := wire.ReadFrame(bufio.NewReader(nc), 1<<10); err == nil {
			nc.Write(wire.Encode(wire.Welcome{Accepted: true}))
			n++
		}
		nc.Close()
	}
}

// serveOneFeed accepts one connection, checks it is a durability feed's
// hello, welcomes it and tells it durable version v.
func serveOneFeed(t *testing.T, ln net.Listener, v uint64) {
	nc, err := ln.Accept()
	if err != nil {
		return
	}
	defer nc.Close()
	typ, p, err := wire.ReadFrame(bufio.NewReader(nc), 1<<10)
	if err != nil {
		t.Errorf("the feed's hello: %v", err)
		return
	}
	m, err := wire.Decode(typ, p)
	if h, ok := m.(wire.Hello); err != nil || !ok || h.Role != wire.RoleFeed || h.Database != "" || h.Protocol != wire.ProtocolVersion {
		t.Errorf("the feed said %+v, %v; want a hello as the feed, from no database", m, err)
		return
	}
	nc.Write(wire.Encode(wire.Welcome{Accepted: true}))
	nc.Write(wire.Encode(wire.Durable{Version: v}))
	nc.Read(make([]byte, 1)) // until the server stops
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
