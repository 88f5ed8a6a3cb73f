package faults

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestShortProfile is the fault test CI runs on every change: a real
// 3-replica mw cluster (PostgreSQL 15 with the extension, agents, certifier
// as processes), every fault kind, all checkers, and the detector
// self-test. Among the faults, under load: kill -9 of a postmaster, of a
// backend that holds or waits for the commit turn, of an agent and of the
// certifier, with no acknowledged commit lost. It fails when adya is
// missing: a fault test that does not run must not pass.
func TestShortProfile(t *testing.T) {
	cfg := ShortProfile()
	if testing.Short() {
		cfg.Duration = 25 * time.Second
		cfg.SelfTestDuration = 6 * time.Second
	}
	sum := runProfile(t, cfg, AllFaults)
	for _, r := range []string{"replica1", "replica2", "replica3"} {
		if sum.RelayConnections[r] == 0 {
			t.Errorf("no connection of %s crossed its own veth to the certifier: partitions cannot isolate it (%v)", r, sum.RelayConnections)
		}
	}
	if sum.SelfTest == nil || !sum.SelfTest.Detected {
		t.Error("the self-test did not run or did not detect the disabled conflict check")
	}
	if n, turn := sum.BackendKills(); turn == 0 {
		t.Errorf("none of the %d kill-backend faults hit a backend holding or waiting for the commit turn", n)
	}
	if sum.AcknowledgedCommits == 0 || len(sum.Lost) > 0 {
		t.Errorf("durability: %d acknowledged writes checked, %d lost", sum.AcknowledgedCommits, len(sum.Lost))
	}
}

// TestEDShortProfile is the fault test of mode ed CI runs: a real
// 3-replica ed cluster whose certifier waits before writing each batch
// (its hidden fault flag), half of the list-append transactions fast, and
// kill -9 of the certifier between kills of the other processes. Each
// certifier kill fails the versions it decided and had not written; the
// checks (ed.go) require every fast commit to end durable or failed, every
// acknowledged safe commit durable, every FATAL TK006 failed, no replica
// keeping a failed write, and adya to find no transaction that read a
// failed one's write and did not fail with it. A run in which nothing
// failed proves nothing and fails.
func TestEDShortProfile(t *testing.T) {
	e := runEDProfile(t, EDShortProfile(), EDFaults)
	if e.FailedVersions == 0 || e.FastFailed == 0 {
		t.Errorf("no failure exercised: %d versions failed at certifier kills, %d fast commits failed", e.FailedVersions, e.FastFailed)
	}
}

// TestEDGroupShortProfile is the ed profile against a certifier group:
// the leader killed or cut off with versions no other member received.
func TestEDGroupShortProfile(t *testing.T) {
	e := runEDProfile(t, EDGroupShortProfile(), EDGroupFaults)
	if e.FastFailed+e.SafeFailed == 0 {
		t.Errorf("no failure exercised: no fast commit failed and no safe commit got TK006 (%d fast, %d safe commits)", e.FastCommits, e.SafeCommits)
	}
}

// runEDProfile runs a mode ed profile and checks what every one must
// show: each kind of transaction, and no acknowledged write lost.
func runEDProfile(t *testing.T, cfg Config, kinds []FaultKind) *EDResult {
	t.Helper()
	if testing.Short() {
		cfg.Duration = 25 * time.Second
	}
	sum := runProfile(t, cfg, kinds)
	e := sum.ED
	if e == nil {
		t.Fatal("the summary has no mode ed result")
	}
	if e.FastCommits == e.FastFailed || e.SafeCommits == 0 || e.FastReads == 0 || e.SafeReads == 0 {
		t.Errorf("a kind of transaction is missing: %d fast commits (%d failed), %d safe commits, %d fast reads, %d safe reads",
			e.FastCommits, e.FastFailed, e.SafeCommits, e.FastReads, e.SafeReads)
	}
	if sum.AcknowledgedCommits == 0 || len(sum.Lost) > 0 {
		t.Errorf("durability: %d acknowledged writes checked, %d lost", sum.AcknowledgedCommits, len(sum.Lost))
	}
	return e
}

// outputDir keeps the histories of a failed run for inspection.
func outputDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "tashkent-faults-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("kept %s", dir)
		}
	})
	return dir
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runProfile runs a profile with the tashkent binary built for the tests,
// logs its summary, and fails the test if a check failed, a kind of kinds
// was never injected, or an injection went wrong.
func runProfile(t *testing.T, cfg Config, kinds []FaultKind) *Summary {
	t.Helper()
	cfg.Binary = testbin.Path(t)
	cfg.Dir = outputDir(t)
	cfg.Progress = testWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sum.Write(&b)
	t.Log("\n" + b.String())
	if !sum.OK() {
		t.Fatalf("fault test failed; histories and reports in %s", cfg.Dir)
	}
	counts := sum.FaultCounts()
	for _, k := range kinds {
		if counts[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	for _, f := range sum.Faults {
		if f.Error != "" {
			t.Errorf("fault %s", f)
		}
	}
	return sum
}
