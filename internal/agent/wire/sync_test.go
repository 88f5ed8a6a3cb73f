package wire_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// The Sync frames' bytes, as channel.c writes and reads them.
func TestSyncFramesAreLaidOutAsTheBackendExpects(t *testing.T) {
	if got, want := wire.Encode(wire.Sync{TimeoutMillis: 0x01020304}), []byte{0, 0, 0, 5, 'S', 1, 2, 3, 4}; !bytes.Equal(got, want) {
		t.Errorf("Sync: % x, want % x", got, want)
	}
	got := wire.Encode(wire.Synced{Known: true, Version: 0x0102030405060708, Text: "ab"})
	want := []byte{0, 0, 0, 14, 's', 1, 1, 2, 3, 4, 5, 6, 7, 8, 0, 2, 'a', 'b'}
	if !bytes.Equal(got, want) {
		t.Errorf("Synced: % x, want % x", got, want)
	}
	for _, m := range []wire.Message{wire.Sync{TimeoutMillis: 30000}, wire.Synced{Text: "the certifier did not answer"}} {
		typ, p, err := wire.ReadFrame(bufio.NewReader(bytes.NewReader(wire.Encode(m))), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := wire.Decode(typ, p); err != nil || back != m {
			t.Errorf("%T round trip: %+v, %v", m, back, err)
		}
	}
	for name, frame := range map[string][]byte{
		"short sync":   {0, 0, 0, 3, 'S', 1, 2},
		"short synced": {0, 0, 0, 12, 's', 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 5},
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

// syncServer is a server with the stand-in agent, a table, and an applier
// that commits versions as the real agent's would.
type syncServer struct {
	agent *agenttest.Agent
	admin *pgx.Conn
	apply *pgx.Conn
}

func startSyncServer(t *testing.T) *syncServer {
	t.Helper()
	s := &syncServer{agent: agenttest.Start(t)}
	s.admin = s.agent.Connect("postgres")
	s.apply = s.agent.Connect("postgres")
	s.agent.RegisterApplier(s.apply)
	if _, err := s.apply.Exec(context.Background(), `CREATE TABLE t (k int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return s
}

// applyRow commits version v on the replica, inserting row k, as a remote
// version.
func (s *syncServer) applyRow(t *testing.T, v, k int64) {
	t.Helper()
	sql := fmt.Sprintf(`BEGIN; SELECT tashkent.apply_versions(%d, %d); INSERT INTO t VALUES (%d); COMMIT`, v, v, k)
	if _, err := s.apply.Exec(context.Background(), sql); err != nil {
		t.Fatalf("applying version %d: %v", v, err)
	}
}

func connectWith(t *testing.T, s *syncServer, settings ...string) *pgx.Conn {
	t.Helper()
	c := s.agent.Connect("postgres")
	for _, set := range settings {
		if _, err := c.Exec(context.Background(), set); err != nil {
			t.Fatalf("%s: %v", set, err)
		}
	}
	return c
}

func pgError(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// With tashkent.sync_wait on, a transaction asks the agent once, before
// its first statement, and nothing is asked with it off.
func TestSyncWaitAsksTheAgentOncePerTransaction(t *testing.T) {
	ctx := context.Background()
	s := startSyncServer(t)
	off := connectWith(t, s)
	if _, err := off.Exec(ctx, `SELECT count(*) FROM t`); err != nil {
		t.Fatal(err)
	}
	if n := len(s.agent.Syncs()); n != 0 {
		t.Fatalf("a read with tashkent.sync_wait off asked the agent %d times", n)
	}
	on := connectWith(t, s, `SET tashkent.sync_wait = on`, `SET tashkent.sync_wait_timeout = '5s'`)
	for _, step := range []struct {
		sql   string
		syncs int
	}{
		{`SELECT count(*) FROM t`, 1},
		{`BEGIN; SELECT count(*) FROM t; SELECT 1; COMMIT`, 2},
		{`SHOW tashkent.sync_wait`, 2}, // reads no data: nothing to wait for
		{`BEGIN`, 3},
		{`SELECT count(*) FROM t`, 3},
		{`COMMIT`, 3},
		// a parallel worker runs with the leader's snapshot: it does not ask
		{`SET force_parallel_mode = on; SET parallel_setup_cost = 0; SELECT count(*) FROM t`, 4},
	} {
		if _, err := on.Exec(ctx, step.sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", step.sql, err)
		}
		if n := len(s.agent.Syncs()); n != step.syncs {
			t.Fatalf("after %q the agent was asked %d times, want %d", step.sql, n, step.syncs)
		}
	}
	if ms := s.agent.Syncs()[0].TimeoutMillis; ms == 0 || ms > 5000 {
		t.Fatalf("the sync allowed the agent %d ms, want at most tashkent.sync_wait_timeout (5000)", ms)
	}
}

// The wait ends when the replica commits the version the agent named, and
// the transaction that waited reads it: under READ COMMITTED and under
// REPEATABLE READ, whose snapshot PostgreSQL took before the wait (for
// parse analysis in the simple protocol and at Parse, or before the
// executor for a statement prepared earlier), in the simple and the
// extended protocol.
func TestSyncWaitReadsTheVersionItWaitedFor(t *testing.T) {
	ctx := context.Background()
	s := startSyncServer(t)
	v := int64(0)
	for _, iso := range []string{"read committed", "repeatable read"} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
			c := connectWith(t, s, `SET default_transaction_isolation = '`+iso+`'`)
			var before int64
			if err := c.QueryRow(ctx, `SELECT count(*) FROM t`, mode).Scan(&before); err != nil { // prepares it
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, `SET tashkent.sync_wait = on`); err != nil {
				t.Fatal(err)
			}
			v++
			target := uint64(v)
			s.agent.SetSync(func(wire.Sync) wire.Synced { return wire.Synced{Known: true, Version: target} })
			counted := make(chan error, 1)
			var after int64
			go func() { counted <- c.QueryRow(ctx, `SELECT count(*) FROM t`, mode).Scan(&after) }()
			awaitWaitingFor(t, s.admin, int32(c.PgConn().PID()), v)
			s.applyRow(t, v, v)
			if err := <-counted; err != nil {
				t.Fatalf("%s, %v: %v", iso, mode, err)
			}
			if after != before+1 {
				t.Errorf("%s, %v: the read that waited for version %d counted %d rows, want %d", iso, mode, v, after, before+1)
			}
		}
	}
}

// A wait that outlasts tashkent.sync_wait_timeout fails with TK004 naming
// the version and the replica's; an agent that cannot tell the version
// fails the statement with 57P03 and its reason; a cancel ends a wait.
func TestSyncWaitErrors(t *testing.T) {
	ctx := context.Background()
	s := startSyncServer(t)
	c := connectWith(t, s, `SET tashkent.sync_wait = on`, `SET tashkent.sync_wait_timeout = 200`)
	s.agent.SetSync(func(wire.Sync) wire.Synced { return wire.Synced{Known: true, Version: 7} })
	start := time.Now()
	_, err := c.Exec(ctx, `SELECT count(*) FROM t`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.VersionWaitTimedOut || !strings.Contains(pe.Message, "version 7") || !strings.Contains(pe.Message, "its version is 0") || pe.Hint == "" {
		t.Fatalf("a sync wait past its timeout: %v, want TK004 naming versions 7 and 0, with a hint", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a sync wait of 200 ms took %v", took)
	}

	s.agent.SetSync(func(wire.Sync) wire.Synced { return wire.Synced{Text: "the certifier did not answer: no leader"} })
	_, err = c.Exec(ctx, `SELECT count(*) FROM t`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.CannotConnectNow || !strings.Contains(pe.Message, "no leader") {
		t.Fatalf("a sync the agent cannot answer: %v, want 57P03 with its reason", err)
	}

	s.agent.SetSync(func(wire.Sync) wire.Synced { return wire.Synced{Known: true, Version: 7} })
	if _, err := c.Exec(ctx, `SET tashkent.sync_wait_timeout = '1min'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, `SELECT count(*) FROM t`)
		done <- err
	}()
	awaitWaitingFor(t, s.admin, int32(c.PgConn().PID()), 7)
	if _, err := s.admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, int32(c.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	if err := <-done; pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("a cancelled sync wait: %v, want 57014", err)
	}
	awaitWaitingFor(t, s.admin, int32(c.PgConn().PID()), 0)
}

// tashkent.wait_for_version returns the replica's version once it holds
// the version, fails with TK004 after its timeout, ends with a cancel or
// statement_timeout, and refuses at once (25001) inside a REPEATABLE READ
// transaction whose snapshot lacks the version.
func TestWaitForVersion(t *testing.T) {
	ctx := context.Background()
	s := startSyncServer(t)
	c := connectWith(t, s)
	var got int64
	if err := c.QueryRow(ctx, `SELECT tashkent.wait_for_version(0, 0)`).Scan(&got); err != nil || got != 0 {
		t.Fatalf("waiting for version 0: %d, %v", got, err)
	}
	var null *int64
	if err := c.QueryRow(ctx, `SELECT tashkent.wait_for_version(tashkent.last_commit_version())`).Scan(&null); err != nil || null != nil {
		t.Fatalf("waiting for the version of a session that wrote nothing: %v, %v; want NULL", null, err)
	}

	_, err := c.Exec(ctx, `SELECT tashkent.wait_for_version(2, 100)`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.VersionWaitTimedOut || !strings.Contains(pe.Message, "version 2 within 100 ms") || !strings.Contains(pe.Message, "its version is 0") {
		t.Fatalf("waiting 100 ms for a version not applied: %v, want TK004", err)
	}

	// A timeout well below the test's: the commit of version 2 must wake
	// the wait (turn.c), not the timeout end it.
	waited := make(chan error, 1)
	go func() { waited <- c.QueryRow(ctx, `SELECT tashkent.wait_for_version(2, 5000)`).Scan(&got) }()
	awaitWaitingFor(t, s.admin, int32(c.PgConn().PID()), 2)
	s.applyRow(t, 1, 1)
	s.applyRow(t, 2, 2)
	if err := <-waited; err != nil || got != 2 {
		t.Fatalf("waiting for version 2 while it is applied: %d, %v", got, err)
	}

	go func() {
		_, err := c.Exec(ctx, `SELECT tashkent.wait_for_version(3, 60000)`)
		waited <- err
	}()
	awaitWaitingFor(t, s.admin, int32(c.PgConn().PID()), 3)
	if _, err := s.admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, int32(c.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("a cancelled wait: %v, want 57014", err)
	}
	if _, err := c.Exec(ctx, `SET statement_timeout = 100; SELECT tashkent.wait_for_version(3, 60000)`, pgx.QueryExecModeSimpleProtocol); pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("a wait past statement_timeout: %v, want 57014", err)
	}
	if _, err := c.Exec(ctx, `RESET statement_timeout`); err != nil {
		t.Fatal(err)
	}

	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT tashkent.wait_for_version(2, 0)`).Scan(&got); err != nil || got != 2 {
		t.Fatalf("waiting for a version the REPEATABLE READ snapshot holds: %d, %v", got, err)
	}
	_, err = tx.Exec(ctx, `SELECT tashkent.wait_for_version(3, 60000)`)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.ActiveSQLTransaction || !strings.Contains(pe.Message, "version 3") || pe.Hint == "" {
		t.Fatalf("waiting inside REPEATABLE READ for a version its snapshot lacks: %v, want 25001 at once", err)
	}
	tx.Rollback(ctx)

	tx, err = c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	go func() { waited <- tx.QueryRow(ctx, `SELECT tashkent.wait_for_version(3, 60000)`).Scan(&got) }()
	awaitWaitingFor(t, s.admin, int32(c.PgConn().PID()), 3)
	s.applyRow(t, 3, 3)
	if err := <-waited; err != nil {
		t.Fatalf("waiting inside READ COMMITTED: %v", err)
	}
	var n int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM t WHERE k = 3`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the READ COMMITTED statement after the wait counts %d rows of version 3, %v; want 1", n, err)
	}
	tx.Commit(ctx)
}
