package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table is a replicated table as the catalog of one replica describes it.
type Table struct {
	Name    string   // schema-qualified, quoted as needed
	Key     []string // the primary key's columns, quoted; empty: keyless
	Columns string   // its columns and their types, in order
}

// buckets spread a table's rows by a hash of their key (of the whole row
// for a table without a primary key): a table is compared bucket by
// bucket, and only the rows of buckets that differ are read.
const buckets = 1024

// tablesQuery lists the tables tashkent replicates: every ordinary table
// that is not temporary, outside the system schemas and tashkent's own.
const tablesQuery = `
SELECT format('%I.%I', n.nspname, c.relname),
       coalesce((SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord)
                   FROM pg_index i
                        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                  WHERE i.indrelid = c.oid AND i.indisprimary), '{}'),
       coalesce((SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
                   FROM pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND c.relpersistence <> 't'
   AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'tashkent')
   AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%'
 ORDER BY 1`

// listTables lists the tables the session's snapshot compares.
func listTables(ctx context.Context, s *session) ([]Table, error) {
	rows, err := s.conn.Query(ctx, tablesQuery)
	if err != nil {
		return nil, fmt.Errorf("%s: list tables: %w", s.name, err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Table, error) {
		var t Table
		err := r.Scan(&t.Name, &t.Key, &t.Columns)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list tables: %w", s.name, err)
	}
	return ts, nil
}

// rowText is a row's text. The alias is qualified with .*: a column named
// like the alias would otherwise be taken for the row.
const rowText = "(t.*)::text"

// keyExpr is the text a row is identified by: its primary key, or the
// whole row in a table without one (whose equal rows are counted).
func (t Table) keyExpr() string {
	if len(t.Key) == 0 {
		return rowText
	}
	cols := make([]string, len(t.Key))
	for i, c := range t.Key {
		cols[i] = "t." + c
	}
	return "ROW(" + strings.Join(cols, ", ") + ")::text"
}

// valueExpr is what is compared for a row: a hash of the whole row, or,
// in a table without a key, how many equal rows there are.
func (t Table) valueExpr() string {
	if len(t.Key) == 0 {
		return "count(*)::text"
	}
	return "hashtextextended(" + rowText + ", 0)::text"
}

func (t Table) groupBy() string {
	if len(t.Key) == 0 {
		return " GROUP BY 1"
	}
	return ""
}

// digest is a table's contents on one replica: per bucket, its rows and
// the sum of their row hashes.
type digest struct {
	rows    int64
	buckets map[int32]bucketSum
}

type bucketSum struct {
	rows int64
	sum  string // numeric: the sum of 64-bit hashes does not overflow
}

func tableDigest(ctx context.Context, s *session, t Table) (digest, error) {
	q := fmt.Sprintf(`SELECT (hashtextextended(%s, 0) & %d)::int, count(*), sum(hashtextextended(%s, 0)::numeric)::text
  FROM ONLY %s AS t GROUP BY 1`, t.keyExpr(), buckets-1, rowText, t.Name)
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return digest{}, fmt.Errorf("%s: %s: %w", s.name, t.Name, err)
	}
	d := digest{buckets: make(map[int32]bucketSum)}
	var b int32
	var sum bucketSum
	_, err = pgx.ForEachRow(rows, []any{&b, &sum.rows, &sum.sum}, func() error {
		d.buckets[b] = sum
		d.rows += sum.rows
		return nil
	})
	if err != nil {
		return digest{}, fmt.Errorf("%s: %s: %w", s.name, t.Name, err)
	}
	return d, nil
}

// differingBuckets are the buckets whose sums are not the same on every
// replica.
func differingBuckets(ds []digest) []int32 {
	seen := make(map[int32]bool)
	var out []int32
	for _, d := range ds {
		for b := range d.buckets {
			if seen[b] {
				continue
			}
			seen[b] = true
			for _, other := range ds {
				if other.buckets[b] != d.buckets[b] {
					out = append(out, b)
					break
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// rowsIn reads the key and value of every row of the given buckets.
func rowsIn(ctx context.Context, s *session, t Table, bs []int32) (map[string]string, error) {
	q := fmt.Sprintf(`SELECT %s, %s FROM ONLY %s AS t
 WHERE (hashtextextended(%s, 0) & %d)::int = ANY($1)%s`,
		t.keyExpr(), t.valueExpr(), t.Name, t.keyExpr(), buckets-1, t.groupBy())
	rows, err := s.conn.Query(ctx, q, bs)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.name, t.Name, err)
	}
	m := make(map[string]string)
	var k, v string
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		m[k] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.name, t.Name, err)
	}
	return m, nil
}
