package compat

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// knownBug is a known bug of tashkent: a client behaviour that works
// directly against PostgreSQL and fails on a replica of the cluster.
type knownBug struct {
	id      string
	summary string
	// scenarios ("suite/scenario", or "suite/*" for all of a suite's) that
	// fail on the cluster because of it. Each is an expected failure
	// there, and only there.
	scenarios []string
}

// knownBugs is THE list of expected failures. Nothing else in this package
// marks a scenario as expected to fail. When a bug is fixed its scenarios
// pass on the cluster and the test fails until the entry is removed here.
var knownBugs = []knownBug{}

// knownBugOf returns the id of the known bug that makes a suite's scenario
// fail on the cluster, or "".
func knownBugOf(suiteName, scenario string) string {
	key := suiteName + "/" + scenario
	for _, b := range knownBugs {
		for _, s := range b.scenarios {
			if s == key || s == suiteName+"/*" {
				return b.id
			}
		}
	}
	return ""
}

func printKnownBugs(t *testing.T) {
	var lines []string
	for _, b := range knownBugs {
		sc := append([]string(nil), b.scenarios...)
		sort.Strings(sc)
		lines = append(lines, fmt.Sprintf("KNOWN BUG %s: %s\n    expected to fail on the cluster: %s", b.id, b.summary, strings.Join(sc, ", ")))
	}
	if len(lines) > 0 {
		t.Logf("\n%s\n(list: knownBugs in internal/compat/known_bugs_test.go)", strings.Join(lines, "\n"))
	}
}
