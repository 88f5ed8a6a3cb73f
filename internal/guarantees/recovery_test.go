package guarantees_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// A replica whose database is replaced by an empty one (rebuilt, restored
// from an old copy) is caught up from the certifier's log by its agent,
// and its new transactions are new: none is taken for a retry of an
// earlier one and answered with an old version (its write then lost while
// the client hears COMMIT).
func TestARebuiltReplicaCatchesUpAndLosesNoNewCommit(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	a := c.Connect(0)
	execSQL(t, a, `CREATE TABLE t (k int PRIMARY KEY)`)
	for k := range 3 {
		execSQL(t, a, `INSERT INTO t VALUES ($1)`, k)
	}
	c.converge()
	c.StopAgent(0)
	c.DBs[0] = pgtest.Start(t, pgtest.WithTashkent(), pgtest.SynchronousCommitOff())
	c.StartAgent(0)
	before := c.Durable()
	b := c.Connect(0)
	for k := 3; k < 6; k++ {
		execSQL(t, b, `INSERT INTO t VALUES ($1)`, k)
	}
	if after := c.Durable(); after != before+3 {
		t.Fatalf("three new commits moved the certifier from version %d to %d", before, after)
	}
	c.converge()
	if n := c.countOn(0, `SELECT count(*) FROM t`); n != 6 {
		t.Fatalf("the rebuilt replica holds %d rows, want 3 from the log and 3 new", n)
	}
}

// A replica whose database lost its own commits (replaced by an empty
// one here; a crash with synchronous_commit off, or a copy taken before
// them, does the same) gets their rows back from the log, numbered by its
// own sequence offset; once caught up its sequences must hand out values
// past them, not the same values again (23505).
func TestSequencesPassTheRowsTheCatchUpBrings(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	a := c.Connect(0)
	execSQL(t, a, `CREATE TABLE numbered (id serial PRIMARY KEY, v text)`)
	for range 3 {
		execSQL(t, a, `INSERT INTO numbered (v) VALUES ('before')`)
	}
	c.converge()
	before := c.countOn(0, `SELECT max(id) FROM numbered`)
	c.StopAgent(0)
	c.DBs[0] = pgtest.Start(t, pgtest.WithTashkent(), pgtest.SynchronousCommitOff())
	c.StartAgent(0)
	b := c.Connect(0)
	var id int
	if err := b.QueryRow(context.Background(), `INSERT INTO numbered (v) VALUES ('after') RETURNING id`).Scan(&id); err != nil {
		t.Fatalf("an insert numbered by the sequence on the caught-up replica: %v", err)
	}
	if id <= before || id%replica.SequenceStrideDefault != 1 {
		t.Fatalf("the sequence handed out %d; want a value above %d, the largest the log brought back, congruent to 1", id, before)
	}
}

// A replica that cannot apply a version stops applying for good (it must
// be rebuilt) and says so to clients instead of serving a state that
// falls behind: new connections of ordinary roles are refused with 57P03,
// and writes of open sessions fail with 57P03; reads there still work.
// The collision is one certification does not see: a unique index on an
// expression. Replica 2 is stale, so that it inserts 'a@example.com'
// before it applied replica 1's 'A@example.com'; both are certified, and
// each replica then fails to apply the other's row.
func TestAReplicaThatStopsApplyingRefusesClients(t *testing.T) {
	c := start(t, 2, clustertest.Options{Agent: staleSecond})
	ctx := context.Background()
	second := c.Connect(1)
	execSQL(t, second, `CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL)`)
	execSQL(t, second, `CREATE UNIQUE INDEX users_email_ci ON users (lower(email))`)
	execSQL(t, second, `CREATE ROLE app LOGIN`)
	execSQL(t, second, `GRANT SELECT, INSERT ON users TO app`)
	c.awaitDurable(0)
	first := c.connectAs(0, "app", nil)
	execSQL(t, first, `INSERT INTO users VALUES (1, 'A@example.com')`)
	// Certified after replica 1's row, it commits in the cluster; on
	// replica 2 it either commits, or gives way (08007) to replica 1's row,
	// whose apply waits for its index entry.
	_, err := second.Exec(ctx, `INSERT INTO users VALUES (2, 'a@example.com')`)
	switch pgcode.Of(err) {
	case "", pgcode.TransactionResolutionUnknown:
	case pgcode.SerializationFailure:
		t.Skipf("certification now sees the collision on the expression index (%v): the test needs another one", err)
	default:
		t.Fatalf("replica 2 has not applied replica 1's row yet, so its insert should be certified: %v", err)
	}
	for i := range 2 {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := c.connectOnce(i, "app")
			if pgcode.Of(err) == pgcode.CannotConnectNow {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a new connection to replica %d, which cannot apply the other's row: %v, want 57P03", i+1, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	_, err = first.Exec(ctx, `INSERT INTO users VALUES (3, 'b@example.com')`)
	if e := pgError(err); e == nil || e.Code != pgcode.CannotConnectNow || !strings.Contains(e.Message, "cannot commit writes") {
		t.Fatalf("a write of an open session on the stopped replica 1: %v, want 57P03", err)
	}
	var n int
	if err := first.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil {
		t.Fatalf("a read of an open session on the stopped replica 1: %v", err)
	}
}
