package guarantees_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// readYourWritesRounds is how many write-then-read rounds each way runs.
const readYourWritesRounds = 200

// startKV starts two replicas with table kv holding key 1.
func startKV(t *testing.T) *cluster {
	t.Helper()
	c := start(t, 2, clustertest.Options{})
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE kv (k int PRIMARY KEY, v int NOT NULL)`)
	execSQL(t, setup, `INSERT INTO kv VALUES (1, 0)`)
	c.converge()
	return c
}

// reader reads key 1's value on a replica, one way.
type reader struct {
	name string
	conn *pgx.Conn
	read func(ctx context.Context, c *pgx.Conn) (int, error)
}

func readValue(mode pgx.QueryExecMode) func(ctx context.Context, c *pgx.Conn) (int, error) {
	return func(ctx context.Context, c *pgx.Conn) (int, error) {
		var v int
		err := c.QueryRow(ctx, `SELECT v FROM kv WHERE k = $1`, mode, 1).Scan(&v)
		return v, err
	}
}

// readInTransaction reads in an explicit REPEATABLE READ transaction
// (BEGIN first, where sync_wait waits before any snapshot).
func readInTransaction(ctx context.Context, c *pgx.Conn) (int, error) {
	var v int
	err := pgx.BeginTxFunc(ctx, c, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT v FROM kv WHERE k = $1`, 1).Scan(&v)
	})
	return v, err
}

// A client writes on replica 1 and, as soon as COMMIT returns, reads on
// replica 2. Without help the read may miss the write (the count is
// logged; it may be 0 on a quiet machine). With
// tashkent.wait_for_version(last_commit_version()) first, and with
// tashkent.sync_wait on (under READ COMMITTED and REPEATABLE READ, in the
// simple and the extended protocol, prepared statements included, and in
// an explicit transaction), every read sees it.
func TestReadYourWritesAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	c := startKV(t)
	writer := c.Connect(0)

	round := 0
	write := func() {
		t.Helper()
		round++
		if _, err := writer.Exec(ctx, `UPDATE kv SET v = $1 WHERE k = 1`, round); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	isolation := func(level string) func(*pgx.ConnConfig) {
		return func(cfg *pgx.ConnConfig) { cfg.RuntimeParams["default_transaction_isolation"] = level }
	}

	plain := c.connectAs(1, "postgres", isolation("repeatable read"))
	missed := 0
	for range readYourWritesRounds {
		write()
		v, err := readValue(pgx.QueryExecModeCacheStatement)(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		if v != round {
			missed++
		}
	}
	t.Logf("without waiting, %d of %d immediate reads on the other replica missed the write", missed, readYourWritesRounds)

	waiter := c.connectAs(1, "postgres", isolation("repeatable read"))
	for range readYourWritesRounds {
		write()
		var version int64
		if err := writer.QueryRow(ctx, `SELECT tashkent.last_commit_version()`).Scan(&version); err != nil {
			t.Fatal(err)
		}
		if _, err := waiter.Exec(ctx, `SELECT tashkent.wait_for_version($1, 10000)`, version); err != nil {
			t.Fatalf("round %d: waiting for version %d: %v", round, version, err)
		}
		if v, err := readValue(pgx.QueryExecModeCacheStatement)(ctx, waiter); err != nil || v != round {
			t.Fatalf("round %d: after waiting for version %d the other replica reads %d, %v", round, version, v, err)
		}
	}

	var readers []reader
	for _, iso := range []string{"read committed", "repeatable read"} {
		for _, m := range []struct {
			name string
			mode pgx.QueryExecMode
		}{{"simple", pgx.QueryExecModeSimpleProtocol}, {"extended", pgx.QueryExecModeExec}, {"prepared", pgx.QueryExecModeCacheStatement}} {
			conn := c.connectAs(1, "postgres", isolation(iso))
			execSQL(t, conn, `SET tashkent.sync_wait = on`)
			readers = append(readers, reader{name: iso + ", " + m.name, conn: conn, read: readValue(m.mode)})
		}
	}
	tx := c.connectAs(1, "postgres", nil)
	execSQL(t, tx, `SET tashkent.sync_wait = on`)
	readers = append(readers, reader{name: "BEGIN ISOLATION LEVEL REPEATABLE READ", conn: tx, read: readInTransaction})
	for i := range readYourWritesRounds {
		write()
		r := readers[i%len(readers)]
		if v, err := r.read(ctx, r.conn); err != nil || v != round {
			t.Fatalf("round %d (%s): with tashkent.sync_wait the other replica reads %d, %v", round, r.name, v, err)
		}
	}
}

// With tashkent.sync_wait on, a transaction on a replica whose agent is
// stopped, or whose certifier is gone, fails with 57P03 within
// tashkent.sync_wait_timeout, never hangs; with it off, reads go on.
func TestSyncWaitFailsClearlyWithoutAgentOrCertifier(t *testing.T) {
	ctx := context.Background()
	c := startKV(t)

	conn := c.Connect(1)
	execSQL(t, conn, `SET tashkent.sync_wait = on`)
	execSQL(t, conn, `SET tashkent.sync_wait_timeout = '2s'`)
	if _, err := readValue(pgx.QueryExecModeCacheStatement)(ctx, conn); err != nil {
		t.Fatalf("a read with tashkent.sync_wait on a serving replica: %v", err)
	}

	c.StopAgent(1)
	began := time.Now()
	_, err := readValue(pgx.QueryExecModeCacheStatement)(ctx, conn)
	if pe := pgError(err); pe == nil || pe.Code != pgcode.CannotConnectNow || !strings.Contains(pe.Message, "agent is not available") || !strings.Contains(pe.Hint, "sync_wait = off") {
		t.Fatalf("a read with tashkent.sync_wait while the agent is stopped: %v, want 57P03 with a hint", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the read failed after %v, beyond tashkent.sync_wait_timeout (2s)", took)
	}
	execSQL(t, conn, `SET tashkent.sync_wait = off`)
	if _, err := readValue(pgx.QueryExecModeCacheStatement)(ctx, conn); err != nil {
		t.Fatalf("a read with tashkent.sync_wait off while the agent is stopped: %v", err)
	}

	other := c.Connect(0)
	execSQL(t, other, `SET tashkent.sync_wait = on`)
	execSQL(t, other, `SET tashkent.sync_wait_timeout = '2s'`)
	c.Certifier.Close()
	began = time.Now()
	_, err = readValue(pgx.QueryExecModeCacheStatement)(ctx, other)
	if pgcode.Of(err) != pgcode.CannotConnectNow {
		t.Fatalf("a read with tashkent.sync_wait while the certifier is gone: %v, want 57P03", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the read failed after %v, beyond tashkent.sync_wait_timeout (2s)", took)
	}
	t.Logf("with the certifier gone: %v", err)
}

// A statement that waits under tashkent.sync_wait locked its tables when
// it was analyzed, before the wait. If a version it waits for truncates
// one of them, the applier waits for that lock while the statement waits
// for the applier: the lock watch ends the wait at once with 40001 (a
// retry starts after the version), instead of cancelling it as a reader
// after the grace (57014, which clients do not retry).
func TestASyncWaitThatHoldsALockTheApplyNeedsGivesWay(t *testing.T) {
	const grace = 4 * time.Second
	c := start(t, 2, clustertest.Options{Agent: func(_ int, cfg *agent.Config) { cfg.BlockerGrace = grace }})
	ctx := context.Background()
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE held (id int PRIMARY KEY, v int)`)
	execSQL(t, setup, `CREATE TABLE truncated (id int PRIMARY KEY)`)
	execSQL(t, setup, `INSERT INTO held VALUES (1, 0); INSERT INTO truncated VALUES (1)`)
	c.converge()

	// Replica 2's applier is held up by a local transaction idle in its
	// block (doomed, then terminated after the grace) ...
	holder := beginWith(t, c.Connect(1), `UPDATE held SET v = v + 1 WHERE id = 1`)
	defer holder.Rollback(ctx)
	execSQL(t, c.Connect(0), `UPDATE held SET v = 10 WHERE id = 1`)
	// ... so the TRUNCATE after it is not applied there yet,
	execSQL(t, c.Connect(0), `TRUNCATE truncated`)
	// and a reader that waits for it takes its lock on the table first.
	reader := c.Connect(1)
	execSQL(t, reader, `SET tashkent.sync_wait = on`)
	began := time.Now()
	var n int
	err := reader.QueryRow(ctx, `SELECT count(*) FROM truncated`).Scan(&n)
	took := time.Since(began)
	if pgcode.Of(err) != pgcode.SerializationFailure || !strings.Contains(err.Error(), "holds a lock that version") {
		t.Fatalf("the waiting reader in the TRUNCATE's way: %v (count %d), want 40001 saying its wait holds a lock", err, n)
	}
	if took > grace+3*time.Second {
		t.Errorf("the reader gave way after %v, want soon after the holder's grace (%v)", took, grace)
	}
	if err := reader.QueryRow(ctx, `SELECT count(*) FROM truncated`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the retry: %v, %d rows, want 0 rows", err, n)
	}
	c.converge()
}
