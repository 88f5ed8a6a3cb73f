package verify

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// writeTable prints one table's result: a line, then its differing rows.
func writeTable(w io.Writer, replicas []string, t TableReport) {
	kind := ""
	if t.Keyless {
		kind = " (no primary key)"
	}
	switch {
	case t.missing():
		fmt.Fprintf(w, "%-40s DIFFERS: missing on %s%s\n", t.Name, strings.Join(missingOn(replicas, t.Rows), ", "), kind)
	case t.Columns != nil:
		fmt.Fprintf(w, "%-40s DIFFERS: its columns differ (rows not compared)%s\n", t.Name, kind)
		for i, c := range t.Columns {
			fmt.Fprintf(w, "    %s: %s\n", replicas[i], c)
		}
		return
	case t.Equal():
		fmt.Fprintf(w, "%-40s equal, %d rows%s\n", t.Name, t.Rows[0], kind)
	default:
		fmt.Fprintf(w, "%-40s DIFFERS: %d row(s) differ; rows per replica %s%s\n", t.Name, t.DiffsFound, rowCounts(replicas, t.Rows), kind)
	}
	for _, d := range t.Diffs {
		fmt.Fprintf(w, "    %s %s: %s\n", keyWord(t.Keyless), d.Key, describe(d, replicas, t.Keyless))
	}
	if n := t.DiffsFound - len(t.Diffs); n > 0 {
		fmt.Fprintf(w, "    ... and %d more\n", n)
	}
	if t.BucketsRead < t.BucketsDiffering {
		fmt.Fprintf(w, "    (rows read in %d of the %d buckets of rows that differ)\n", t.BucketsRead, t.BucketsDiffering)
	}
}

func keyWord(keyless bool) string {
	if keyless {
		return "row"
	}
	return "key"
}

// describe says what the odd replicas hold of a differing row; when no
// value has a majority, what each replica holds.
func describe(d RowDiff, replicas []string, keyless bool) string {
	noMajority := len(d.Odd) == len(replicas)
	var parts []string
	for i, name := range replicas {
		if !slices.Contains(d.Odd, name) {
			continue
		}
		switch {
		case d.Values[i] == "":
			parts = append(parts, name+" lacks it")
		case keyless:
			parts = append(parts, fmt.Sprintf("%s has %s of it", name, d.Values[i]))
		case noMajority:
			parts = append(parts, fmt.Sprintf("%s has it (row hash %s)", name, d.Values[i]))
		default:
			parts = append(parts, name+" has other values")
		}
	}
	return strings.Join(parts, "; ")
}

func missingOn(replicas []string, rows []int64) []string {
	var out []string
	for i, n := range rows {
		if n < 0 {
			out = append(out, replicas[i])
		}
	}
	return out
}

func rowCounts(replicas []string, rows []int64) string {
	parts := make([]string, len(rows))
	for i, n := range rows {
		parts[i] = fmt.Sprintf("%s=%d", replicas[i], n)
	}
	return strings.Join(parts, " ")
}

// WriteSummary prints the comparison's header line and its verdict.
func (r *Report) WriteSummary(w io.Writer) {
	rows := int64(0)
	for _, t := range r.Tables {
		if len(t.Rows) > 0 && t.Rows[0] > 0 {
			rows += t.Rows[0]
		}
	}
	if n := r.Differences(); n > 0 {
		fmt.Fprintf(w, "%d of %d tables differ between %s at version %d (commits held %s; %s in all)\n",
			n, len(r.Tables), strings.Join(r.Replicas, ", "), r.Version, r.Held.Round(10*time.Microsecond), r.Elapsed.Round(time.Millisecond))
		return
	}
	fmt.Fprintf(w, "%s are equal at version %d: %d tables, %d rows (commits held %s; %s in all)\n",
		strings.Join(r.Replicas, ", "), r.Version, len(r.Tables), rows, r.Held.Round(10*time.Microsecond), r.Elapsed.Round(time.Millisecond))
}

// WriteDifferences prints the tables that differ, with their rows.
func (r *Report) WriteDifferences(w io.Writer) {
	for _, t := range r.Tables {
		if !t.Equal() {
			writeTable(w, r.Replicas, t)
		}
	}
}

// Odd names the replicas that differ from the majority in some table,
// and reports whether each difference has a majority (a table missing, or
// with other columns, on a minority of the replicas; each differing row
// agreed on by a majority) and some replica agrees with every majority:
// only then can the odd ones be told wrong and one be copied from.
func (r *Report) Odd() (odd []string, majority bool) {
	seen := make(map[string]bool)
	majority = true
	mark := func(names []string) {
		if len(names) == len(r.Replicas) {
			majority = false
		}
		for _, n := range names {
			seen[n] = true
		}
	}
	for _, t := range r.Tables {
		switch {
		case t.missing():
			mark(minority(r.Replicas, func(i int) string { return fmt.Sprint(t.Rows[i] < 0) }))
		case t.Columns != nil:
			mark(minority(r.Replicas, func(i int) string { return t.Columns[i] }))
		}
		majority = majority && !t.NoMajority
		mark(t.OddReplicas)
	}
	for _, n := range r.Replicas {
		if seen[n] {
			odd = append(odd, n)
		}
	}
	return odd, majority && len(odd) < len(r.Replicas)
}

// minority are the replicas whose value is not the most common one (all
// of them when none is more common than the rest).
func minority(replicas []string, value func(i int) string) []string {
	values := make([]string, len(replicas))
	for i := range replicas {
		values[i] = value(i)
	}
	return oddOnes(values, replicas)
}
