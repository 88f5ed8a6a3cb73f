package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// Foreign keys across replicas. Each replica checks a foreign key against
// its own snapshot, and remote writesets are applied without checks, so a
// parent deleted on one replica while a child referencing it is inserted
// on another used to leave the same orphan child on every replica. Capture
// now certifies the parent key a new child references as a shared
// reference key (internal/certification, "Foreign-key references"): it
// conflicts with a concurrent write of the parent, not with other
// references, nor with an update that keeps the parent row (its key and
// every value a foreign key references: a keeping update,
// certification.KeepingWrite), as PostgreSQL's FOR KEY SHARE lock does
// not block a non-key update on one server.
//
// The three cases share one cluster (starting two PostgreSQL servers is
// most of the time); each uses parents and children of its own.
func TestForeignKeysAcrossReplicas(t *testing.T) {
	c := foreignKeyCluster(t)
	t.Run("parent delete racing child insert leaves no orphan", func(t *testing.T) { parentDeleteRacingChildInsert(t, c) })
	t.Run("conflict messages", func(t *testing.T) { foreignKeyConflictMessages(t, c) })
	t.Run("concurrent children of one parent both commit", func(t *testing.T) { concurrentChildrenOfOneParent(t, c) })
	t.Run("a key that prints differently in the child", func(t *testing.T) { keyPrintedDifferentlyInTheChild(t, c) })
	t.Run("parent non-key update racing child insert: both commit", func(t *testing.T) { parentKeepingUpdateRacingChildInsert(t, c) })
	t.Run("referenced unique value updated racing child insert leaves no orphan", func(t *testing.T) { referencedUniqueValueUpdateRacingChildInsert(t, c) })
}

const foreignKeyRounds = 15

func foreignKeyCluster(t *testing.T) *testCluster {
	t.Helper()
	c := startCluster(t, 2, proxy.ModeMW)
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE parent (id int PRIMARY KEY, v text)`)
	execSQL(t, setup, `CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES parent, v text)`)
	execSQL(t, setup, `INSERT INTO parent SELECT g, 'p' FROM generate_series(0, 100) AS g`)
	c.converge(10 * time.Second)
	return c
}

// beginWith opens a transaction on conn and runs sql in it.
func beginWith(t *testing.T, conn *pgx.Conn, sql string, args ...any) pgx.Tx {
	t.Helper()
	tx := begin(t, conn)
	if _, err := tx.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tx
}

// noOrphans checks every replica's database for child rows whose parent
// is gone.
func noOrphans(t *testing.T, c *testCluster) {
	t.Helper()
	noOrphansCounted(t, c, `SELECT count(*) FROM child WHERE NOT EXISTS (SELECT FROM parent WHERE parent.id = child.parent_id)`)
}

// noOrphansCounted checks that countSQL counts no orphan child rows on any
// replica.
func noOrphansCounted(t *testing.T, c *testCluster, countSQL string) {
	t.Helper()
	for i := range c.dbs {
		var orphans int
		if err := c.direct(i).QueryRow(context.Background(), countSQL).Scan(&orphans); err != nil {
			t.Fatal(err)
		}
		if orphans != 0 {
			t.Errorf("replica %d holds %d orphan child rows", i+1, orphans)
		}
	}
}

// Replica 1 deletes a parent while replica 2 inserts a child of it, both
// from the same snapshot, committing at once: exactly one commits, the
// other fails with 40001, and no replica holds an orphan.
func parentDeleteRacingChildInsert(t *testing.T, c *testCluster) {
	a, b := c.connect(0), c.connect(1)
	wins := [2]int{}
	for round := 1; round <= foreignKeyRounds; round++ {
		del := beginWith(t, a, `DELETE FROM parent WHERE id = $1`, round)
		ins := beginWith(t, b, `INSERT INTO child VALUES ($1, $1, 'c')`, round)
		errs := commitConcurrently(t, del, ins)
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: the parent's delete and the child's insert both committed", round)
				}
				winner = i
			case sqlState(err) != "40001":
				t.Fatalf("round %d: transaction %d failed with %v, want 40001", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither committed: %v", round, errs)
		}
		wins[winner]++
	}
	t.Logf("delete won %d rounds, insert won %d", wins[0], wins[1])
	c.converge(20 * time.Second)
	noOrphans(t, c)
}

// The two orders, one after the other, and the message the loser gets.
func foreignKeyConflictMessages(t *testing.T, c *testCluster) {
	a, b := c.connect(0), c.connect(1)
	ctx := context.Background()

	// The child commits first: the parent's delete aborts.
	del := beginWith(t, a, `DELETE FROM parent WHERE id = 50`)
	ins := beginWith(t, b, `INSERT INTO child VALUES (50, 50, 'c')`)
	if err := ins.Commit(ctx); err != nil {
		t.Fatalf("the child's insert: %v", err)
	}
	err := del.Commit(ctx)
	if sqlState(err) != "40001" || !strings.Contains(err.Error(), "referenced") {
		t.Fatalf("the parent's delete after a concurrent child: %v, want 40001 saying the row was referenced", err)
	}

	// The parent's delete commits first: the child's insert aborts (by
	// certification, or earlier, when the delete's apply on replica 2
	// meets the child's lock on the parent row and the lock watch
	// preempts the doomed local transaction).
	ins = beginWith(t, b, `INSERT INTO child VALUES (60, 60, 'c')`)
	del = beginWith(t, a, `DELETE FROM parent WHERE id = 60`)
	if err := del.Commit(ctx); err != nil {
		t.Fatalf("the parent's delete: %v", err)
	}
	if err := ins.Commit(ctx); sqlState(err) != "40001" {
		t.Fatalf("the child's insert after a concurrent delete of its parent: %v, want 40001", err)
	}
	c.converge(20 * time.Second)
	noOrphans(t, c)
}

// References do not conflict with each other: two replicas inserting
// children of one parent at the same time both commit.
func concurrentChildrenOfOneParent(t *testing.T, c *testCluster) {
	a, b := c.connect(0), c.connect(1)
	for round := 1; round <= foreignKeyRounds; round++ {
		first := beginWith(t, a, `INSERT INTO child VALUES ($1, 77, 'a')`, 1000+2*round)
		second := beginWith(t, b, `INSERT INTO child VALUES ($1, 77, 'b')`, 1001+2*round)
		for i, err := range commitConcurrently(t, first, second) {
			if err != nil {
				t.Fatalf("round %d: child insert %d: %v, want both to commit", round, i, err)
			}
		}
	}
	c.converge(20 * time.Second)
	var n int
	if err := c.direct(1).QueryRow(context.Background(), `SELECT count(*) FROM child WHERE parent_id = 77`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2*foreignKeyRounds {
		t.Fatalf("replica 2 holds %d children of parent 77, want %d", n, 2*foreignKeyRounds)
	}
}

// A numeric key equals the child's value at another scale (1.00 = 1), so
// the foreign key holds, but the child's own text names no parent: the
// reference must name the parent's key as the parent's capture prints it
// (internal/replica, "Foreign keys"), else the parent's delete and the
// child's insert both commit, in either order, and leave an orphan.
func keyPrintedDifferentlyInTheChild(t *testing.T, c *testCluster) {
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE nparent (id numeric PRIMARY KEY)`)
	execSQL(t, setup, `CREATE TABLE nchild (id int PRIMARY KEY, parent_id numeric NOT NULL REFERENCES nparent)`)
	execSQL(t, setup, `INSERT INTO nparent SELECT g + 0.00 FROM generate_series(1, 10) AS g`)
	c.converge(10 * time.Second)
	a, b := c.connect(0), c.connect(1)
	ctx := context.Background()
	for id := 1; id <= 3; id++ {
		del := beginWith(t, a, `DELETE FROM nparent WHERE id = $1`, id)
		ins := beginWith(t, b, `INSERT INTO nchild VALUES ($1, $1::int)`, id)
		if err := ins.Commit(ctx); err != nil {
			t.Fatalf("child %d: %v", id, err)
		}
		if err := del.Commit(ctx); sqlState(err) != "40001" {
			t.Fatalf("parent %d deleted under a concurrent child: %v, want 40001", id, err)
		}
	}
	for id := 4; id <= 6; id++ {
		ins := beginWith(t, b, `INSERT INTO nchild VALUES ($1, $1::int)`, id)
		del := beginWith(t, a, `DELETE FROM nparent WHERE id = $1`, id)
		if err := del.Commit(ctx); err != nil {
			t.Fatalf("parent %d: %v", id, err)
		}
		if err := ins.Commit(ctx); sqlState(err) != "40001" {
			t.Fatalf("child %d inserted under a concurrent delete of its parent: %v, want 40001", id, err)
		}
	}
	c.converge(20 * time.Second)
	noOrphansCounted(t, c, `SELECT count(*) FROM nchild WHERE NOT EXISTS (SELECT FROM nparent WHERE nparent.id = nchild.parent_id)`)
}

// The common case the keeping update is for: orders inserted on one
// replica referencing a customer whose other columns (last_seen) another
// replica updates all the time. The parent's UPDATE of a non-key column
// on replica 1 and the insert of a child of that parent on replica 2, from
// the same snapshot, committing at once: both commit, every round, on one
// hot parent row (before keeping updates, one of the two aborted with a
// foreign-key reference conflict).
func parentKeepingUpdateRacingChildInsert(t *testing.T, c *testCluster) {
	a, b := c.connect(0), c.connect(1)
	const parent = 90
	for round := 1; round <= foreignKeyRounds; round++ {
		upd := beginWith(t, a, `UPDATE parent SET v = $1 WHERE id = $2`, fmt.Sprintf("seen %d", round), parent)
		ins := beginWith(t, b, `INSERT INTO child VALUES ($1, $2, 'order')`, 3000+round, parent)
		for i, err := range commitConcurrently(t, upd, ins) {
			if err != nil {
				t.Fatalf("round %d: transaction %d (0: parent update, 1: child insert): %v, want both to commit", round, i, err)
			}
		}
	}
	c.converge(20 * time.Second)
	for i := range c.dbs {
		var v string
		var children int
		if err := c.direct(i).QueryRow(context.Background(),
			`SELECT (SELECT v FROM parent WHERE id = $1), (SELECT count(*) FROM child WHERE parent_id = $1)`, parent).Scan(&v, &children); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("seen %d", foreignKeyRounds); v != want || children != foreignKeyRounds {
			t.Errorf("replica %d: parent v %q with %d children, want %q with %d", i+1, v, children, want, foreignKeyRounds)
		}
	}
	noOrphans(t, c)
}

// A foreign key through a UNIQUE column other than the primary key: an
// UPDATE of that column on replica 1 frees the value a child inserted
// concurrently on replica 2 references. The update is a plain write (the
// referenced value changed; capture is conservative for such tables), so
// exactly one of the two commits, and no replica holds a child whose code
// names no parent.
func referencedUniqueValueUpdateRacingChildInsert(t *testing.T, c *testCluster) {
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE uparent (id int PRIMARY KEY, code text NOT NULL UNIQUE, v text)`)
	execSQL(t, setup, `CREATE TABLE uchild (id int PRIMARY KEY, code text NOT NULL REFERENCES uparent (code))`)
	execSQL(t, setup, `INSERT INTO uparent SELECT g, 'c' || g, 'p' FROM generate_series(1, 20) AS g`)
	c.converge(10 * time.Second)
	a, b := c.connect(0), c.connect(1)
	wins := [2]int{}
	for round := 1; round <= foreignKeyRounds; round++ {
		upd := beginWith(t, a, `UPDATE uparent SET code = code || 'x' WHERE id = $1`, round)
		ins := beginWith(t, b, `INSERT INTO uchild VALUES ($1, $2)`, round, fmt.Sprintf("c%d", round))
		errs := commitConcurrently(t, upd, ins)
		switch {
		case errs[0] == nil && errs[1] == nil:
			t.Fatalf("round %d: the referenced value's update and the child's insert both committed", round)
		case errs[0] != nil && errs[1] != nil:
			t.Fatalf("round %d: neither committed: %v", round, errs)
		}
		for i, err := range errs {
			if err != nil && sqlState(err) != "40001" {
				t.Fatalf("round %d: transaction %d failed with %v, want 40001", round, i, err)
			}
			if err == nil {
				wins[i]++
			}
		}
	}
	t.Logf("update won %d rounds, insert won %d", wins[0], wins[1])
	c.converge(20 * time.Second)
	noOrphansCounted(t, c, `SELECT count(*) FROM uchild WHERE NOT EXISTS (SELECT FROM uparent WHERE uparent.code = uchild.code)`)
}
