package sim

import (
	"slices"
	"strings"
	"testing"
)

// Scripted scenarios: the paths the random seeds cover, pinned down one by
// one with a fault at an exact moment. Messages, fsyncs and commits take
// exactly one tick, there is no nemesis and no background workload; each
// test drives its transactions itself.

func scenarioConfig() Config {
	c := DefaultConfig()
	c.Replicas, c.ClientsPerReplica, c.Keys = 2, 0, 4
	c.DropPerMille, c.DuplicatePerMille, c.DelayTicksMax = 0, 0, 1
	c.ReplicaCrashWeight, c.CertifierCrashWeight, c.PartitionWeight = 0, 0, 0
	c.DiskSyncTicksMax, c.ApplyTicksMax, c.SoftRecoveryPerMille = 1, 1, 0
	c.CertifyTimeoutTicks = 10_000
	return c
}

type scenario struct {
	t *testing.T
	w *world
}

func newScenario(t *testing.T, cfg Config) *scenario {
	w := newWorld(1, cfg, Options{Trace: true})
	w.cert.start()
	for _, r := range w.replicas {
		r.start()
	}
	s := &scenario{t: t, w: w}
	s.runUntil(5) // streams open, replicas caught up
	return s
}

// runUntil runs every event up to tick.
func (s *scenario) runUntil(tick int64) {
	for s.w.queue.Len() > 0 && s.w.queue[0].at <= tick {
		e := popEvent(s.w)
		s.w.now = e.at
		e.fn()
	}
	s.w.now = tick
}

// write starts a transaction on replica r that writes key and commits it.
func (s *scenario) write(r, key int) *txnRecord {
	rep := s.w.replicas[r]
	sess := &session{r: rep, id: len(rep.sessions)}
	rep.sessions = append(rep.sessions, sess)
	sess.txn = s.w.hist.begin(rep.nextTxnID(), r, rep.db.version)
	sess.txn.snapshot, sess.started, sess.phase = sess.txn.label, true, active
	sess.txn.lineage = rep.db.lineageOr(s.w.lineage())
	s.w.hist.newValue(sess.txn, key, false)
	sess.commit()
	return sess.txn
}

// heal lets the cluster converge and runs every checker.
func (s *scenario) heal() {
	s.w.heal()
	s.w.loop()
	s.w.check()
	if len(s.w.violations) > 0 {
		for _, line := range s.w.trace {
			s.t.Log(line)
		}
		s.t.Fatalf("violations: %q", s.w.violations)
	}
}

func (s *scenario) requireAcked(txn *txnRecord, version uint64) {
	s.t.Helper()
	if txn.status != acked || txn.version != version {
		for _, line := range s.w.trace {
			s.t.Log(line)
		}
		s.t.Fatalf("%v: status %d version %d, want acknowledged at %d", txn.id, txn.status, txn.version, version)
	}
}

// A commit reply lost with its stream: the client re-sends the request on
// a new stream, the certifier recognizes the transaction id (Duplicate) and
// the client learns its original version; the log holds it once.
func TestScenarioReplyLostRetryGetsOriginalVersion(t *testing.T) {
	s := newScenario(t, scenarioConfig())
	txn := s.write(0, 1)
	s.runUntil(s.w.now + 2) // request delivered and certified; fsync in flight
	s.w.net.partition(0, cutFromCertifier)
	s.runUntil(s.w.now + 3) // the entry and the reply are lost
	s.w.net.heal(0)
	s.heal()
	s.requireAcked(txn, 1)
	if s.w.stats.DuplicateOutcomes == 0 || s.w.cert.disk.durable() != 1 {
		t.Fatalf("want a duplicate outcome and one version, got %+v", s.w.stats)
	}
}

// The certifier crashes after certifying a request and before its fsync:
// nothing was answered, the entry is lost, the client re-sends, and the
// request is certified again, once.
func TestScenarioCertifierCrashBeforeFsyncRecertifies(t *testing.T) {
	s := newScenario(t, scenarioConfig())
	txn := s.write(0, 1)
	s.runUntil(s.w.now + 1) // certified, written, not synced
	if s.w.cert.disk.last() != 1 || s.w.cert.disk.durable() != 0 {
		t.Fatalf("want one unsynced entry, disk has %d entries, %d synced", s.w.cert.disk.last(), s.w.cert.disk.durable())
	}
	s.w.cert.crashKeeping(0)
	s.runUntil(s.w.now + 5)
	s.w.cert.restart()
	s.heal()
	s.requireAcked(txn, 1)
	if s.w.stats.Resent == 0 {
		t.Fatal("the request was never re-sent")
	}
}

// A reply lost while later versions push the transaction out of the
// certifier's window: the re-sent request is too old to certify, but the
// client settles the call from the delivered entry first, so the client
// learns the commit (certclient's settleFromLog).
func TestScenarioRetryAfterWindowSettlesFromLog(t *testing.T) {
	cfg := scenarioConfig()
	cfg.WindowVersions = 2
	s := newScenario(t, cfg)
	txn := s.write(0, 1)
	s.runUntil(s.w.now + 2)
	s.w.net.partition(0, cutBoth)
	for key := range 3 { // versions 2..4 from the other replica
		s.write(1, 2+key%2)
		s.runUntil(s.w.now + 6)
	}
	s.w.net.heal(0)
	s.heal()
	s.requireAcked(txn, 1)
	if s.w.stats.TooOld == 0 || s.w.stats.SettledFromLog == 0 {
		t.Fatalf("want a too-old re-send settled from the log, got %+v", s.w.stats)
	}
}

// An mw replica loses the versions after its store's last flush, among them
// an acknowledged local commit; it recovers from the certifier's log.
func TestScenarioMWReplicaReplaysLostTail(t *testing.T) {
	cfg := scenarioConfig()
	cfg.Mode, cfg.StoreFlushTicks = ModeMW, 1_000
	s := newScenario(t, cfg)
	txn := s.write(0, 1)
	s.runUntil(s.w.now + 6)
	s.requireAcked(txn, 1)
	s.w.replicas[0].crash(false)
	if v := s.w.replicas[0].db.version; v != 0 {
		t.Fatalf("the store kept version %d, want 0 (never flushed)", v)
	}
	s.heal()
	if s.w.stats.LostTailVersions != 1 {
		t.Fatalf("want one lost version, got %+v", s.w.stats)
	}
}

// A request re-sent while its first copy is certified but not yet durable
// gets the first copy's version (Duplicate) and its answer waits for that
// version's fsync. Without the deduplication it would conflict with itself,
// and its abort, which needs no fsync, would reach the client before the
// first copy commits (a mutation of internal/certification showed exactly
// that; see docs/RELIABILITY.md).
func TestScenarioRetryBeforeFsyncGetsSameVersion(t *testing.T) {
	cfg := scenarioConfig()
	cfg.DiskSyncTicksMax, cfg.ReconnectDelayTicks = 100, 1
	s := newScenario(t, cfg)
	txn := s.write(0, 1)
	s.w.replicas[0].client.breakStream() // the request is already on its way
	s.runUntil(s.w.now + 2)              // first copy certified; the re-sent one too
	if s.w.stats.DuplicateOutcomes != 1 || s.w.cert.disk.durable() != 0 {
		t.Fatalf("want the re-sent request answered as a duplicate before the fsync; durable %d, stats %+v",
			s.w.cert.disk.durable(), s.w.stats)
	}
	s.heal()
	s.requireAcked(txn, 1)
}

// anotherHistoryAtTheSameVersions re-creates the certifier from an empty
// data directory (a new lineage) while replica 1 is down holding version 1
// of the old log. Replica 0, refused, is rebuilt and writes at least two
// versions of the new log; then replica 1 starts again, with another
// history at version 1 than the log's.
func anotherHistoryAtTheSameVersions(t *testing.T, mutation Mutation) *scenario {
	cfg := scenarioConfig()
	cfg.Mode, cfg.RebuildTicksMax, cfg.Mutation = ModeBase, 10, mutation
	s := newScenario(t, cfg)
	r0, r1 := s.w.replicas[0], s.w.replicas[1]
	s.write(0, 1)
	s.runUntil(s.w.now + 8)
	if r1.db.version != 1 {
		t.Fatalf("replica 1 did not apply version 1: %s", r1.describe())
	}
	r1.crash(false)
	s.w.cert.recreate()
	s.w.cert.restart()
	s.runUntil(s.w.now + 40)
	if s.w.stats.Refusals == 0 || s.w.stats.Rebuilds != 1 || r0.halted || r0.recovering {
		t.Fatalf("want replica 0 refused, rebuilt and serving: %s, stats %+v", r0.describe(), s.w.stats)
	}
	for key := 0; s.w.cert.disk.durable() < 2; key++ {
		txn := s.write(0, key%cfg.Keys)
		s.runUntil(s.w.now + 8)
		if txn.status != acked {
			t.Fatalf("%v was not acknowledged on the new log: %+v", txn.id, txn)
		}
	}
	r1.restart()
	return s
}

// A replica that holds versions of another history at the same numbers
// is refused (its runs do not match the log's) and rebuilt; the cluster
// converges on the new log.
func TestScenarioAnotherHistoryIsRefusedAndRebuilt(t *testing.T) {
	s := anotherHistoryAtTheSameVersions(t, NoMutation)
	s.heal()
	if s.w.stats.Rebuilds != 2 {
		t.Fatalf("want both replicas rebuilt, got %+v", s.w.stats)
	}
}

// Admission by version numbers alone lets that replica in: the checkers
// report it at admission, and when it applies the new log's version 2 on
// top of the old version 1.
func TestScenarioCompareNumbersOnlyIsCaught(t *testing.T) {
	s := anotherHistoryAtTheSameVersions(t, MutationCompareNumbersOnly)
	s.w.heal()
	s.w.loop()
	s.w.check()
	t.Logf("violations: %q", s.w.violations)
	for _, want := range []string{"admitted a replica with another history", "another history at the same versions"} {
		if !slices.ContainsFunc(s.w.violations, func(v string) bool { return strings.HasPrefix(v, want) }) {
			t.Errorf("no violation starts with %q: %q", want, s.w.violations)
		}
	}
}
