package guarantees_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Tables without a primary key are replicated: inserts, updates and
// deletes (a row found by its whole old row, one of several equal rows
// for one) and TRUNCATE, written on both replicas, types without an
// equality operator (json, point) among the columns; the replicas end
// equal. A transaction that inserts, updates and deletes one row leaves
// nothing anywhere, and a rolled-back savepoint's rows reach no replica.
func TestKeylessTablesReplicate(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	ctx := context.Background()
	a, b := c.Connect(0), c.Connect(1)
	execSQL(t, a, `CREATE TABLE log (at timestamptz, who text, j json, p point, f float8)`)
	execSQL(t, a, `CREATE TABLE audit (n int, v text)`)
	c.awaitDurable(1)
	steps := []struct {
		conn *pgx.Conn
		sql  string
	}{
		{a, `INSERT INTO log VALUES ('2024-01-02 03:04:05+01', 'a', '{"k": [1, null]}', '(1,2)', 0.1),
			('2024-01-02 03:04:05+01', 'a', '{"k": [1, null]}', '(1,2)', 0.1), (NULL, 'b', '[]', '(0,0)', 1.0/3)`},
		{b, `UPDATE log SET j = '{"k": 2}', p = '(3,4)' WHERE ctid = (SELECT min(ctid) FROM log WHERE who = 'a')`},
		{a, `UPDATE log SET f = f * 2 WHERE who = 'b'`},
		{b, `DELETE FROM log WHERE j::text = '{"k": [1, null]}'`},
		{a, `INSERT INTO audit SELECT i % 4, 'x' FROM generate_series(1, 40) AS i`},
		{b, `DELETE FROM audit WHERE ctid IN (SELECT ctid FROM audit WHERE n = 1 LIMIT 3)`},
		{a, `UPDATE audit SET v = 'y' WHERE n = 2`},
		{b, `BEGIN; INSERT INTO audit VALUES (9, 'gone'); UPDATE audit SET v = 'still gone' WHERE n = 9;
			DELETE FROM audit WHERE n = 9; COMMIT`},
		{a, `BEGIN; INSERT INTO audit VALUES (10, 'kept'); SAVEPOINT s; INSERT INTO audit VALUES (11, 'undone');
			UPDATE audit SET v = 'undone' WHERE n = 10; ROLLBACK TO s; UPDATE audit SET v = 'kept!' WHERE n = 10; COMMIT`},
		{b, `TRUNCATE log`},
		{a, `INSERT INTO log VALUES (now(), 'after truncate', 'null', '(5,5)', 'NaN')`},
	}
	for i, s := range steps {
		if err := simple(s.conn, s.sql); err != nil {
			t.Fatalf("step %d: %s: %v", i, oneLine(s.sql), err)
		}
		c.awaitDurable(0)
		c.awaitDurable(1)
	}
	c.converge()
	for i := range c.DBs {
		if n := c.countOn(i, `SELECT count(*) FROM audit WHERE n IN (9, 11) OR v = 'undone'`); n != 0 {
			t.Errorf("replica %d: %d rows of a transaction's cancelled or rolled-back changes", i+1, n)
		}
		if got := c.textOn(i, `SELECT string_agg(v, ',' ORDER BY v) FROM audit WHERE n IN (1, 10)`); got != "kept!,x,x,x,x,x,x,x" {
			t.Errorf("replica %d: rows n = 1 and 10: %s", i+1, got)
		}
		if got := c.textOn(i, `SELECT string_agg(who || ' ' || p::text, ',') FROM log`); got != "after truncate (5,5)" {
			t.Errorf("replica %d: log after TRUNCATE: %s", i+1, got)
		}
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM audit`).Scan(&n); err != nil || n != 38 {
		t.Fatalf("audit has %d rows (%v), want 38", n, err)
	}
}

// Two replicas update equal rows of a table without a primary key from
// the same snapshot: the whole old row is the identity both certify, so
// exactly one commits and the other gets 40001, and the row is updated
// once everywhere. Updates of different rows of the table both commit.
func TestConcurrentUpdatesOfEqualKeylessRowsCommitExactlyOne(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE tally (who text, n int)`)
	execSQL(t, setup, `INSERT INTO tally VALUES ('x', 0), ('x', 0), ('y', 0)`)
	c.converge()
	conns := []*pgx.Conn{c.Connect(0), c.Connect(1)}
	for round := range 5 {
		txs := []pgx.Tx{
			beginWith(t, conns[0], `UPDATE tally SET n = n + 1 WHERE ctid = (SELECT min(ctid) FROM tally WHERE who = 'x' AND n = $1)`, round),
			beginWith(t, conns[1], `UPDATE tally SET n = n + 1 WHERE ctid = (SELECT max(ctid) FROM tally WHERE who = 'x' AND n = $1)`, round),
		}
		winner := exactlyOneCommitted(t, round, commitConcurrently(t, txs...))
		c.converge()
		// The loser's row, equal to the winner's old row, catches up.
		retry40001(t, conns[1-winner], `UPDATE tally SET n = n + 1 WHERE ctid = (SELECT min(ctid) FROM tally WHERE who = 'x' AND n = $1)`, round)
		c.converge()
		if got := c.textOn(round%2, `SELECT string_agg(n::text, ',') FROM tally WHERE who = 'x'`); got != itoa(round+1)+","+itoa(round+1) {
			t.Fatalf("round %d: the x rows are %s, want both at %d", round, got, round+1)
		}
	}
	txs := []pgx.Tx{
		beginWith(t, conns[0], `UPDATE tally SET n = n + 1 WHERE who = 'y'`),
		beginWith(t, conns[1], `UPDATE tally SET n = n + 10 WHERE who = 'x' AND ctid = (SELECT min(ctid) FROM tally WHERE who = 'x')`),
	}
	for i, err := range commitConcurrently(t, txs...) {
		if err != nil {
			t.Fatalf("updates of different rows: transaction %d: %v", i, err)
		}
	}
	c.converge()
	if got := c.textOn(0, `SELECT string_agg(who || n, ',' ORDER BY who, n) FROM tally`); !strings.HasPrefix(got, "x5,x15,y1") {
		t.Fatalf("rows %s, want x5,x15,y1", got)
	}
}

// The update of an equal row committed on another replica and applied
// here before this transaction commits, to the other equal row (the one
// this transaction did not lock), is still a conflict: the transaction is
// certified from the replica's version at its change of the row, not at
// its commit, since equal rows cannot be told apart.
func TestAnEqualRowUpdatedElsewhereAndAppliedFirstIsAConflict(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE tally (who text, n int)`)
	execSQL(t, setup, `INSERT INTO tally VALUES ('x', 0), ('x', 0)`)
	c.converge()
	late := beginWith(t, c.Connect(1), `UPDATE tally SET n = n + 1 WHERE ctid = (SELECT max(ctid) FROM tally WHERE who = 'x' AND n = 0)`)
	execSQL(t, c.Connect(0), `UPDATE tally SET n = n + 1 WHERE ctid = (SELECT min(ctid) FROM tally WHERE who = 'x' AND n = 0)`)
	c.AwaitCommitted(1, c.Agents[0].CommittedVersion(), time.Minute)
	err := late.Commit(context.Background())
	if pgcode.Of(err) != pgcode.SerializationFailure {
		t.Fatalf("the second update of an equal row, after the first was applied here: %v, want 40001", err)
	}
	c.converge()
	if got := c.textOn(1, `SELECT string_agg(n::text, ',' ORDER BY n) FROM tally`); got != "0,1" {
		t.Errorf("tally after one update committed: %s, want 0,1", got)
	}
}
