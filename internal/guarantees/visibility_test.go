package guarantees_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// snapshot is what one read-only transaction saw: each writer's counter.
type snapshot struct {
	replica  int
	counters []int
}

func (a snapshot) dominates(b snapshot) bool {
	for i := range a.counters {
		if a.counters[i] < b.counters[i] {
			return false
		}
	}
	return true
}

// Writers on every replica each run transactions that bump their own
// counter and insert the matching event; read-only transactions on every
// replica take snapshots meanwhile, never leaving PostgreSQL. Every
// snapshot holds whole transactions (each writer's event count equals its
// counter), and all snapshots, from all replicas, form one chain: the
// replicas expose prefixes of one order, never a Long Fork (commit
// visibility follows the certifier's order, extension/src/turn.c).
func TestReadersNeverSeePartialOrOutOfOrderCommits(t *testing.T) {
	c := start(t, 3, clustertest.Options{})
	const writers = 3
	setup := c.Connect(0)
	execSQL(t, setup, `CREATE TABLE counters (writer int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE events (writer int, n int, PRIMARY KEY (writer, n))`)
	execSQL(t, setup, `INSERT INTO counters SELECT g, 0 FROM generate_series(0, $1) g`, writers-1)
	c.converge()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range writers {
		conn := c.Connect(w % len(c.DBs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; ctx.Err() == nil; n++ {
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE counters SET n = $2 WHERE writer = $1`, w, n); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO events VALUES ($1, $2)`, w, n)
					return err
				})
				if err != nil && ctx.Err() == nil {
					t.Errorf("writer %d transaction %d: %v", w, n, err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	var seen []snapshot
	for r := range len(c.DBs) {
		conn := c.Connect(r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s, err := readSnapshot(ctx, conn, r, writers)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("reader on replica %d: %v", r+1, err)
					}
					return
				}
				mu.Lock()
				seen = append(seen, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) < 30 {
		t.Fatalf("only %d snapshots read", len(seen))
	}
	sort.Slice(seen, func(i, j int) bool { return sum(seen[i].counters) < sum(seen[j].counters) })
	for i := 1; i < len(seen); i++ {
		if !seen[i].dominates(seen[i-1]) {
			t.Fatalf("long fork: replica %d saw %v and replica %d saw %v", seen[i-1].replica+1, seen[i-1].counters, seen[i].replica+1, seen[i].counters)
		}
	}
	t.Logf("%d snapshots on 3 replicas, up to %v: all whole, all in one order", len(seen), seen[len(seen)-1].counters)
	c.converge()
}

func readSnapshot(ctx context.Context, conn *pgx.Conn, replica, writers int) (snapshot, error) {
	s := snapshot{replica: replica, counters: make([]int, writers)}
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT c.writer, c.n, (SELECT count(*) FROM events e WHERE e.writer = c.writer),
			(SELECT coalesce(max(e.n), 0) FROM events e WHERE e.writer = c.writer) FROM counters c ORDER BY c.writer`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w, n, count, maxN int
			if err := rows.Scan(&w, &n, &count, &maxN); err != nil {
				return err
			}
			if count != n || maxN != n {
				return fmt.Errorf("partial visibility: writer %d counter %d but %d events up to %d", w, n, count, maxN)
			}
			s.counters[w] = n
		}
		return rows.Err()
	})
	return s, err
}

func sum(xs []int) int {
	total := 0
	for _, x := range xs {
		total += x
	}
	return total
}
