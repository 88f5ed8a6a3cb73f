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
		{wire.StateAnswer{State: wire.StateFailed, Durable: 7, Text: "ab"},
			[]byte{0, 0, 0, 14, 'q', 3, 0, 0, 0, 0, 0, 0, 0, 7, 0, 2, 'a', 'b'}},
		{wire.Durable{Version: 0x0a0b},
			[]byte{0, 0, 0, 9, 'V', 0, 0, 0, 0, 0, 0, 0x0a, 0x0b}},
		{wire.Failed{After: 0x0c0d},
			[]byte{0, 0, 0, 9, 'X', 0, 0, 0, 0, 0, 0, 0x0c, 0x0d}},
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
		"short state answer": {0, 0, 0, 10, 'q', 1, 0, 0, 0, 0, 0, 0, 0, 1},
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

// awaitDurableVersion polls tashkent.durable_version() until it is want.
func awaitDurableVersion(t *testing.T, c *pgx.Conn, want int64) {
	t.Helper()
	var got *int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := c.QueryRow(context.Background(), `SELECT tashkent.durable_version()`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != nil && *got == want {
			return
		}
	}
	t.Fatalf("durable_version() is %v, want %d", got, want)
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
	ctx := context.Background()
	a := agenttest.Start(t)
	c := a.Connect("postgres")
	awaitFeed(t, a)
	var null *int64
	if err := c.QueryRow(ctx, `SELECT tashkent.durable_version()`).Scan(&null); err != nil || null != nil {
		t.Fatalf("durable_version() before the agent said anything: %v, %v; want NULL", null, err)
	}
	a.SetDurable(42)
	awaitDurableVersion(t, c, 42)
	a.SetDurable(40)
	time.Sleep(300 * time.Millisecond)
	var got int64
	if err := c.QueryRow(ctx, `SELECT tashkent.durable_version()`).Scan(&got); err != nil || got != 42 {
		t.Fatalf("durable_version() after the agent said 40: %d, %v; want 42, the highest heard", got, err)
	}
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
// brings the version (its latch is set: no polling), asks again, and
// returns; after its timeout it fails with TK004 and a hint; a cancel and
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
	// without a wake-up, the wait would ask again only after a second
	if took := time.Since(advanced); took > 700*time.Millisecond {
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
	go serveOneFeed(t, ln, 7)
	awaitDurableVersion(t, c, 7)
	if log := readLog(t, srv.LogPath()); !strings.Contains(log, "tashkent durability feed: following the agent at") {
		t.Fatalf("the server log does not say the feed reached the agent:\n%s", log)
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
