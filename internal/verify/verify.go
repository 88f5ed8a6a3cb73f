// Package verify compares the contents of a cluster's replicas online, at
// one common version, table by table, down to the rows that differ
// (`tashkent verify`).
//
// Every replica makes its commits visible in version order, so a snapshot
// holds every version up to some v and none after. To compare replicas,
// each opens a REPEATABLE READ transaction whose snapshot holds the same
// v: their agents hold commits after v for the few milliseconds it takes
// (tashkent.hold_commits, extension/src/hold.c), while the certifier and
// the other replicas go on. Then each table is hashed per bucket of rows
// on every replica at once, and only the buckets whose hashes differ are
// read row by row. A row is named by its primary key; in a table without
// one, by its text, and what is compared is how many such rows there are.
// Sequences are not compared: each replica hands out its own values.
package verify

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replica is one replica to compare: a name for the report and a
// connection string (a superuser's: holding commits needs one).
type Replica struct {
	Name string
	DSN  string
	// Config, if set, is used instead of DSN.
	Config *pgx.ConnConfig
}

// Options of a comparison.
type Options struct {
	Replicas []Replica
	// HoldMax bounds how long a replica's commits stay held (the agent
	// ends the hold then even if this process died).
	HoldMax time.Duration
	// RowsShownMax bounds the differing rows listed per table.
	RowsShownMax int
	// Progress, if set, gets a line per table as it is compared.
	Progress io.Writer
}

// Report is what a comparison found.
type Report struct {
	Replicas []string
	Version  uint64        // the version every replica was compared at
	Held     time.Duration // how long commits were held
	Tables   []TableReport
	Elapsed  time.Duration
}

// TableReport is one table's result.
type TableReport struct {
	Name    string
	Keyless bool
	Rows    []int64 // per replica; -1: the table is missing there
	Diffs   []RowDiff
	// DiffsFound counts every differing row, listed or not.
	DiffsFound int
}

// Equal reports whether the table is the same on every replica.
func (t TableReport) Equal() bool { return t.DiffsFound == 0 && !t.missing() }

func (t TableReport) missing() bool { return slices.Contains(t.Rows, -1) }

// RowDiff is a row that is not the same everywhere.
type RowDiff struct {
	Key string // the primary key as a row, or the row's text when keyless
	// Values per replica: a hash of the row (a count of equal rows when
	// keyless), "" where the row is missing.
	Values []string
	// Odd are the replicas that differ from the majority; all of them when
	// no value has one.
	Odd []string
}

// Differences counts the tables that are not equal.
func (r *Report) Differences() int {
	n := 0
	for _, t := range r.Tables {
		if !t.Equal() {
			n++
		}
	}
	return n
}

// Run compares the replicas.
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.Replicas) < 2 {
		return nil, fmt.Errorf("verify: %d replica(s): there is nothing to compare", len(o.Replicas))
	}
	if o.HoldMax <= 0 {
		o.HoldMax = 10 * time.Second
	}
	if o.RowsShownMax <= 0 {
		o.RowsShownMax = 20
	}
	start := time.Now()
	ss, err := connect(ctx, o.Replicas)
	if err != nil {
		return nil, err
	}
	defer closeAll(ss)
	v, held, err := snapshot(ctx, ss, o.HoldMax)
	if err != nil {
		return nil, fmt.Errorf("verify: take a snapshot at one version on every replica: %w", err)
	}
	r := &Report{Version: v, Held: held}
	for _, s := range ss {
		r.Replicas = append(r.Replicas, s.name)
	}
	if err := r.compareTables(ctx, ss, o); err != nil {
		return nil, err
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

func (r *Report) compareTables(ctx context.Context, ss []*session, o Options) error {
	lists := make([][]Table, len(ss))
	err := each(ctx, ss, func(ctx context.Context, s *session) (err error) {
		lists[indexOf(ss, s)], err = listTables(ctx, s)
		return err
	})
	if err != nil {
		return err
	}
	for _, t := range unionOf(lists) {
		tr, err := compareTable(ctx, ss, t, present(lists, t.Name), o.RowsShownMax)
		if err != nil {
			return err
		}
		r.Tables = append(r.Tables, tr)
		if o.Progress != nil {
			writeTable(o.Progress, r.Replicas, tr)
		}
	}
	return nil
}

// compareTable compares one table on the replicas that have it (has).
func compareTable(ctx context.Context, ss []*session, t Table, has []bool, shown int) (TableReport, error) {
	tr := TableReport{Name: t.Name, Keyless: len(t.Key) == 0, Rows: make([]int64, len(ss))}
	ds := make([]digest, len(ss))
	err := each(ctx, ss, func(ctx context.Context, s *session) (err error) {
		i := indexOf(ss, s)
		if !has[i] {
			tr.Rows[i] = -1
			return nil
		}
		ds[i], err = tableDigest(ctx, s, t)
		tr.Rows[i] = ds[i].rows
		return err
	})
	if err != nil || tr.missing() {
		return tr, err
	}
	bs := differingBuckets(ds)
	if len(bs) == 0 {
		return tr, nil
	}
	rows := make([]map[string]string, len(ss))
	err = each(ctx, ss, func(ctx context.Context, s *session) (err error) {
		rows[indexOf(ss, s)], err = rowsIn(ctx, s, t, bs)
		return err
	})
	if err != nil {
		return tr, err
	}
	tr.Diffs, tr.DiffsFound = diffRows(rows, names(ss), shown)
	return tr, nil
}

func names(ss []*session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.name
	}
	return out
}

// unionOf is every table some replica has, by name; the key is the first
// replica's that has it.
func unionOf(lists [][]Table) []Table {
	seen := make(map[string]bool)
	var out []Table
	for _, l := range lists {
		for _, t := range l {
			if !seen[t.Name] {
				seen[t.Name] = true
				out = append(out, t)
			}
		}
	}
	slices.SortFunc(out, func(a, b Table) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func present(lists [][]Table, name string) []bool {
	has := make([]bool, len(lists))
	for i, l := range lists {
		has[i] = slices.ContainsFunc(l, func(t Table) bool { return t.Name == name })
	}
	return has
}

// diffRows lists the rows whose values are not the same on every replica
// (at most shown of them, in key order) and counts them all.
func diffRows(rows []map[string]string, replicas []string, shown int) ([]RowDiff, int) {
	keys := make(map[string]bool)
	for _, m := range rows {
		for k := range m {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	var diffs []RowDiff
	found := 0
	for _, k := range sorted {
		values := make([]string, len(rows))
		for i, m := range rows {
			values[i] = m[k]
		}
		odd := oddOnes(values, replicas)
		if len(odd) == 0 {
			continue
		}
		found++
		if len(diffs) < shown {
			diffs = append(diffs, RowDiff{Key: k, Values: values, Odd: odd})
		}
	}
	return diffs, found
}

// oddOnes are the replicas whose value differs from the majority's, every
// replica when no value has a majority, none when all agree.
func oddOnes(values, replicas []string) []string {
	count := make(map[string]int)
	for _, v := range values {
		count[v]++
	}
	if len(count) == 1 {
		return nil
	}
	majority, best := "", 0
	for v, n := range count {
		if n > best {
			majority, best = v, n
		}
	}
	var odd []string
	for i, v := range values {
		if 2*best <= len(values) || v != majority {
			odd = append(odd, replicas[i])
		}
	}
	return odd
}
