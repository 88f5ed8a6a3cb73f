package verify

import (
	"slices"
	"testing"
)

// Odd names the replicas against the majority of each difference, and
// says when some difference has none.
func TestOddReplicas(t *testing.T) {
	three := []string{"r1", "r2", "r3"}
	for _, tc := range []struct {
		name     string
		tables   []TableReport
		odd      []string
		majority bool
	}{
		{"rows, one replica odd", []TableReport{{Rows: []int64{5, 5, 5}, BucketsDiffering: 1, OddReplicas: []string{"r2"}}}, []string{"r2"}, true},
		{"two tables, two odd replicas, r1 agrees everywhere",
			[]TableReport{{Rows: []int64{5, 5, 5}, OddReplicas: []string{"r2"}}, {Rows: []int64{5, 5, 5}, OddReplicas: []string{"r3"}}},
			[]string{"r2", "r3"}, true},
		{"a row without a majority", []TableReport{{Rows: []int64{5, 5, 5}, OddReplicas: three, NoMajority: true}}, three, false},
		{"a table missing on one", []TableReport{{Rows: []int64{5, -1, 5}}}, []string{"r2"}, true},
		{"other columns on one", []TableReport{{Rows: []int64{5, 5, 5}, Columns: []string{"a int", "a int", "a text"}}}, []string{"r3"}, true},
	} {
		r := &Report{Replicas: three, Tables: tc.tables}
		odd, majority := r.Odd()
		if !slices.Equal(odd, tc.odd) || majority != tc.majority {
			t.Errorf("%s: Odd() = %v, %v; want %v, %v", tc.name, odd, majority, tc.odd, tc.majority)
		}
	}
}
