package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/proxy"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// Conflicts on unique indexes other than the primary key. Two transactions
// on two replicas that take the same value of a UNIQUE column in different
// rows write no common row, yet only one of them may commit: applying the
// other would fail on every replica (and deadlock with the certified local
// transaction on its origin). Capture certifies the values of unique
// indexes the transaction took or freed as keys of their own.

const uniqueRounds = 10

// commitConcurrently commits both transactions at once and returns their
// errors. A commit that hangs (a remote writeset stuck behind a certified
// local transaction) fails the test instead of hanging it.
func commitConcurrently(t *testing.T, txs ...pgx.Tx) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(txs))
	var wg sync.WaitGroup
	for i, tx := range txs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = tx.Commit(ctx) }()
	}
	wg.Wait()
	return errs
}

// exactlyOneCommitted checks that one transaction committed and the other
// failed certification with 40001, and returns the index of the survivor.
func exactlyOneCommitted(t *testing.T, round int, errs []error) int {
	t.Helper()
	winner, committed := -1, 0
	for i, err := range errs {
		switch {
		case err == nil:
			winner = i
			committed++
		case sqlState(err) != "40001":
			t.Fatalf("round %d: transaction %d: commit failed with %v, want 40001", round, i, err)
		case !strings.Contains(err.Error(), "another replica"):
			t.Fatalf("round %d: transaction %d: the abort does not say why: %v", round, i, err)
		}
	}
	if committed != 1 {
		t.Fatalf("round %d: %d of two transactions taking the same unique value committed", round, committed)
	}
	return winner
}

// owners returns, on each replica's database, the ids of the rows holding
// email, for comparing with the transaction that committed.
func owners(t *testing.T, c *testCluster, email string) []string {
	t.Helper()
	out := make([]string, len(c.dbs))
	for i := range c.dbs {
		var ids string
		if err := c.direct(i).QueryRow(context.Background(),
			`SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM users WHERE email = $1`, email).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		out[i] = ids
	}
	return out
}

func wantOwners(t *testing.T, c *testCluster, round int, email, want string) {
	t.Helper()
	for i, got := range owners(t, c, email) {
		if got != want {
			t.Fatalf("round %d: replica %d: rows holding %q: %q, want %q", round, i+1, email, got, want)
		}
	}
}

func begin(t *testing.T, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func txExec(t *testing.T, round int, tx pgx.Tx, sql string, args ...any) {
	t.Helper()
	tag, err := tx.Exec(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("round %d: %s: %v", round, sql, err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("round %d: %s: %d rows, want 1", round, sql, tag.RowsAffected())
	}
}

// (1) Two replicas insert different primary keys with the same email.
func TestUniqueValueInsertedOnTwoReplicasCommitsOnce(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	conns := []*pgx.Conn{c.connect(0), c.connect(1)}
	execSQL(t, conns[0], `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL UNIQUE)`)
	c.converge(10 * time.Second)
	for round := range uniqueRounds {
		email := fmt.Sprintf("user%d@example.com", round)
		ids := []int{2*round + 1, 2*round + 2}
		txs := []pgx.Tx{begin(t, conns[0]), begin(t, conns[1])}
		for i, tx := range txs {
			txExec(t, round, tx, `INSERT INTO users VALUES ($1, $2)`, ids[i], email)
		}
		winner := exactlyOneCommitted(t, round, commitConcurrently(t, txs...))
		c.converge(10 * time.Second)
		wantOwners(t, c, round, email, fmt.Sprint(ids[winner]))
	}
}

// (2) One replica deletes the row holding a value while the other inserts
// a new row with it. The insert can only succeed locally on a replica that
// has not yet applied the row holding the value, so replica 2 is kept stale
// (it learns remote writesets only when it commits a transaction of its
// own): the row is inserted on replica 1, deleted there in an open
// transaction, and inserted again on replica 2 in another. Without unique
// keys both certify, and replica 2 cannot apply the row's insertion behind
// its own certified insert of the same value.
func TestUniqueValueDeletedAndInsertedOnTwoReplicasCommitsOnce(t *testing.T) {
	c := startClusterStaleness(t, []time.Duration{0, time.Hour})
	ctx := context.Background()
	a, b := c.connect(0), c.connect(1)
	// The stale replica's own table first: a transaction on it brings
	// replica 2 up to date (see catchUp), and only replica 2 writes it.
	execSQL(t, b, `CREATE TABLE poke (id int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, b, `INSERT INTO poke VALUES (1, 0)`)
	uqWaitVersion(t, c, 0, c.certifier.Service.DurableVersion())
	execSQL(t, a, `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL UNIQUE)`)
	catchUp := func() {
		t.Helper()
		// Its reply brings every earlier version. It fails certification
		// when it overlaps one (DDL overlaps everything); the abort brings
		// the versions too, and the retry commits.
		for attempt := 0; ; attempt++ {
			_, err := b.Exec(ctx, `UPDATE poke SET n = n + 1 WHERE id = 1`)
			if err == nil {
				break
			}
			if sqlState(err) != "40001" || attempt == 5 {
				t.Fatalf("catching replica 2 up: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.converge(10 * time.Second)
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
		del, ins := begin(t, a), begin(t, b)
		txExec(t, round, del, `DELETE FROM users WHERE email = $1`, email)
		txExec(t, round, ins, `INSERT INTO users VALUES ($1, $2)`, taken, email)
		winner := exactlyOneCommitted(t, round, commitConcurrently(t, del, ins))
		catchUp()
		want := ""
		if winner == 1 {
			want = fmt.Sprint(taken)
		}
		wantOwners(t, c, round, email, want)
	}
}

// (3) One replica moves a value to an existing row (UPDATE) while the other
// inserts a row with it; the roles alternate between the replicas.
func TestUniqueValueMovedAndInsertedOnTwoReplicasCommitsOnce(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	conns := []*pgx.Conn{c.connect(0), c.connect(1)}
	execSQL(t, conns[0], `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL UNIQUE)`)
	for round := range uniqueRounds {
		execSQL(t, conns[0], `INSERT INTO users VALUES ($1, $2)`, 1000+round, fmt.Sprintf("old%d@example.com", round))
	}
	c.converge(10 * time.Second)
	for round := range uniqueRounds {
		email := fmt.Sprintf("new%d@example.com", round)
		moved, inserted := 1000+round, 2000+round
		mover, inserter := round%2, 1-round%2
		txs := make([]pgx.Tx, 2)
		txs[mover], txs[inserter] = begin(t, conns[mover]), begin(t, conns[inserter])
		txExec(t, round, txs[mover], `UPDATE users SET email = $1 WHERE id = $2`, email, moved)
		txExec(t, round, txs[inserter], `INSERT INTO users VALUES ($1, $2)`, inserted, email)
		winner := exactlyOneCommitted(t, round, commitConcurrently(t, txs...))
		c.converge(10 * time.Second)
		want := fmt.Sprint(inserted)
		if winner == mover {
			want = fmt.Sprint(moved)
		}
		wantOwners(t, c, round, email, want)
		// The old value is free again exactly when the update committed.
		wantOld := fmt.Sprint(moved)
		if winner == mover {
			wantOld = ""
		}
		wantOwners(t, c, round, fmt.Sprintf("old%d@example.com", round), wantOld)
	}
}

// startClusterStaleness is startCluster (mode mw) with a staleness bound
// per proxy; 0 keeps the default. A bound of an hour or more keeps that
// replica stale on purpose: it also asks for no pushes (Config.NoPush), so
// it hears of other replicas' commits only with its own.
func startClusterStaleness(t *testing.T, staleness []time.Duration) *testCluster {
	t.Helper()
	c := startCluster(t, 0, proxy.ModeMW)
	for i, st := range staleness {
		c.dbs = append(c.dbs, pgtest.Start(t, pgtest.SynchronousCommitOff()))
		c.runProxy(i, proxy.Config{
			Name: fmt.Sprintf("replica%d", i+1), Listen: "127.0.0.1:0",
			BackendAddr: fmt.Sprintf("127.0.0.1:%d", c.dbs[i].Port()), Certifier: c.certifier.Addr().String(),
			Mode: proxy.ModeMW, Staleness: st, NoPush: st >= time.Hour, // an hour: stale on purpose
			AllowPasswordlessLogins: true, // pgtest's PostgreSQL trusts local connections
		})
	}
	return c
}

// uqWaitVersion waits until replica i's database holds version v.
func uqWaitVersion(t *testing.T, c *testCluster, i int, v uint64) {
	t.Helper()
	conn := c.direct(i)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := replica.ReadVersion(context.Background(), conn)
		if err == nil && got >= v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d at version %d (%v), want %d", i+1, got, err, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
