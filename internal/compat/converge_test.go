package compat

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// convergeLimit bounds the wait for every replica to apply what the
// certifier has made durable, on a machine shared with other tests.
const convergeLimit = 2 * time.Minute

// upSettings are the PostgreSQL settings `tashkent up` gives its replicas
// that change what a client sees (internal/cluster): the tools run
// against what a user of `tashkent up` gets.
var upSettings = map[string]string{"default_transaction_isolation": "repeatable read"}

// schemaSQL describes the public schema as every replica must hold it:
// columns, indexes, constraints and sequences, without owners (replicated
// DDL runs as the agent's role on the other replicas) and without sequence
// positions (each replica hands out its own values).
const schemaSQL = `
SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type
	|| coalesce('(' || character_maximum_length || ')', '') || ' nullable=' || is_nullable
	|| ' default=' || coalesce(column_default, '-')
FROM information_schema.columns WHERE table_schema = 'public'
UNION ALL
SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = 'public'::regnamespace
UNION ALL
SELECT 'sequence ' || sequencename || ' ' || data_type || ' increment ' || increment_by
FROM pg_sequences WHERE schemaname = 'public'
ORDER BY 1`

// schemaOf returns replica i's public schema, one line per object.
func schemaOf(t *testing.T, c *clustertest.Cluster, i int) string {
	t.Helper()
	rows, err := pgtest.Connect(t, c.DBs[i], compatDatabase).Query(context.Background(), schemaSQL)
	if err != nil {
		t.Fatalf("replica %d: %v", i+1, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("replica %d: %v", i+1, err)
	}
	return strings.Join(lines, "\n")
}

// sameSchema waits until every replica has applied every durable version,
// checks that all hold replica 1's schema, and returns it.
func sameSchema(t *testing.T, c *clustertest.Cluster) string {
	t.Helper()
	c.AwaitConverged(convergeLimit)
	first := schemaOf(t, c, 0)
	for i := 1; i < len(c.DBs); i++ {
		if got := schemaOf(t, c, i); got != first {
			t.Fatalf("replica %d's schema differs from replica 1's:\n--- replica %d\n%s\n--- replica 1\n%s", i+1, i+1, got, first)
		}
	}
	return first
}

// sameData waits until every replica has applied every durable version and
// checks that all hold replica 1's rows, table by table
// (replica.Checksum). The writers must have stopped.
func sameData(t *testing.T, c *clustertest.Cluster) map[string]string {
	t.Helper()
	c.AwaitConverged(convergeLimit)
	ctx := context.Background()
	var first map[string]string
	for i := range c.DBs {
		sums, err := replica.Checksum(ctx, pgtest.Connect(t, c.DBs[i], compatDatabase))
		if err != nil {
			t.Fatalf("replica %d: %v", i+1, err)
		}
		if i == 0 {
			first = sums
			continue
		}
		if !maps.Equal(sums, first) {
			t.Fatalf("replica %d's tables differ from replica 1's:\n%v\n%v", i+1, sums, first)
		}
	}
	return first
}

// countOn runs sql, which returns one integer, on replica i.
func countOn(t *testing.T, c *clustertest.Cluster, i int, sql string) int64 {
	t.Helper()
	var n int64
	if err := pgtest.Connect(t, c.DBs[i], compatDatabase).QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("replica %d: %s: %v", i+1, sql, err)
	}
	return n
}

// awaitCount waits until sql, which returns one integer, gives more than
// floor on replica i, and returns it.
func awaitCount(t *testing.T, c *clustertest.Cluster, i int, sql string, floor int64, what string) int64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if n := countOn(t, c, i, sql); n > floor {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d: %s: still at most %d after a minute (%s)", i+1, what, floor, sql)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describeCounts(sums map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		n, _, _ := strings.Cut(sums[k], ":")
		fmt.Fprintf(&b, " %s=%s", k, n)
	}
	return strings.TrimSpace(b.String())
}
