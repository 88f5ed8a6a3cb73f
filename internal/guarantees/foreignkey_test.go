package guarantees_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Foreign keys across replicas. Each replica checks a foreign key against
// its own snapshot, and remote writesets are applied without checks, so a
// parent deleted on one replica while a child referencing it is inserted
// on another would leave the same orphan on every replica. A new child
// certifies the parent key it references as a shared reference key
// (internal/certification, "Foreign-key references"): it conflicts with a
// concurrent write of the parent, not with other references, nor with an
// update that keeps the parent's key (a keeping update), as PostgreSQL's
// FOR KEY SHARE lock does not block a non-key update on one server.
//
// The cases share one cluster; each uses parents and children of its own.
func TestForeignKeysAcrossReplicas(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE parent (id int PRIMARY KEY, v text)`)
	execSQL(t, setup, `CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES parent, v text)`)
	execSQL(t, setup, `INSERT INTO parent SELECT g, 'p' FROM generate_series(0, 100) AS g`)
	c.converge()
	t.Run("parent delete certified after a child insert applied here", func(t *testing.T) { parentDeleteAfterChildInsertApplied(t, c) })
	t.Run("parent delete racing child insert leaves no orphan", func(t *testing.T) { parentDeleteRacingChildInsert(t, c) })
	t.Run("conflict messages", func(t *testing.T) { foreignKeyConflictMessages(t, c) })
	t.Run("concurrent children of one parent both commit", func(t *testing.T) { concurrentChildrenOfOneParent(t, c) })
	t.Run("a key that prints differently in the child", func(t *testing.T) { keyPrintedDifferentlyInTheChild(t, c) })
	t.Run("parent non-key update racing child insert: both commit", func(t *testing.T) { parentKeepingUpdateRacingChildInsert(t, c) })
	t.Run("referenced unique value updated racing child insert leaves no orphan", func(t *testing.T) { referencedUniqueValueUpdateRacingChildInsert(t, c) })
}

const foreignKeyRounds = 10

func noOrphans(t *testing.T, c *cluster, countSQL string, args ...any) {
	t.Helper()
	for i := range c.DBs {
		if n := c.countOn(i, countSQL, args...); n != 0 {
			t.Errorf("replica %d holds %d orphan child rows", i+1, n)
		}
	}
}

// orphansBetween counts the child rows with ids in [$1, $2] whose parent
// is gone: each case checks its own children.
const orphansBetween = `SELECT count(*) FROM child WHERE id BETWEEN $1 AND $2 AND NOT EXISTS (SELECT FROM parent WHERE parent.id = child.parent_id)`

// Replica 2 inserts a child and commits; replica 1, whose open
// transaction deleted the parent before, applies the child's version (the
// apply checks no foreign key, and takes no lock the delete holds), then
// commits the delete. On one PostgreSQL the child's insert would have
// waited for the delete's row lock and failed; here the delete must fail
// certification (40001): its snapshot did not hold the child.
func parentDeleteAfterChildInsertApplied(t *testing.T, c *cluster) {
	a, b := c.Connect(0), c.Connect(1)
	ctx := context.Background()
	del := beginWith(t, a, `DELETE FROM parent WHERE id = 40`)
	ins := beginWith(t, b, `INSERT INTO child VALUES (40, 40, 'c')`)
	if err := ins.Commit(ctx); err != nil {
		t.Fatalf("the child's insert: %v", err)
	}
	c.awaitDurable(0)
	err := del.Commit(ctx)
	if err == nil {
		c.converge()
		t.Fatalf("the parent's delete committed beside its concurrent child; replica 1 holds %d orphans", c.countOn(0, orphansBetween, 40, 40))
	}
	if pgcode.Of(err) != pgcode.SerializationFailure {
		t.Fatalf("the parent's delete: %v, want 40001", err)
	}
	c.converge()
	noOrphans(t, c, orphansBetween, 40, 40)
}

// Replica 1 deletes a parent while replica 2 inserts a child of it, both
// from the same snapshot, committing at once: exactly one commits, the
// other fails with 40001, and no replica holds an orphan.
func parentDeleteRacingChildInsert(t *testing.T, c *cluster) {
	a, b := c.Connect(0), c.Connect(1)
	wins := [2]int{}
	for round := 1; round <= foreignKeyRounds; round++ {
		del := beginWith(t, a, `DELETE FROM parent WHERE id = $1`, round)
		ins := beginWith(t, b, `INSERT INTO child VALUES ($1, $1, 'c')`, round)
		errs := commitConcurrently(t, del, ins)
		if errs[0] == nil && errs[1] == nil {
			c.converge()
			t.Fatalf("round %d: the parent's delete and its child's insert both committed", round)
		}
		wins[exactlyOneCommitted(t, round, errs)]++
	}
	t.Logf("delete won %d rounds, insert won %d", wins[0], wins[1])
	c.converge()
	noOrphans(t, c, orphansBetween, 1, foreignKeyRounds)
}

// The two orders, one after the other, and what the loser is told.
func foreignKeyConflictMessages(t *testing.T, c *cluster) {
	a, b := c.Connect(0), c.Connect(1)
	ctx := context.Background()

	// The child commits first: the parent's delete is refused by
	// certification, which says the row was referenced; or earlier, when
	// the child's apply on replica 1 locks the parent row the delete holds
	// and the lock watch dooms the delete (which then says so).
	del := beginWith(t, a, `DELETE FROM parent WHERE id = 50`)
	ins := beginWith(t, b, `INSERT INTO child VALUES (50, 50, 'c')`)
	if err := ins.Commit(ctx); err != nil {
		t.Fatalf("the child's insert: %v", err)
	}
	err := del.Commit(ctx)
	if err == nil {
		c.converge()
		t.Fatal("the delete of parent 50 committed after its concurrent child")
	}
	if e := pgError(err); e == nil || e.Code != pgcode.SerializationFailure ||
		!strings.Contains(e.Detail, "references through a foreign key") && !strings.Contains(e.Detail, "writes a row this transaction locked") {
		t.Fatalf("the parent's delete after a concurrent child: %v (detail %q), want 40001 saying the row was referenced, or locked by a remote version", err, detailOf(err))
	}

	// The parent's delete commits first: the child's insert fails with
	// 40001 (by certification, or earlier, when the delete's apply on
	// replica 2 meets the child's lock on the parent row and the lock
	// watch dooms the local transaction).
	ins = beginWith(t, b, `INSERT INTO child VALUES (60, 60, 'c')`)
	del = beginWith(t, a, `DELETE FROM parent WHERE id = 60`)
	if err := del.Commit(ctx); err != nil {
		t.Fatalf("the parent's delete: %v", err)
	}
	if err := ins.Commit(ctx); pgcode.Of(err) != pgcode.SerializationFailure {
		t.Fatalf("the child's insert after a concurrent delete of its parent: %v, want 40001", err)
	}
	c.converge()
	noOrphans(t, c, orphansBetween, 50, 60)
}

func detailOf(err error) string {
	if e := pgError(err); e != nil {
		return e.Detail
	}
	return ""
}

// References do not conflict with each other: two replicas inserting
// children of one parent at the same time both commit.
func concurrentChildrenOfOneParent(t *testing.T, c *cluster) {
	a, b := c.Connect(0), c.Connect(1)
	for round := 1; round <= foreignKeyRounds; round++ {
		first := beginWith(t, a, `INSERT INTO child VALUES ($1, 77, 'a')`, 1000+2*round)
		second := beginWith(t, b, `INSERT INTO child VALUES ($1, 77, 'b')`, 1001+2*round)
		for i, err := range commitConcurrently(t, first, second) {
			if err != nil {
				t.Fatalf("round %d: child insert %d: %v, want both to commit", round, i, err)
			}
		}
	}
	c.converge()
	if n := c.countOn(1, `SELECT count(*) FROM child WHERE parent_id = 77`); n != 2*foreignKeyRounds {
		t.Fatalf("replica 2 holds %d children of parent 77, want %d", n, 2*foreignKeyRounds)
	}
}

// A numeric key equals the child's value at another scale (1.00 = 1), so
// the foreign key holds, but the child's own text names no parent: the
// reference must name the parent's key as the parent's capture prints it,
// else the parent's delete and the child's insert both commit, in either
// order, and leave an orphan.
func keyPrintedDifferentlyInTheChild(t *testing.T, c *cluster) {
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE nparent (id numeric PRIMARY KEY)`)
	execSQL(t, setup, `CREATE TABLE nchild (id int PRIMARY KEY, parent_id numeric NOT NULL REFERENCES nparent)`)
	execSQL(t, setup, `INSERT INTO nparent SELECT g + 0.00 FROM generate_series(1, 10) AS g`)
	c.converge()
	a, b := c.Connect(0), c.Connect(1)
	ctx := context.Background()
	for id := 1; id <= 3; id++ {
		del := beginWith(t, a, `DELETE FROM nparent WHERE id = $1`, id)
		ins := beginWith(t, b, `INSERT INTO nchild VALUES ($1, $1::int)`, id)
		if err := ins.Commit(ctx); err != nil {
			t.Fatalf("child %d: %v", id, err)
		}
		if err := del.Commit(ctx); err == nil {
			c.converge()
			t.Fatalf("numeric parent %d deleted beside its concurrent child", id)
		} else if pgcode.Of(err) != pgcode.SerializationFailure {
			t.Fatalf("parent %d deleted under a concurrent child: %v, want 40001", id, err)
		}
	}
	for id := 4; id <= 6; id++ {
		ins := beginWith(t, b, `INSERT INTO nchild VALUES ($1, $1::int)`, id)
		del := beginWith(t, a, `DELETE FROM nparent WHERE id = $1`, id)
		if err := del.Commit(ctx); err != nil {
			t.Fatalf("parent %d: %v", id, err)
		}
		if err := ins.Commit(ctx); pgcode.Of(err) != pgcode.SerializationFailure {
			t.Fatalf("child %d inserted under a concurrent delete of its parent: %v, want 40001", id, err)
		}
	}
	c.converge()
	noOrphans(t, c, `SELECT count(*) FROM nchild WHERE NOT EXISTS (SELECT FROM nparent WHERE nparent.id = nchild.parent_id)`)
}

// The common case the keeping update is for: children inserted on one
// replica referencing a parent whose other columns another replica
// updates all the time. Both commit, every round, on one hot parent row.
func parentKeepingUpdateRacingChildInsert(t *testing.T, c *cluster) {
	a, b := c.Connect(0), c.Connect(1)
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
	c.converge()
	for i := range c.DBs {
		if v := c.textOn(i, `SELECT v FROM parent WHERE id = $1`, parent); v != fmt.Sprintf("seen %d", foreignKeyRounds) {
			t.Errorf("replica %d: parent v %q", i+1, v)
		}
		if n := c.countOn(i, `SELECT count(*) FROM child WHERE parent_id = $1`, parent); n != foreignKeyRounds {
			t.Errorf("replica %d: %d children of the hot parent, want %d", i+1, n, foreignKeyRounds)
		}
	}
	noOrphans(t, c, orphansBetween, 3000, 3000+foreignKeyRounds)
}

// A foreign key through a UNIQUE column other than the primary key: an
// UPDATE of that column on replica 1 frees the value a child inserted
// concurrently on replica 2 references. Exactly one of the two commits,
// and no replica holds a child whose code names no parent.
func referencedUniqueValueUpdateRacingChildInsert(t *testing.T, c *cluster) {
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE uparent (id int PRIMARY KEY, code text NOT NULL UNIQUE, v text)`)
	execSQL(t, setup, `CREATE TABLE uchild (id int PRIMARY KEY, code text NOT NULL REFERENCES uparent (code))`)
	execSQL(t, setup, `INSERT INTO uparent SELECT g, 'c' || g, 'p' FROM generate_series(1, 20) AS g`)
	c.converge()
	a, b := c.Connect(0), c.Connect(1)
	wins := [2]int{}
	for round := 1; round <= foreignKeyRounds; round++ {
		upd := beginWith(t, a, `UPDATE uparent SET code = code || 'x' WHERE id = $1`, round)
		ins := beginWith(t, b, `INSERT INTO uchild VALUES ($1, $2)`, round, fmt.Sprintf("c%d", round))
		wins[exactlyOneCommitted(t, round, commitConcurrently(t, upd, ins))]++
	}
	t.Logf("update won %d rounds, insert won %d", wins[0], wins[1])
	c.converge()
	noOrphans(t, c, `SELECT count(*) FROM uchild WHERE NOT EXISTS (SELECT FROM uparent WHERE uparent.code = uchild.code)`)
}
