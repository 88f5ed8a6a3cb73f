package wire_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

func TestFramesRoundTrip(t *testing.T) {
	for _, m := range []wire.Message{
		wire.Hello{Protocol: wire.ProtocolVersion, PID: 4242, Role: wire.RoleApplier, Database: "postgres"},
		wire.Certify{StartVersion: 7, Writeset: []byte{0x0a, 0x02, 0x01, 0x02}},
		wire.Fragment{Writeset: []byte{0x0a, 0x03, 0x0a, 0x01, 't'}},
		wire.CertifyStreamed{StartVersion: 1<<40 + 3, Fragments: 257, Bytes: 1<<30 + 5, Certified: []byte{0x0a, 0x02, 0x10, 0x09}},
		wire.Abandon{Version: 1 << 40},
		wire.Welcome{Accepted: true, Generation: 3, Text: "ok"},
		wire.Decision{Kind: wire.Abort, Version: 12, AbortReason: 1, Detail: "row (public.t, [1]) written by version 12"},
		wire.Hold{Version: 1 << 33, HoldMillis: 10000},
		wire.Release{},
		wire.Held{Held: false, Version: 9, Text: "another session holds this replica's commits"},
	} {
		typ, p, err := wire.ReadFrame(bufio.NewReader(bytes.NewReader(wire.Encode(m))), 1<<20)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		got, err := wire.Decode(typ, p)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("got %+v, want %+v", got, m)
		}
	}
}

func TestMalformedFramesAreErrors(t *testing.T) {
	for name, frame := range map[string][]byte{
		"empty":                  {0, 0, 0, 0},
		"too long":               {0x7f, 0, 0, 0, 'A'},
		"short abandon":          {0, 0, 0, 3, 'A', 1, 2},
		"short certify streamed": {0, 0, 0, 13, 'W', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2},
		"unknown type":           {0, 0, 0, 1, 'Z'},
		"trailing":               append(wire.Encode(wire.Abandon{Version: 1})[:4:4], append([]byte{'A'}, make([]byte, 9)...)...),
	} {
		if name == "trailing" {
			frame[3] = 10
		}
		typ, p, err := wire.ReadFrame(bufio.NewReader(bytes.NewReader(frame)), 1<<20)
		if err == nil {
			_, err = wire.Decode(typ, p)
		}
		if !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

// awaitWaitingFor waits until backend pid waits in the commit order for
// version v.
func awaitWaitingFor(t *testing.T, c *pgx.Conn, pid int32, v int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int64
		err := c.QueryRow(context.Background(), `SELECT waiting_for FROM tashkent.backends() WHERE pid = $1`, pid).Scan(&waiting)
		if err == nil && waiting == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d does not wait for version %d: waits for %d, %v", pid, v, waiting, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func committed(t *testing.T, c *pgx.Conn) int64 {
	t.Helper()
	var v int64
	if err := c.QueryRow(context.Background(), `SELECT tashkent.committed_version()`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The backend's hello reaches the agent and the agent's welcome is read
// back: the applier registers only from the connection the agent names,
// its versions commit in order, and the server keeps them across a
// restart (the replication origin's progress).
func TestApplierRegistersAndCommitsVersionsInOrder(t *testing.T) {
	ctx := context.Background()
	agent := agenttest.Start(t)
	srv := agent.Server

	apply := agent.Connect("postgres")
	other := agent.Connect("postgres")
	if _, err := other.Exec(ctx, `SELECT tashkent.register_applier()`); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a session the agent does not know registered as its applier: %v", err)
	}
	agent.RegisterApplier(apply)
	if _, err := other.Exec(ctx, `BEGIN; SELECT tashkent.apply_versions(1, 1)`); pgcode.Of(err) != pgcode.NotApplier {
		t.Fatalf("apply_versions outside the applier: %v, want TK003", err)
	}
	other.Exec(ctx, `ROLLBACK`)
	if _, err := apply.Exec(ctx, `CREATE TABLE t (k int PRIMARY KEY, v int)`); err != nil {
		t.Fatal(err)
	}

	// Version 3 waits for 2, which is not committed: its COMMIT blocks
	// until cancelled (the applier's wait can be). The cancel is sent as
	// the agent sends it: a context that ends only closes pgx's socket,
	// and the backend would go on waiting, and commit version 3 later.
	late := agent.Connect("postgres")
	agent.RegisterApplier(late)
	done := make(chan error, 1)
	go func() {
		_, err := late.Exec(ctx, `BEGIN; SELECT tashkent.apply_versions(3, 3); INSERT INTO t VALUES (3, 3); COMMIT`)
		done <- err
	}()
	awaitWaitingFor(t, other, int32(late.PgConn().PID()), 2)
	if _, err := other.Exec(ctx, `SELECT pg_cancel_backend($1)`, int32(late.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	if err := <-done; pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("version 3 before versions 1 and 2: %v, want a cancelled wait (57014)", err)
	}
	if v := committed(t, other); v != 0 {
		t.Fatalf("committed version %d, want 0", v)
	}
	agent.RegisterApplier(apply)
	for _, sql := range []string{
		`BEGIN; SELECT tashkent.apply_versions(1, 2); INSERT INTO t VALUES (1, 1), (2, 2); COMMIT`,
		`BEGIN; SELECT tashkent.apply_versions(3, 3); INSERT INTO t VALUES (3, 3); COMMIT`,
	} {
		if _, err := apply.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if v := committed(t, other); v != 3 {
		t.Fatalf("committed version %d, want 3", v)
	}
	if _, err := apply.Exec(ctx, `BEGIN; SELECT tashkent.apply_versions(2, 4)`); pgcode.Of(err) != pgcode.AlreadyCommitted {
		t.Fatalf("re-applying version 2: %v, want TK002", err)
	}
	apply.Exec(ctx, `ROLLBACK`)

	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := srv.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(sctx); err != nil {
		t.Fatal(err)
	}
	after := agent.Connect("postgres")
	if v := committed(t, after); v != 3 {
		t.Fatalf("after a restart the replica holds version %d, want 3", v)
	}
}

// A backend whose wait for the agent's welcome is cancelled leaves the
// welcome unread in its socket. Its next certification must not read that
// welcome as its decision: the backend drops the connection and says
// hello again on a new one, and the transaction commits with the decision
// made for it. (statement_timeout ends before COMMIT: the cancel comes
// from another session, as a client's cancel request does.)
func TestACancelledHelloLeavesNoAnswerForTheNextRequest(t *testing.T) {
	ctx := context.Background()
	agent := agenttest.Start(t)
	admin := agent.Connect("postgres")
	if _, err := admin.Exec(ctx, `CREATE TABLE t (k int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	agent.SetWelcomeDelay(2 * time.Second)
	s := agent.Connect("postgres")
	pid := s.PgConn().PID()
	inserted := make(chan error, 1)
	go func() {
		_, err := s.Exec(ctx, `INSERT INTO t VALUES (1)`)
		inserted <- err
	}()
	awaitExtensionWait(t, admin, pid)
	if _, err := admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, int32(pid)); err != nil {
		t.Fatal(err)
	}
	if err := <-inserted; pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("a commit cancelled while it waits for the welcome: %v, want 57014", err)
	}
	time.Sleep(2500 * time.Millisecond) // the late welcome reaches the socket
	agent.SetWelcomeDelay(0)
	if _, err := s.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatalf("the next commit of the session: %v", err)
	}
	var keys string
	if err := s.QueryRow(ctx, `SELECT string_agg(k::text, ',' ORDER BY k) FROM t`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != "2" {
		t.Fatalf("table t holds keys %q, want 2 (the cancelled insert rolled back)", keys)
	}
	reqs := agent.Requests()
	if len(reqs) == 0 {
		t.Fatal("the stand-in received no certification")
	}
	if last := reqs[len(reqs)-1]; last.PID != int32(pid) || last.Decision.Kind != wire.Commit {
		t.Fatalf("the last certification was %+v, want the session's, committed", last)
	}
}

// awaitExtensionWait waits until backend pid waits on an extension's wait
// event (the agent's socket).
func awaitExtensionWait(t *testing.T, c *pgx.Conn, pid uint32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var n int
		if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1 AND wait_event_type = 'Extension'`, int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
	}
	t.Fatalf("backend %d did not wait for the agent within 10s", pid)
}
