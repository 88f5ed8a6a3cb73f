package guarantees_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// Conflicts on unique indexes other than the primary key. Two transactions
// on two replicas that take the same value of a UNIQUE column in different
// rows write no common row, yet only one of them may commit: applying the
// other would fail on every replica. Capture certifies the values of
// unique indexes a transaction took or freed as keys of their own.

const uniqueRounds = 8

// wantOwners checks, on every replica, which rows hold email.
func wantOwners(t *testing.T, c *cluster, round int, email, want string) {
	t.Helper()
	for i := range c.DBs {
		got := c.textOn(i, `SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM users WHERE email = $1`, email)
		if got != want {
			t.Fatalf("round %d: replica %d: rows holding %q: %q, want %q", round, i+1, email, got, want)
		}
	}
}

// Two replicas insert different primary keys with the same email.
func TestUniqueValueInsertedOnTwoReplicasCommitsOnce(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	conns := []*pgx.Conn{c.Connect(0), c.Connect(1)}
	execSQL(t, conns[0], `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL UNIQUE)`)
	c.converge()
	for round := range uniqueRounds {
		email := fmt.Sprintf("user%d@example.com", round)
		ids := []int{2*round + 1, 2*round + 2}
		txs := []pgx.Tx{
			beginWith(t, conns[0], `INSERT INTO users VALUES ($1, $2)`, ids[0], email),
			beginWith(t, conns[1], `INSERT INTO users VALUES ($1, $2)`, ids[1], email),
		}
		winner := exactlyOneCommitted(t, round, commitConcurrently(t, txs...))
		c.converge()
		wantOwners(t, c, round, email, fmt.Sprint(ids[winner]))
	}
}

// One replica deletes the row holding a value while the other inserts a
// new row with it. The insert can succeed locally only on a replica that
// has not applied the row holding the value yet, so replica 2 is kept
// stale: the row is inserted on replica 1, deleted there in an open
// transaction, and inserted again on replica 2 in another. Exactly one of
// the two commits, and the replicas agree on who holds the value.
func TestUniqueValueDeletedAndInsertedOnTwoReplicasCommitsOnce(t *testing.T) {
	c := start(t, 2, clustertest.Options{Agent: staleSecond})
	ctx := context.Background()
	a, b := c.Connect(0), c.Connect(1)
	// The stale replica's own table: a transaction on it brings replica 2
	// up to date (its reply carries every earlier version).
	execSQL(t, b, `CREATE TABLE poke (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, b, `INSERT INTO poke VALUES (1, 0)`)
	c.awaitDurable(0)
	execSQL(t, a, `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL UNIQUE)`)
	catchUp := func() {
		t.Helper()
		retry40001(t, b, `UPDATE poke SET n = n + 1 WHERE id = 1`)
		c.converge()
	}
	catchUp()
	for round := range uniqueRounds {
		email := fmt.Sprintf("user%d@example.com", round)
		held, taken := 1000+round, 2000+round
		execSQL(t, a, `INSERT INTO users VALUES ($1, $2)`, held, email)
		var n int
		if err := b.QueryRow(ctx, `SELECT count(*) FROM users WHERE email = $1`, email).Scan(&n); err != nil || n != 0 {
			t.Fatalf("round %d: replica 2 already holds the value (%d rows, %v): it is not stale", round, n, err)
		}
		del := beginWith(t, a, `DELETE FROM users WHERE email = $1`, email)
		ins := beginWith(t, b, `INSERT INTO users VALUES ($1, $2)`, taken, email)
		winner := exactlyOneCommitted(t, round, commitConcurrently(t, del, ins))
		catchUp()
		want := ""
		if winner == 1 {
			want = fmt.Sprint(taken)
		}
		wantOwners(t, c, round, email, want)
	}
}

// One replica moves a value to an existing row (UPDATE) while the other
// inserts a row with it; the roles alternate between the replicas.
func TestUniqueValueMovedAndInsertedOnTwoReplicasCommitsOnce(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	conns := []*pgx.Conn{c.Connect(0), c.Connect(1)}
	execSQL(t, conns[0], `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL UNIQUE)`)
	for round := range uniqueRounds {
		execSQL(t, conns[0], `INSERT INTO users VALUES ($1, $2)`, 1000+round, fmt.Sprintf("old%d@example.com", round))
	}
	c.converge()
	for round := range uniqueRounds {
		email := fmt.Sprintf("new%d@example.com", round)
		moved, inserted := 1000+round, 2000+round
		mover, inserter := round%2, 1-round%2
		txs := make([]pgx.Tx, 2)
		txs[mover] = beginWith(t, conns[mover], `UPDATE users SET email = $1 WHERE id = $2`, email, moved)
		txs[inserter] = beginWith(t, conns[inserter], `INSERT INTO users VALUES ($1, $2)`, inserted, email)
		winner := exactlyOneCommitted(t, round, commitConcurrently(t, txs...))
		c.converge()
		want, wantOld := fmt.Sprint(inserted), fmt.Sprint(moved)
		if winner == mover {
			want, wantOld = fmt.Sprint(moved), ""
		}
		wantOwners(t, c, round, email, want)
		wantOwners(t, c, round, fmt.Sprintf("old%d@example.com", round), wantOld)
	}
}
