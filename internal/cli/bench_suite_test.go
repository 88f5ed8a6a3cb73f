package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/bench"
)

// The flags of the eventual-durability experiments reach the suite's
// checks, which refuse bad values before anything starts.
func TestBenchSuiteEventualDurabilityFlags(t *testing.T) {
	for _, tc := range []struct {
		workload bench.Workload
		args     []string
		want     string
	}{
		{bench.Mixed, []string{"--fast-share", "0,12.5"}, "fast share 12.5: must be a whole percent"},
		{bench.Mixed, []string{"--fast-share", "0,x"}, "--fast-share"},
		{bench.Mixed, []string{"--systems", "mw-fast,mw-safe"}, "give one of them"},
		{bench.Contention, []string{"--c", "0.5,1"}, "contention level c = 1"},
		{bench.Contention, []string{"--isolation", "read-committed"}, `--isolation "read-committed"`},
		{bench.Contention, []string{"--rate", "-5"}, "rate -5"},
		{bench.OLTPReadWrite, []string{"--rate", "100"}, "sysbench workloads do not take it"},
		{bench.Mixed, []string{"--systems", "mw-ed"}, `unknown system "mw-ed"`},
	} {
		cmd := newBenchSuiteCommand(tc.workload)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--systems", "sync-on"}, tc.args...))
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want an error with %q", tc.workload, tc.args, err, tc.want)
		}
	}
	if got, err := parseIsolation("serializable"); err != nil || got != "serializable" {
		t.Errorf("serializable: %q %v", got, err)
	}
	if got, err := parseIsolation("repeatable-read"); err != nil || got != "repeatable read" {
		t.Errorf("repeatable-read: %q %v", got, err)
	}
}
