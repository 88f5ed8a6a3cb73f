package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
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
	// Replica 1 is down, so replica 0 has no donor: the simulation
	// rebuilds it from the new log's start, where the real supervisor
	// would wait for an operator.
	if s.w.stats.Refusals == 0 || s.w.stats.Rebuilds != 1 || s.w.stats.RebuildsWithoutDonor != 1 || r0.halted || r0.recovering {
		t.Fatalf("want replica 0 refused, rebuilt without a donor and serving: %s, stats %+v", r0.describe(), s.w.stats)
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
// is refused (its runs do not match the log's) and rebuilt as the real
// supervisor does, by copying replica 0, which serves on the new log; the
// cluster converges on the new log.
func TestScenarioAnotherHistoryIsRefusedAndRebuilt(t *testing.T) {
	s := anotherHistoryAtTheSameVersions(t, NoMutation)
	atLeast := s.w.replicas[0].db.version
	s.heal()
	if s.w.stats.Rebuilds != 2 || s.w.stats.RebuildsWithoutDonor != 1 {
		t.Fatalf("want replica 1 rebuilt from a donor after replica 0 was rebuilt without one, got %+v", s.w.stats)
	}
	copied := false
	for _, line := range s.w.trace {
		var tick, replica, donor, version uint64
		if _, err := fmt.Sscanf(line, "%d rebuilt replica=%d donor=%d version=%d", &tick, &replica, &donor, &version); err == nil {
			copied = replica == 1 && donor == 0 && version >= atLeast
		}
	}
	if !copied {
		t.Fatalf("replica 1 was not rebuilt from a copy of replica 0 at version %d or above: %q", atLeast, s.w.trace)
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

// recreatedWithBothHalted re-creates the certifier while both replicas
// hold version 1 of the old log: both are refused and halt. Rebuilds take
// RebuildTicksMax ticks.
func recreatedWithBothHalted(t *testing.T) *scenario {
	cfg := scenarioConfig()
	cfg.RebuildTicksMax = 500
	s := newScenario(t, cfg)
	s.write(0, 1)
	s.runUntil(s.w.now + 8)
	s.w.cert.recreate()
	s.w.cert.restart()
	s.runUntil(s.w.now + 40)
	for _, r := range s.w.replicas {
		if !r.halted || r.db.version != 1 {
			t.Fatalf("want both replicas halted at version 1: %s", r.describe())
		}
	}
	return s
}

// A halt belongs to the agent's run: a database restart starts a new run
// and an agent crash ends the process, so neither replica says it halted
// any more until the certifier refuses it again. The supervisor rebuilds
// only a replica whose agent runs and says it halted when its turn comes.
func TestScenarioHaltEndsWithTheAgentRun(t *testing.T) {
	s := recreatedWithBothHalted(t)
	r0, r1 := s.w.replicas[0], s.w.replicas[1]
	r0.crashDatabaseOnly(1_000)
	r0.resumeAfterDatabaseRestart()
	r1.crash(false)
	if r0.halted || r1.halted {
		t.Fatalf("a new run (replica 0) and a crashed agent (replica 1) do not say they halted: %s %s", r0.describe(), r1.describe())
	}
	s.runUntil(s.w.now + 600) // replica 0's rebuild is due
	if !r0.halted && s.w.stats.Rebuilds == 0 {
		t.Fatalf("replica 0's new run was not refused again: %s, stats %+v", r0.describe(), s.w.stats)
	}
	if r1.up || s.w.stats.Rebuilds != 1 {
		t.Fatalf("want replica 0 rebuilt, and replica 1, whose agent is down, not: %s, stats %+v", r1.describe(), s.w.stats)
	}
	s.heal()
	if s.w.stats.Rebuilds != 2 {
		t.Fatalf("want replica 1 refused and rebuilt once its agent ran again, got %+v", s.w.stats)
	}
}

// An abort sent by the certifier of one lineage and delivered after the
// certifier was re-created is judged against the log of the lineage that
// sent it, not the current one.
func TestScenarioAbortInFlightAcrossRecreationNamesItsLineage(t *testing.T) {
	s := newScenario(t, scenarioConfig())
	s.write(0, 1)
	loser := s.write(1, 1)  // the same key from the same snapshot
	s.runUntil(s.w.now + 1) // both certified; the abort is on its way
	if s.w.stats.Aborted != 0 || s.w.cert.disk.last() != 1 {
		t.Fatalf("want one version certified and the abort not yet delivered, got %+v", s.w.stats)
	}
	s.w.cert.recreate()
	s.w.cert.restart()
	s.runUntil(s.w.now + 1)
	if loser.status != aborted || loser.abortedIn != 0 || s.w.lineage() != 1 {
		t.Fatalf("want %v aborted by lineage 0, delivered in lineage %d: status %d, aborted in %d",
			loser.id, s.w.lineage(), loser.status, loser.abortedIn)
	}
	s.heal()
}

// A transaction whose session closed before COMMIT was never answered by
// any certifier: it must be in no lineage's log.
func TestNeverSentAbortIsSearchedInEveryLineage(t *testing.T) {
	s := newScenario(t, scenarioConfig())
	r := s.w.replicas[0]
	sess := &session{r: r, id: len(r.sessions)}
	r.sessions = append(r.sessions, sess)
	sess.begin()
	txn := sess.txn
	r.crash(false)
	if txn.status != aborted || txn.abortedIn != anyLineage {
		t.Fatalf("want %v aborted, in any lineage: status %d, aborted in %d", txn.id, txn.status, txn.abortedIn)
	}
	s.w.checkAbortedStayAborted([]map[certification.TxnID]uint64{{}, {txn.id: 3}})
	if len(s.w.violations) != 1 || !strings.Contains(s.w.violations[0], "of lineage 1") {
		t.Fatalf("want the commit in lineage 1 reported, got %q", s.w.violations)
	}
}

// The history a replica opens a stream with is checked against what its
// store holds: a history that matches the log while the store holds
// other epochs would make the admission look right.
func TestJudgeAdmissionChecksTheHistoryAgainstTheStore(t *testing.T) {
	s := newScenario(t, scenarioConfig())
	s.write(0, 1)
	s.runUntil(s.w.now + 8)
	epoch := s.w.cert.disk.epochAt(1)
	open := &pb.OpenSession{Replica: "r0", ReplicaVersion: 1, History: s.w.cert.disk.runs(1)}
	s.w.judgeAdmission(0, open, []uint64{epoch}, nil)
	if len(s.w.violations) != 0 {
		t.Fatalf("a history that describes the store was reported: %q", s.w.violations)
	}
	s.w.judgeAdmission(0, open, []uint64{epoch + 1}, nil)
	if len(s.w.violations) != 1 || !strings.Contains(s.w.violations[0], "but its store holds epoch") {
		t.Fatalf("a history that does not describe the store was not reported: %q", s.w.violations)
	}
}

// An entry the replica cannot read is not delivered: deliver says so, and
// the client does not count it as delivered.
func TestUnreadableEntryIsNotDelivered(t *testing.T) {
	s := newScenario(t, scenarioConfig())
	r := s.w.replicas[0]
	if r.deliver(r.ord.Round(), []logentry.Entry{{Version: 1, Bytes: []byte{0xff}}}) {
		t.Fatal("an unreadable entry was reported delivered")
	}
	if len(s.w.violations) != 1 {
		t.Fatalf("want one violation, got %q", s.w.violations)
	}
}

// A local commit whose version was never delivered is one violation: the
// session gives its version up to the applier, and the cluster still
// converges.
func TestCommitOfAnUndeliveredVersionIsOneViolation(t *testing.T) {
	s := newScenario(t, scenarioConfig())
	r := s.w.replicas[0]
	txn := s.write(0, 1)
	r.busy = true // hold the turn so that the session waits in its phase
	s.runUntil(s.w.now + 3)
	sess := r.sessions[len(r.sessions)-1]
	if sess.phase != waitingTurn || sess.version != 1 {
		t.Fatalf("want the session certified at version 1 and waiting for its turn, phase %d version %d", sess.phase, sess.version)
	}
	delete(r.delivered, 1)
	r.busy = false
	r.commitLocal(sess)
	s.w.heal()
	s.w.loop()
	s.w.check()
	if len(s.w.violations) != 1 || !strings.Contains(s.w.violations[0], "never delivered") || txn.status != unknown {
		t.Fatalf("want one violation, the commit's, and its outcome unknown (status %d): %q", txn.status, s.w.violations)
	}
}

// Mode ed delivers what the certifier decides as it decides it: a commit
// decided while the write of an earlier batch is in flight reaches the
// replicas, and its fast client is acknowledged, before it is written.
// A crash then fails both versions, the unwritten one included, and the
// replicas rewind them.
func TestScenarioEDDeliversAsDecided(t *testing.T) {
	cfg := scenarioConfig()
	cfg.Mode, cfg.DiskSyncTicksMax = ModeED, 100
	s := newScenario(t, cfg)
	c := s.w.cert
	first := s.write(0, 1)
	first.fast = true
	for c.disk.last() == 0 {
		s.runUntil(s.w.now + 1)
	}
	second := s.write(1, 2)
	second.fast = true
	s.runUntil(s.w.now + 4)
	if !c.writing || c.disk.durable() != 0 || c.disk.last() != 1 || len(c.pending) != 1 {
		t.Fatalf("want version 1's write in flight and version 2 decided, not written: durable %d, written %d, pending %d",
			c.disk.durable(), c.disk.last(), len(c.pending))
	}
	s.requireAcked(second, 2)
	for _, r := range s.w.replicas {
		if r.db.version != 2 {
			t.Fatalf("replica %d did not apply version 2 before it was written: %s", r.id, r.describe())
		}
	}
	c.crashKeeping(0)
	s.runUntil(s.w.now + 5)
	c.restart()
	s.heal()
	if s.w.stats.VersionFailures != 1 || s.w.stats.FastFailed != 2 || s.w.stats.Rewinds == 0 {
		t.Fatalf("want versions 1 and 2 failed, both fast commits with them, and rewinds: %+v", s.w.stats)
	}
}

// An entry the recent ring cannot hold without dropping one not yet
// durable stops early delivery: it and the entries after it reach the
// replicas once it is durable.
func TestScenarioEDRingFullStopsEarlyDelivery(t *testing.T) {
	cfg := scenarioConfig()
	cfg.Mode, cfg.DiskSyncTicksMax, cfg.RecentEntriesMax = ModeED, 100, 1
	s := newScenario(t, cfg)
	c := s.w.cert
	s.write(0, 1)
	for c.disk.last() == 0 {
		s.runUntil(s.w.now + 1)
	}
	s.write(1, 2)
	s.runUntil(s.w.now + 4)
	if c.disk.durable() != 0 || len(c.pending) != 1 || c.deliverable != 1 || s.w.stats.EarlyStops != 1 {
		t.Fatalf("want version 2 decided and held back: durable %d, pending %d, deliverable %d, stats %+v",
			c.disk.durable(), len(c.pending), c.deliverable, s.w.stats)
	}
	if v := s.w.replicas[0].db.version; v != 1 {
		t.Fatalf("replica 0 holds version %d, want 1 (version 2 is held back)", v)
	}
	for c.disk.durable() < 2 {
		s.runUntil(s.w.now + 1)
	}
	s.runUntil(s.w.now + 4)
	if v := s.w.replicas[0].db.version; v != 2 {
		t.Fatalf("replica 0 holds version %d once version 2 is durable, want 2", v)
	}
	s.heal()
}
