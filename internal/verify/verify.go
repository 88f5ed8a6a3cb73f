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
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/pgcode"
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
	Replicas []string      `json:"replicas"`
	Version  uint64        `json:"version"` // the version every replica was compared at
	Held     time.Duration `json:"held_ns"` // how long commits were held
	Tables   []TableReport `json:"tables"`
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// TableReport is one table's result.
type TableReport struct {
	Name    string  `json:"name"`
	Keyless bool    `json:"keyless"`
	Rows    []int64 `json:"rows"` // per replica; -1: the table is missing there
	// Columns are the table's columns per replica, when they differ (its
	// rows are not compared then).
	Columns []string  `json:"columns,omitempty"`
	Diffs   []RowDiff `json:"diffs,omitempty"`
	// DiffsFound counts the differing rows in the buckets read, listed or
	// not; BucketsRead of BucketsDiffering buckets were read row by row.
	DiffsFound       int `json:"diffs_found"`
	BucketsDiffering int `json:"buckets_differing"`
	BucketsRead      int `json:"buckets_read"`
	// OddReplicas differ from the majority in some differing row;
	// NoMajority: some differing row has no majority.
	OddReplicas []string `json:"odd_replicas,omitempty"`
	NoMajority  bool     `json:"no_majority,omitempty"`
}

// Equal reports whether the table is the same on every replica.
func (t TableReport) Equal() bool {
	return t.BucketsDiffering == 0 && !t.missing() && t.Columns == nil
}

func (t TableReport) missing() bool { return slices.Contains(t.Rows, -1) }

// RowDiff is a row that is not the same everywhere.
type RowDiff struct {
	Key string `json:"key"` // the primary key as a row, or the row's text when keyless
	// Values per replica: a hash of the row (a count of equal rows when
	// keyless), "" where the row is missing.
	Values []string `json:"values"`
	// Odd are the replicas that differ from the majority; all of them when
	// no value has one.
	Odd []string `json:"odd"`
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

// attempts bounds the tries at a snapshot and a scan: a hold that lapsed,
// a DDL or TRUNCATE under way or arriving from another replica, another
// session holding a replica's commits make one fail, and the next one
// usually gets through; retryPause apart, doubled each time, so that an
// agent's hold for a pin at a barrier (up to a few seconds) can end.
const (
	attempts   = 4
	retryPause = 500 * time.Millisecond
)

// Run compares the replicas.
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.Replicas) < 2 {
		return nil, fmt.Errorf("verify: %d replica(s): there is nothing to compare", len(o.Replicas))
	}
	o = o.withDefaults()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		r, err := runOnce(ctx, o)
		if err == nil {
			r.Elapsed = time.Since(start)
			return r, nil
		}
		if !errors.Is(err, errRetry) || attempt == attempts || ctx.Err() != nil {
			return nil, err
		}
		if err := ctxtime.Sleep(ctx, retryPause<<(attempt-1)); err != nil {
			return nil, err
		}
	}
}

func (o Options) withDefaults() Options {
	if o.HoldMax <= 0 {
		o.HoldMax = 10 * time.Second
	}
	if o.RowsShownMax <= 0 {
		o.RowsShownMax = 20
	}
	return o
}

// reach bounds a round of holds: how long held replicas wait for the
// slowest one to get to the version.
func (o Options) reach() time.Duration { return min(o.HoldMax/2, 2*time.Second) }

// runOnce takes the snapshots and compares every table, with sessions of
// its own: on an error they are closed, which ends every hold.
func runOnce(ctx context.Context, o Options) (*Report, error) {
	ss, err := connect(ctx, o.Replicas)
	if err != nil {
		return nil, err
	}
	defer closeAll(ss)
	v, held, err := snapshot(ctx, ss, o)
	if err != nil {
		return nil, fmt.Errorf("verify: take a snapshot at one version on every replica: %w", err)
	}
	r := &Report{Version: v, Held: held, Replicas: names(ss)}
	if err := r.compareTables(ctx, ss, o); err != nil {
		return nil, scanError(err)
	}
	return r, nil
}

// scanError names why a scan was interrupted: the lock watch of a replica
// cancels, then ends, a session whose table lock holds up a DDL or
// TRUNCATE from another replica (Tashkent §8.2); a new attempt starts
// after it.
func scanError(err error) error {
	switch pgcode.Of(err) {
	case pgcode.QueryCanceled, pgcode.AdminShutdown:
		return fmt.Errorf("verify: %w: a DDL or TRUNCATE from another replica needed a table being compared: %v", errRetry, err)
	}
	return fmt.Errorf("verify: %w", err)
}

func (r *Report) compareTables(ctx context.Context, ss []*session, o Options) error {
	lists := make([][]Table, len(ss))
	for i, s := range ss {
		lists[i] = s.tables
	}
	for _, t := range unionOf(lists) {
		tr, err := compareTable(ctx, ss, t, present(lists, t), o.RowsShownMax)
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

// bucketsReadMax bounds the differing buckets read row by row per table,
// and so the rows held in memory: a replica whose table differs
// everywhere shows plenty in that many.
const bucketsReadMax = 64

// compareTable compares one table on the replicas, given its columns on
// each ("" where it is missing).
func compareTable(ctx context.Context, ss []*session, t Table, columns []string, shown int) (TableReport, error) {
	tr := TableReport{Name: t.Name, Keyless: len(t.Key) == 0, Rows: make([]int64, len(ss))}
	for i, c := range columns {
		if c == "" {
			tr.Rows[i] = -1
		}
	}
	if tr.missing() {
		return tr, nil
	}
	if !allEqual(columns) {
		tr.Columns = columns
		return tr, nil
	}
	ds := make([]digest, len(ss))
	err := each(ctx, ss, func(ctx context.Context, s *session) (err error) {
		i := indexOf(ss, s)
		ds[i], err = tableDigest(ctx, s, t)
		tr.Rows[i] = ds[i].rows
		return err
	})
	if err != nil {
		return tr, err
	}
	bs := differingBuckets(ds)
	if len(bs) == 0 {
		return tr, nil
	}
	tr.BucketsDiffering = len(bs)
	bs = bs[:min(len(bs), bucketsReadMax)]
	tr.BucketsRead = len(bs)
	rows := make([]map[string]string, len(ss))
	err = each(ctx, ss, func(ctx context.Context, s *session) (err error) {
		rows[indexOf(ss, s)], err = rowsIn(ctx, s, t, bs)
		return err
	})
	if err != nil {
		return tr, err
	}
	d := diffRows(rows, names(ss), shown)
	tr.Diffs, tr.DiffsFound, tr.OddReplicas, tr.NoMajority = d.listed, d.found, d.odd, d.noMajority
	return tr, nil
}

func allEqual(ss []string) bool {
	for _, s := range ss {
		if s != ss[0] {
			return false
		}
	}
	return true
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

// present says, per replica, whether it has the table, and with which
// columns (its definition as text; "" where it is missing).
func present(lists [][]Table, t Table) []string {
	columns := make([]string, len(lists))
	for i, l := range lists {
		if j := slices.IndexFunc(l, func(u Table) bool { return u.Name == t.Name }); j >= 0 {
			columns[i] = l[j].Columns
		}
	}
	return columns
}

// rowDiffs are the differing rows of a table's buckets read.
type rowDiffs struct {
	listed []RowDiff // at most shown of them, in key order
	found  int       // all of them
	// odd are the replicas that differ from the majority in some row;
	// noMajority: in some row no value has a majority.
	odd        []string
	noMajority bool
}

// diffRows finds the rows whose values are not the same on every replica.
func diffRows(rows []map[string]string, replicas []string, shown int) rowDiffs {
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
	var d rowDiffs
	oddSeen := make(map[string]bool)
	for _, k := range sorted {
		values := make([]string, len(rows))
		for i, m := range rows {
			values[i] = m[k]
		}
		odd := oddOnes(values, replicas)
		if len(odd) == 0 {
			continue
		}
		d.found++
		d.noMajority = d.noMajority || len(odd) == len(replicas)
		for _, n := range odd {
			oddSeen[n] = true
		}
		if len(d.listed) < shown {
			d.listed = append(d.listed, RowDiff{Key: k, Values: values, Odd: odd})
		}
	}
	for _, n := range replicas {
		if oddSeen[n] {
			d.odd = append(d.odd, n)
		}
	}
	return d
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
