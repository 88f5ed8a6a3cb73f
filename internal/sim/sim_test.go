package sim

import (
	"flag"
	"slices"

	"strings"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "replay this one seed (with its trace under -v)")
	seedsFlag = flag.Int("seeds", 2000, "how many seeds TestSimulation runs")
	firstFlag = flag.Uint64("first-seed", 1, "the first seed TestSimulation runs")
)

// TestSimulation runs many seeds, each with its own swarm configuration,
// and fails with the command that replays the first failing seed.
func TestSimulation(t *testing.T) {
	if *seedFlag != 0 {
		replay(t, *seedFlag)
		return
	}
	began := time.Now()
	var total Stats
	failures := 0
	for seed := *firstFlag; seed < *firstFlag+uint64(*seedsFlag); seed++ {
		res := Run(seed, SwarmConfig(seed), Options{})
		add(&total, res.Stats)
		if len(res.Violations) > 0 {
			failures++
			if failures <= 3 {
				t.Errorf("%s\nreplay: go test ./internal/sim -run TestSimulation -seed=%d -v", res.Report(), seed)
			}
		}
	}
	took := time.Since(began)
	t.Logf("%d seeds in %v (%.0f seeds/s), %d failing", *seedsFlag, took.Round(time.Millisecond),
		float64(*seedsFlag)/took.Seconds(), failures)
	t.Logf("totals: %+v", total)
	t.Logf("rebuilds: %d from a donor, %d without a donor (rebuilt from the log's start: the real cluster needs an operator here)",
		total.Rebuilds-total.RebuildsWithoutDonor, total.RebuildsWithoutDonor)
	requireFaultsHappened(t, total)
}

func replay(t *testing.T, seed uint64) {
	res := Run(seed, SwarmConfig(seed), Options{Trace: testing.Verbose()})
	t.Logf("seed %d, config %+v", seed, res.Config)
	for _, line := range res.Trace {
		t.Log(line)
	}
	t.Logf("seed %d: trace hash %016x, stats %+v", seed, res.TraceHash, res.Stats)
	if len(res.Violations) > 0 {
		t.Fatal(res.Report())
	}
}

// requireFaultsHappened guards against a simulation that passes because
// nothing happened in it.
func requireFaultsHappened(t *testing.T, s Stats) {
	t.Helper()
	checks := map[string]int{
		"acknowledged commits": s.Committed, "aborts": s.Aborted, "replica crashes": s.ReplicaCrashes,
		"certifier crashes": s.CertifierCrashes, "partitions": s.Partitions, "dropped messages": s.Dropped,
		"duplicated messages": s.Duplicated, "re-sent requests": s.Resent, "settled from the log": s.SettledFromLog,
		"duplicate outcomes": s.DuplicateOutcomes, "too-old aborts": s.TooOld, "mw tails lost and replayed": s.LostTailVersions,
		"unknown outcomes": s.Unknown, "soft recoveries": s.SoftRecoveries, "apply batches cancelled": s.BatchesCancelled,
		"overloaded certifier": s.Overloaded, "certifier re-created": s.CertifierRecreations,
		"refused streams": s.Refusals, "rebuilt from a donor": s.Rebuilds - s.RebuildsWithoutDonor,
		"rebuilt without a donor": s.RebuildsWithoutDonor,
		"ed: versions failed":     s.VersionFailures, "ed: rewinds": s.Rewinds,
		"ed: safe commits failed": s.SafeFailed, "ed: fast commits failed": s.FastFailed,
		"ed: entries held back by the recent ring": s.EarlyStops,
	}
	if *seedsFlag < 200 {
		return // too few seeds to expect every rare event
	}
	var missing []string
	for name, n := range checks {
		if n == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the simulation never exercised: %s", strings.Join(missing, ", "))
	}
}

func add(total *Stats, s Stats) {
	total.Events += s.Events
	total.Transactions += s.Transactions
	total.Committed += s.Committed
	total.Aborted += s.Aborted
	total.Unknown += s.Unknown
	total.ReadOnly += s.ReadOnly
	total.Versions += s.Versions
	total.ReplicaCrashes += s.ReplicaCrashes
	total.CertifierCrashes += s.CertifierCrashes
	total.Partitions += s.Partitions
	total.Dropped += s.Dropped
	total.Duplicated += s.Duplicated
	total.StreamBreaks += s.StreamBreaks
	total.Resent += s.Resent
	total.SettledFromLog += s.SettledFromLog
	total.CommitReplies += s.CommitReplies
	total.DuplicateOutcomes += s.DuplicateOutcomes
	total.TooOld += s.TooOld
	total.LostTailVersions += s.LostTailVersions
	total.SoftRecoveries += s.SoftRecoveries
	total.BatchesCancelled += s.BatchesCancelled
	total.Overloaded += s.Overloaded
	total.CertifierRecreations += s.CertifierRecreations
	total.Refusals += s.Refusals
	total.Rebuilds += s.Rebuilds
	total.RebuildsWithoutDonor += s.RebuildsWithoutDonor
	total.VersionFailures += s.VersionFailures
	total.Rewinds += s.Rewinds
	total.SafeFailed += s.SafeFailed
	total.FastFailed += s.FastFailed
	total.EarlyStops += s.EarlyStops
	total.ConvergedAtTick = max(total.ConvergedAtTick, s.ConvergedAtTick)
}

// TestDeterminism: the same seed gives the same trace, a different seed a
// different one.
func TestDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		a := Run(seed, SwarmConfig(seed), Options{})
		b := Run(seed, SwarmConfig(seed), Options{Trace: true})
		if a.TraceHash != b.TraceHash || a.Stats != b.Stats {
			t.Fatalf("seed %d ran twice gave trace hashes %016x and %016x", seed, a.TraceHash, b.TraceHash)
		}
		c := Run(seed+1000, SwarmConfig(seed), Options{})
		if c.TraceHash == a.TraceHash {
			t.Fatalf("seeds %d and %d gave the same trace", seed, seed+1000)
		}
	}
	// A failing run replays with the same findings.
	cfg := SwarmConfig(3)
	cfg.Mutation = MutationSkipConflictCheck
	a, b := Run(3, cfg, Options{}), Run(3, cfg, Options{})
	if len(a.Violations) == 0 || a.TraceHash != b.TraceHash || !slices.Equal(a.Violations, b.Violations) {
		t.Fatalf("a failing seed did not replay identically:\n%s\n%s", a.Report(), b.Report())
	}
}

// TestMutationsAreCaught is the checkers' self-test: each deliberate bug
// must be reported, in most seeds, by the checker meant for it (a
// violation that contains one of its phrases; none listed: any
// violation). Without this the checkers could pass because they check
// nothing.
func TestMutationsAreCaught(t *testing.T) {
	const seeds = 120
	expect := map[Mutation][]string{
		MutationSkipConflictCheck:    {"lost update"},
		MutationAckBeforeSync:        nil, // replicas applying versions before they are durable, lost acknowledged commits
		MutationCommitWithoutTurn:    nil, // a gap in a replica's commits
		MutationReadAboveSnapshot:    nil,
		MutationRecoverFromMemory:    nil,
		MutationSwapRemoteVersions:   {"long fork"},
		MutationIgnoreReferences:     {"referenced row changed"},
		MutationAllWritesKeeping:     {"referenced row changed"},
		MutationCompareNumbersOnly:   {"another history at the same versions"},
		MutationAckSafeBeforeDurable: {"acknowledged commit lost", "a safe read-only transaction was acknowledged"},
		MutationKeepFailedVersion:    {"G1a", "state differs from the log's replay"},
	}
	for m := NoMutation + 1; m < mutationsEnd; m++ {
		t.Run(m.String(), func(t *testing.T) {
			caught, example := 0, ""
			for seed := uint64(1); seed <= seeds; seed++ {
				res := Run(seed, mutationConfig(m, seed), Options{})
				if v, ok := caughtBy(res.Violations, expect[m]); ok {
					caught++
					example = v
				}
			}
			t.Logf("caught in %d of %d seeds, e.g. %s", caught, seeds, example)
			if caught < minCaught[m] {
				t.Fatalf("the checkers caught mutation %s in only %d of %d seeds", m, caught, seeds)
			}
		})
	}
}

// caughtBy returns the first violation that contains one of phrases (any
// violation if there are none).
func caughtBy(violations, phrases []string) (string, bool) {
	for _, v := range violations {
		if len(phrases) == 0 || slices.ContainsFunc(phrases, func(p string) bool { return strings.Contains(v, p) }) {
			return v, true
		}
	}
	return "", false
}

// mutationConfig is seed's swarm configuration with mutation m, and the
// fault m needs in order to matter: comparing version numbers alone goes
// wrong only for a replica that holds another lineage's versions, which
// a re-created certifier leaves behind (SwarmConfig re-creates it in a
// quarter of the seeds); the mutations of mode ed need failed versions
// (edConfig) and, to acknowledge safe transactions early, safe ones.
func mutationConfig(m Mutation, seed uint64) Config {
	cfg := SwarmConfig(seed)
	switch m {
	case MutationCompareNumbersOnly:
		cfg.CertifierRecreateWeight = max(cfg.CertifierRecreateWeight, 1)
	case MutationAckSafeBeforeDurable, MutationKeepFailedVersion:
		cfg = edConfig(seed)
		cfg.FastPercent = min(cfg.FastPercent, 50)
	}
	cfg.Mutation = m
	return cfg
}

// edConfig is seed's swarm configuration in mode ed, with the faults
// that make versions fail: certifier crashes, and a sync that takes up to
// 10 ticks, which leaves the time to deliver versions before they are
// durable. (No re-creation of the certifier: SwarmConfig.)
func edConfig(seed uint64) Config {
	cfg := SwarmConfig(seed)
	if cfg.Mode != ModeED {
		cfg.Mode, cfg.FastPercent, cfg.CertifierRecreateWeight = ModeED, 50, 0
	}
	cfg.CertifierCrashWeight = max(cfg.CertifierCrashWeight, 3)
	cfg.DiskSyncTicksMax = max(cfg.DiskSyncTicksMax, 10)
	return cfg
}

// TestEventualDurability runs mode ed where versions fail often
// (edConfig): every checker passes, and failures, rewinds and both kinds
// of failed commits happened.
func TestEventualDurability(t *testing.T) {
	const seeds = 300
	var total Stats
	for seed := uint64(1); seed <= seeds; seed++ {
		res := Run(seed, edConfig(seed), Options{})
		add(&total, res.Stats)
		if len(res.Violations) > 0 {
			t.Fatalf("%s\nreplay: Run(%d, edConfig(%d), Options{Trace: true})", res.Report(), seed, seed)
		}
	}
	t.Logf("%d seeds: %d certifier crashes failed delivered versions, %d rewinds, %d rebuilds, %d safe commits failed (never acknowledged), %d fast commits acknowledged and failed",
		seeds, total.VersionFailures, total.Rewinds, total.Rebuilds, total.SafeFailed, total.FastFailed)
	if total.VersionFailures == 0 || total.Rewinds == 0 || total.SafeFailed == 0 || total.FastFailed == 0 {
		t.Fatalf("mode ed never failed a version, rewound, or failed a safe and a fast commit: %+v", total)
	}
}

// minCaught is how many of the 120 seeds must catch each mutation: about
// half of what they catch today (runs are deterministic, so a drop means a
// checker or the fault mix got weaker). The rare ones need a crash or a
// batch at the right moment.
var minCaught = map[Mutation]int{
	MutationSkipConflictCheck:    100,
	MutationAckBeforeSync:        30,
	MutationCommitWithoutTurn:    7,
	MutationReadAboveSnapshot:    40,
	MutationRecoverFromMemory:    12,
	MutationSwapRemoteVersions:   7,
	MutationIgnoreReferences:     50,
	MutationAllWritesKeeping:     45,
	MutationCompareNumbersOnly:   10,
	MutationAckSafeBeforeDurable: 25,
	MutationKeepFailedVersion:    23,
}

// TestAbortIsFinalOnlyWithoutDuplicates documents an assumption of the
// certifier service that the simulation found: its commits are idempotent
// (a re-sent request gets its version back), its aborts are not. An abort
// may be transient: the simulation finds it with an overloaded certifier
// (ABORT_REASON_OVERLOADED); by the same reasoning, a conflict with a
// version certified in memory that a crash lost before its fsync is
// transient too. The same request, processed again, can then commit
// although its client was already answered 40001 and will run the
// transaction again. The real system is safe because
// a gRPC stream never delivers a request twice and certclient re-sends only
// requests it has no answer for. A transport, a certifier group or a retry
// policy that could deliver an answered request again must first make aborts
// final (for example, remember aborted transaction ids like committed ones).
func TestAbortIsFinalOnlyWithoutDuplicates(t *testing.T) {
	found := false
	for seed := uint64(1); seed <= 300 && !found; seed++ {
		cfg := SwarmConfig(seed)
		cfg.DuplicatePerMille, cfg.InFlightRequestsMax = 50, 1
		cfg.DeliverDuplicateRequests = true
		for _, v := range Run(seed, cfg, Options{}).Violations {
			if strings.Contains(v, "was answered as aborted but committed") {
				t.Logf("seed %d: %s", seed, v)
				found = true
				break
			}
		}
	}
	if !found {
		t.Fatal("duplicated requests never turned an answered abort into a commit: if aborts became final, " +
			"update this test and docs/RELIABILITY.md")
	}
}
