package guarantees_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// Sequences are each replica's own: replica i hands out values congruent
// to i modulo the stride (16), so values drawn on different replicas
// never collide (Postgres-R(SI) leaves sequences to the application;
// tashkent offsets them per replica, extension/sql, align_sequence).
func TestSequencesNeverCollideAcrossReplicas(t *testing.T) {
	c := start(t, 3, clustertest.Options{})
	t.Run("concurrent inserts", func(t *testing.T) { sequencesNeverCollide(t, c) })
	t.Run("restart is realigned", func(t *testing.T) { sequenceRestartIsRealigned(t, c) })
}

// Every replica inserts into SERIAL, BIGSERIAL and identity columns and a
// sequence shared by two tables at once, in autocommit statements and in
// multi-row transactions: no insert collides (no 40001, no 23505), every
// row arrives everywhere, and each replica's values are its own residue.
func sequencesNeverCollide(t *testing.T, c *cluster) {
	const rounds = 15
	replicas := len(c.DBs)
	setup := c.Connect(0)
	for _, sql := range []string{
		`CREATE TABLE s (id serial PRIMARY KEY, origin int NOT NULL)`,
		`CREATE TABLE b (id bigserial PRIMARY KEY, origin int NOT NULL)`,
		`CREATE TABLE i (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, origin int NOT NULL)`,
		`CREATE SEQUENCE shared`,
		`CREATE TABLE sh1 (id int PRIMARY KEY DEFAULT nextval('shared'), origin int NOT NULL)`,
		`CREATE TABLE sh2 (id int PRIMARY KEY DEFAULT nextval('shared'), origin int NOT NULL)`,
	} {
		execSQL(t, setup, sql)
	}
	c.converge()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, replicas)
	for r := range replicas {
		conn := c.Connect(r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				for _, tbl := range []string{"s", "b", "i", "sh1", "sh2"} {
					if _, err := conn.Exec(ctx, `INSERT INTO `+tbl+` (origin) VALUES ($1)`, r+1); err != nil {
						errs <- fmt.Errorf("replica %d: insert into %s: %w", r+1, tbl, err)
						return
					}
				}
				if err := simple(conn, fmt.Sprintf(`BEGIN; INSERT INTO s (origin) SELECT %[1]d FROM generate_series(1, 3);
					INSERT INTO i (origin) VALUES (%[1]d); COMMIT`, r+1)); err != nil {
					errs <- fmt.Errorf("replica %d: transaction: %w", r+1, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.converge()
	want := map[string]int{"s": 4 * rounds * replicas, "b": rounds * replicas, "i": 2 * rounds * replicas,
		"sh1": rounds * replicas, "sh2": rounds * replicas}
	for tbl, n := range want {
		if rows := c.countOn(2, `SELECT count(*) FROM `+tbl); rows != n {
			t.Errorf("table %s: %d rows, want %d", tbl, rows, n)
		}
		if misplaced := c.countOn(2, `SELECT count(*) FROM `+tbl+` WHERE id % 16 <> origin`); misplaced != 0 {
			t.Errorf("table %s: %d ids not congruent to their replica", tbl, misplaced)
		}
	}
	if overlap := c.countOn(0, `SELECT count(*) FROM sh1 JOIN sh2 USING (id)`); overlap != 0 {
		t.Errorf("the shared sequence gave %d ids to both tables", overlap)
	}
}

// ALTER SEQUENCE ... RESTART is replicated as DDL and every replica
// realigns the sequence to its own residue, past the restart value, and
// past values already in the column (a restored dump).
func sequenceRestartIsRealigned(t *testing.T, c *cluster) {
	a := c.Connect(0)
	execSQL(t, a, `CREATE TABLE t (id serial PRIMARY KEY, origin int)`)
	execSQL(t, a, `ALTER SEQUENCE t_id_seq RESTART WITH 1000`)
	c.converge()
	ctx := context.Background()
	for r := range c.DBs {
		var id int
		if err := c.Connect(r).QueryRow(ctx, `INSERT INTO t (origin) VALUES ($1) RETURNING id`, r+1).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id < 1000 || id >= 1016 || id%16 != r+1 {
			t.Fatalf("replica %d: first id after RESTART WITH 1000 is %d", r+1, id)
		}
	}
	c.converge()
	execSQL(t, a, `INSERT INTO t (id, origin) SELECT g, 0 FROM generate_series(5000, 5100) AS g`)
	execSQL(t, a, `ALTER SEQUENCE t_id_seq RESTART`)
	c.converge()
	for r := range c.DBs {
		var id int
		if err := c.Connect(r).QueryRow(ctx, `INSERT INTO t (origin) VALUES ($1) RETURNING id`, r+1).Scan(&id); err != nil {
			t.Fatalf("replica %d after RESTART: %v", r+1, err)
		}
		if id <= 5100 || id > 5100+16 || id%16 != r+1 {
			t.Fatalf("replica %d: first id after RESTART over rows up to 5100 is %d", r+1, id)
		}
	}
	c.converge()
}
