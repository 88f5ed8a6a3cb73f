package guarantees_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Writes and DDL made on one replica reach every other, in both
// durability placements: GSI, a replica sees another's writes once it
// holds their version.
func TestWritesOnOneReplicaReachTheOthers(t *testing.T) {
	for _, mode := range []agent.Mode{agent.ModeMW, agent.ModeBase} {
		t.Run(string(mode), func(t *testing.T) {
			c := start(t, 3, clustertest.Options{Mode: mode})
			a, b := c.Connect(0), c.Connect(1)
			execSQL(t, a, `CREATE TABLE kv (k int PRIMARY KEY, v text)`)
			execSQL(t, a, `INSERT INTO kv VALUES (1, 'one'), (2, 'two')`)
			c.converge()
			ctx := context.Background()
			tx := begin(t, b)
			for _, sql := range []string{`UPDATE kv SET v = 'uno' WHERE k = 1`, `INSERT INTO kv VALUES (3, 'three')`} {
				if _, err := tx.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if v := c.converge(); v < 3 {
				t.Fatalf("certifier version %d after three writing transactions", v)
			}
			if got := c.textOn(2, `SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM kv`); got != "1=uno,2=two,3=three" {
				t.Fatalf("replica 3 reads %q", got)
			}
		})
	}
}

// conflictDetail is the DETAIL of a certification abort: the row and the
// version the transaction lost to. A transaction that the lock watch
// doomed before it was certified (it held the row's lock when the other
// replica's version arrived) is told the version only.
var (
	certifiedDetail = regexp.MustCompile(`write-write conflict on table public\.counter row \[1\] with the transaction committed at version (\d+)`)
	doomedDetail    = regexp.MustCompile(`^Version (\d+), committed on another replica, writes a row this transaction locked\.$`)
)

// Tashkent's lost update across replicas: two replicas read one row from
// the same snapshot and write it plus one; exactly one commits, the other
// gets 40001 with a DETAIL that names the version it lost to (and the row,
// when certification refused it), and no increment is lost.
func TestConcurrentUpdatesOfOneRowOnTwoReplicasCommitExactlyOne(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, setup, `INSERT INTO counter VALUES (1, 0)`)
	c.converge()
	ctx := context.Background()
	conns := []*pgx.Conn{c.Connect(0), c.Connect(1)}
	certified, doomed := 0, 0
	for round := range 20 {
		txs := []pgx.Tx{begin(t, conns[0]), begin(t, conns[1])}
		var ns [2]int
		for i, tx := range txs {
			if err := tx.QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&ns[i]); err != nil {
				t.Fatal(err)
			}
		}
		if ns[0] != ns[1] {
			t.Fatalf("round %d: the replicas' snapshots disagree: %d and %d", round, ns[0], ns[1])
		}
		for i, tx := range txs {
			if _, err := tx.Exec(ctx, `UPDATE counter SET n = $1 WHERE id = 1`, ns[i]+1); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		errs := commitConcurrently(t, txs...)
		winner := exactlyOneCommitted(t, round, errs)
		loser := pgError(errs[1-winner])
		if !strings.Contains(loser.Message, "another replica") {
			t.Fatalf("round %d: the abort does not say why: %v", round, loser)
		}
		switch {
		case certifiedDetail.MatchString(loser.Detail):
			certified++
		case doomedDetail.MatchString(loser.Detail):
			doomed++
		default:
			t.Fatalf("round %d: the abort's DETAIL %q names neither the row and version nor the version", round, loser.Detail)
		}
		c.converge()
		if n := c.countOn(round%2, `SELECT n FROM counter WHERE id = 1`); n != round+1 {
			t.Fatalf("round %d: counter is %d, want %d (an update was lost)", round, n, round+1)
		}
	}
	t.Logf("losers refused by certification: %d; doomed by the lock watch first: %d", certified, doomed)
}

// Increments of one counter by clients on three replicas, each retrying
// on 40001: the counter ends at the number of successful increments (no
// update is lost), on every replica.
func TestLostUpdateIsPreventedAcrossReplicas(t *testing.T) {
	c := start(t, 3, clustertest.Options{})
	execSQL(t, c.Connect(0), `CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, c.Connect(0), `INSERT INTO counter VALUES (1, 0)`)
	c.converge()
	const perClient = 15
	ctx := context.Background()
	errs := make(chan error, 3)
	retries := make(chan int, 3)
	for r := range 3 {
		conn := c.Connect(r)
		go func() {
			retried := 0
			for done := 0; done < perClient; {
				err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
					var n int
					if err := tx.QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `UPDATE counter SET n = $1 WHERE id = 1`, n+1)
					return err
				})
				switch {
				case err == nil:
					done++
				case pgcode.Of(err) == pgcode.SerializationFailure:
					retried++
				default:
					errs <- fmt.Errorf("replica %d: %w", r+1, err)
					return
				}
			}
			retries <- retried
			errs <- nil
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	retried := <-retries + <-retries + <-retries
	c.converge()
	for i := range 3 {
		if n := c.countOn(i, `SELECT n FROM counter WHERE id = 1`); n != 3*perClient {
			t.Fatalf("replica %d: counter %d after %d increments: an update was lost", i+1, n, 3*perClient)
		}
	}
	t.Logf("%d increments, %d retried after 40001", 3*perClient, retried)
}

// SELECT ... FOR UPDATE then an update of the locked row, on two replicas
// at once: the row locks are each replica's own, but the writes are
// certified, so exactly one commits and the other gets 40001, as two
// REPEATABLE READ sessions of one PostgreSQL would.
func TestSelectForUpdateThenWriteOnTwoReplicasCommitsOnce(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	execSQL(t, c.Connect(0), `CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL)`)
	execSQL(t, c.Connect(0), `INSERT INTO acct VALUES (1, 100)`)
	c.converge()
	ctx := context.Background()
	txs := make([]pgx.Tx, 2)
	for r := range 2 {
		tx := begin(t, c.Connect(r))
		var bal int
		if err := tx.QueryRow(ctx, `SELECT balance FROM acct WHERE id = 1 FOR UPDATE`).Scan(&bal); err != nil {
			t.Fatalf("replica %d: %v", r+1, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE acct SET balance = $1 WHERE id = 1`, bal-10); err != nil {
			t.Fatal(err)
		}
		txs[r] = tx
	}
	exactlyOneCommitted(t, 0, commitConcurrently(t, txs...))
	c.converge()
	if bal := c.countOn(1, `SELECT balance FROM acct WHERE id = 1`); bal != 90 {
		t.Fatalf("balance %d, want 90", bal)
	}
}
