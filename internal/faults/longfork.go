package faults

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// The long-fork workload (Jepsen's long-fork test; the anomaly Jepsen found
// in RDS PostgreSQL's multi-AZ clusters in 2025). Writers insert keys, each
// key once, in its own transaction, on every replica. Readers read a
// group of keys in one snapshot on some replica. Keys are never deleted, so
// the reads of one group must form a chain under inclusion: if one read saw
// x but not y and another saw y but not x, two replicas committed x and y
// in opposite orders. The extension makes commits visible in the
// certifier's version order on every replica (Tashkent §6.2 C5, turn.c)
// precisely to rule that out.

const (
	// lfGroupSize is the number of keys read together.
	lfGroupSize = 4
	// lfForksKept bounds how many forks are described.
	lfForksKept = 20
)

type longFork struct {
	table   string
	nextKey atomic.Int64

	mu       sync.Mutex
	reads    map[int][]lfRead // group -> reads
	nReads   int
	inserted map[int]bool // keys whose insert was acknowledged
}

type lfRead struct {
	replica string
	keys    map[int]bool
}

func newLongFork(table string) *longFork {
	return &longFork{table: table, reads: map[int][]lfRead{}, inserted: map[int]bool{}}
}

func (w *longFork) createSQL() string {
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (k int PRIMARY KEY, g int NOT NULL)", w.table)
}

// step inserts the next key or reads the group being written.
func (w *longFork) step(ctx context.Context, c *client) {
	if c.rng.IntN(3) == 0 {
		k := int(w.nextKey.Add(1) - 1)
		t, _ := c.txn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (k, g) VALUES ($1, $2)", w.table), k, k/lfGroupSize)
			return err
		})
		if t == OK {
			w.mu.Lock()
			w.inserted[k] = true
			w.mu.Unlock()
		}
		return
	}
	g := int(w.nextKey.Load()) / lfGroupSize
	if g > 0 && c.rng.IntN(2) == 0 {
		g-- // the previous group may still be filling on lagging replicas
	}
	var keys map[int]bool
	t, _ := c.txn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT k FROM %s WHERE g = $1", w.table), g)
		if err != nil {
			return err
		}
		ks, err := pgx.CollectRows(rows, pgx.RowTo[int])
		keys = map[int]bool{}
		for _, k := range ks {
			keys[k] = true
		}
		return err
	})
	if t != OK {
		return
	}
	w.mu.Lock()
	w.reads[g] = append(w.reads[g], lfRead{replica: c.ep.Replica, keys: keys})
	w.nReads++
	w.mu.Unlock()
}

// forks returns every pair of reads of one group that disagree on the
// order of two inserts (neither saw a superset of the other).
func (w *longFork) forks() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	groups := make([]int, 0, len(w.reads))
	for g := range w.reads {
		groups = append(groups, g)
	}
	sort.Ints(groups)
	for _, g := range groups {
		rs := w.reads[g]
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				x, y := onlyIn(rs[i].keys, rs[j].keys), onlyIn(rs[j].keys, rs[i].keys)
				if len(x) > 0 && len(y) > 0 && len(out) < lfForksKept {
					out = append(out, fmt.Sprintf("group %d: a read on %s saw %v but not %v; a read on %s saw %v but not %v",
						g, rs[i].replica, x, y, rs[j].replica, y, x))
				}
			}
		}
	}
	return out
}

func onlyIn(a, b map[int]bool) []int {
	var out []int
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Ints(out)
	return out
}

// lost returns the acknowledged inserts missing from a replica's final keys.
func (w *longFork) lost(final map[int]bool) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var missing []string
	for k := range w.inserted {
		if !final[k] {
			missing = append(missing, fmt.Sprint(k))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return []string{fmt.Sprintf("%s: acknowledged inserts of keys %s missing", w.table, strings.Join(missing, ", "))}
}

func (w *longFork) readAll(ctx context.Context, conn *pgx.Conn) (map[int]bool, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT k FROM %s", w.table))
	if err != nil {
		return nil, err
	}
	ks, err := pgx.CollectRows(rows, pgx.RowTo[int])
	out := map[int]bool{}
	for _, k := range ks {
		out[k] = true
	}
	return out, err
}

func (w *longFork) counts() (reads, inserts int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nReads, len(w.inserted)
}
