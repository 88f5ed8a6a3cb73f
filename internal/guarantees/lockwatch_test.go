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

// Remote writesets take priority over local transactions (Tashkent §8.2,
// eager pre-certification; Postgres-R(SI) §4.2): a local transaction whose
// row lock blocks a remote writeset would fail certification anyway, so
// the agent's lock watch dooms it (40001) instead of letting the replica
// wait, and a certified one in an earlier version's way gives way (08007).
func TestLockWatch(t *testing.T) {
	c := start(t, 2, clustertest.Options{Agent: func(_ int, cfg *agent.Config) { cfg.BlockerGrace = readerGrace }})
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE audit (id int PRIMARY KEY, note text NOT NULL)`)
	execSQL(t, setup, `INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 10) AS g`)
	c.converge()
	t.Run("a remote writeset blocked by an idle local transaction dooms it", func(t *testing.T) { idleBlockerIsDoomed(t, c, 1) })
	t.Run("a remote writeset blocked by a busy local transaction cancels it with 40001", func(t *testing.T) { busyBlockerIsCancelled(t, c, 2) })
	t.Run("a certified transaction holding a lock an earlier version needs gives way", func(t *testing.T) { certifiedTransactionGivesWay(t, c, 3, 4) })
	t.Run("a reader blocking a remote TRUNCATE is cancelled, then terminated", func(t *testing.T) { readersInTheWayAreEnded(t, c) })
	c.converge()
}

// readerGrace is the lock watch's --blocker-grace in these tests: long
// enough for certifiedTransactionGivesWay to hold replica 1's applier up
// with a reader's lock on a busy machine.
const readerGrace = 3 * time.Second

// A reader (no transaction id, nothing to certify) whose lock keeps a
// remote TRUNCATE waiting holds up every later commit of the replica: a
// running query is cancelled after the grace, and a reader idle in its
// transaction (which a cancel does not end) is terminated after twice it.
func readersInTheWayAreEnded(t *testing.T, c *cluster) {
	ctx := context.Background()
	execSQL(t, c.Connect(0), `CREATE TABLE readings (id int PRIMARY KEY)`)
	execSQL(t, c.Connect(0), `INSERT INTO readings VALUES (1)`)
	c.converge()

	// The reader certified a write before: it has a slot in the commit
	// order (tashkent.backends(), state idle), and no transaction id now.
	busy := c.Connect(0)
	execSQL(t, busy, `INSERT INTO readings VALUES (10)`)
	slow := make(chan error, 1)
	go func() {
		_, err := busy.Exec(ctx, `SELECT pg_sleep(60) FROM readings`)
		slow <- err
	}()
	awaitBackendWaiting(t, c, 0, busy.PgConn().PID(), "PgSleep")
	execSQL(t, c.Connect(1), `TRUNCATE readings`)
	c.AwaitCommitted(0, c.Durable(), readerGrace+10*time.Second)
	if err := <-slow; pgcode.Of(err) != pgcode.QueryCanceled {
		t.Fatalf("the long query in the TRUNCATE's way: %v, want cancelled (57014)", err)
	}

	idle := beginWith(t, c.Connect(0), `SELECT count(*) FROM readings`)
	pid := idle.Conn().PgConn().PID()
	execSQL(t, c.Connect(1), `INSERT INTO readings VALUES (2)`)
	execSQL(t, c.Connect(1), `TRUNCATE readings`)
	c.AwaitCommitted(0, c.Durable(), 2*readerGrace+10*time.Second)
	awaitBackendGone(t, c, 0, pid)
	if n := c.countOn(0, `SELECT count(*) FROM readings`); n != 0 {
		t.Fatalf("replica 1 holds %d readings after the TRUNCATE", n)
	}
}

// awaitBackendWaiting waits until backend pid of replica i waits on the
// wait event event.
func awaitBackendWaiting(t *testing.T, c *cluster, i int, pid uint32, event string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.countOn(i, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = $2`, int(pid), event) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backend %d of replica %d did not wait on %s within 10s", pid, i+1, event)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdRowLock opens a transaction on replica 1 that updated the row and
// holds its lock.
func holdRowLock(t *testing.T, c *cluster, id int) pgx.Tx {
	t.Helper()
	return beginWith(t, c.Connect(0), `UPDATE accounts SET balance = balance - 10 WHERE id = $1`, id)
}

// A local transaction idle in its block holds a row lock; a transaction on
// another replica updates the row and commits. Its apply does not wait
// for the local one: that one is doomed, and ended if it stays idle
// (a transaction idle in its block cannot be cancelled); its next
// statement fails with 40001.
func idleBlockerIsDoomed(t *testing.T, c *cluster, id int) {
	tx := holdRowLock(t, c, id)
	execSQL(t, c.Connect(1), `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, id)
	c.AwaitCommitted(0, c.Durable(), 5*time.Second)
	_, err := tx.Exec(context.Background(), `SELECT 1`)
	if e := pgError(err); e == nil || e.Code != pgcode.SerializationFailure || !strings.Contains(e.Message, "another replica") {
		t.Fatalf("the doomed transaction's next statement: %v, want 40001", err)
	}
	tx.Rollback(context.Background())
	if b := c.countOn(0, `SELECT balance FROM accounts WHERE id = $1`, id); b != 101 {
		t.Fatalf("balance %d, want 101 (the remote update applied, the local one not)", b)
	}
}

// The same while the local transaction runs a statement: the statement is
// cancelled, and the client gets 40001, not 57014.
func busyBlockerIsCancelled(t *testing.T, c *cluster, id int) {
	tx := holdRowLock(t, c, id)
	slow := make(chan error, 1)
	go func() {
		_, err := tx.Exec(context.Background(), `SELECT pg_sleep(20)`)
		slow <- err
	}()
	time.Sleep(100 * time.Millisecond)
	execSQL(t, c.Connect(1), `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, id)
	c.AwaitCommitted(0, c.Durable(), 5*time.Second)
	select {
	case err := <-slow:
		if e := pgError(err); e == nil || e.Code != pgcode.SerializationFailure || e.Severity != "ERROR" {
			t.Fatalf("the busy local transaction got %v, want ERROR 40001", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the busy local transaction was not cancelled")
	}
	tx.Rollback(context.Background())
}

// A certified local transaction can hold a row lock an earlier version
// needs, when certification did not see the conflict: a SELECT ... FOR
// UPDATE of a row it does not write (a foreign-key check takes the same
// kind of lock). It waits for its turn, behind the earlier version; the
// earlier version waits for its lock. It gives way: its session ends with
// FATAL 08007 saying that the transaction committed, and the replica
// applies it in its place (Tashkent §8.1 soft recovery).
//
// To get the local transaction certified before the earlier version is
// applied here, a session holds up replica 1's applier with a table lock
// (a transaction without a transaction id, which the lock watch does not
// doom; it ends it only after the grace) until the local transaction
// waits for its turn.
func certifiedTransactionGivesWay(t *testing.T, c *cluster, locked, other int) {
	ctx := context.Background()
	hold := beginWith(t, c.Connect(0), `LOCK TABLE accounts IN SHARE MODE`)
	r2 := c.Connect(1)
	execSQL(t, r2, `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, other)

	local := c.Connect(0)
	tx := beginWith(t, local, `SELECT FROM accounts WHERE id = $1 FOR UPDATE`, locked)
	if _, err := tx.Exec(ctx, `INSERT INTO audit VALUES (1, 'checked an account')`); err != nil {
		t.Fatal(err)
	}
	// A version before the local transaction's updates the locked row.
	execSQL(t, r2, `UPDATE accounts SET balance = balance + 10 WHERE id = $1`, locked)

	committed := make(chan error, 1)
	go func() { committed <- tx.Commit(ctx) }()
	awaitBackendState(t, c, 0, local.PgConn().PID(), "holding", 10*time.Second)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-committed:
		e := pgError(err)
		if e == nil || e.Code != pgcode.TransactionResolutionUnknown || e.Severity != "FATAL" || !strings.Contains(e.Message, "committed") || !strings.Contains(e.Hint, "Do not retry") {
			t.Fatalf("COMMIT of the certified transaction that gave way: %v, want FATAL 08007 saying it committed", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("COMMIT did not return: the certified transaction and the earlier version wait for each other")
	}
	c.converge()
	for i := range 2 {
		got := c.textOn(i, `SELECT (SELECT balance FROM accounts WHERE id = $1) || ' ' || (SELECT balance FROM accounts WHERE id = $2)
			|| ' ' || (SELECT count(*) FROM audit)`, locked, other)
		if got != "110 101 1" {
			t.Errorf("replica %d holds balances and audit rows %q, want 110 101 1", i+1, got)
		}
	}
}

// awaitBackendState waits until backend pid of replica i is in state in
// tashkent.backends().
func awaitBackendState(t *testing.T, c *cluster, i int, pid uint32, state string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if c.countOn(i, `SELECT count(*) FROM tashkent.backends() WHERE pid = $1 AND state = $2`, int(pid), state) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d of replica %d is not %s within %v: %s", pid, i+1, state, limit,
				c.textOn(i, `SELECT string_agg(b::text, ' ') FROM tashkent.backends() AS b`))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
