package sim

import "math/rand/v2"

// Mode is where durability is placed (docs/MODES.md): it decides what a
// replica's store keeps when it crashes, and in ed when commits are
// delivered and acknowledged.
type Mode int

const (
	// ModeBase: every commit is durable in the replica's own store.
	ModeBase Mode = iota
	// ModeMW: the store runs with synchronous_commit=off and loses the
	// commits after its last flush; the certifier's log has them.
	ModeMW
	// ModeED is mw with eventual durability (Kashi, ch. 2, §3.6–3.8): the
	// certifier delivers entries and commit replies at the commit point,
	// before its log syncs them; a fast transaction is acknowledged then,
	// a safe one once durable; a version the certifier loses before it
	// is durable fails, and replicas that applied it rewind.
	ModeED
)

func (m Mode) String() string {
	return [...]string{"base", "mw", "ed"}[m]
}

// Config is one simulated cluster and its faults. Times are in ticks, an
// abstract unit (think one millisecond); nothing reads a clock.
type Config struct {
	Replicas          int
	ClientsPerReplica int
	Keys              int // the key space: few keys, many conflicts
	OpsPerTxnMax      int
	ReadOnlyPercent   int
	Mode              Mode
	// WindowVersions is the certifier's conflict window
	// (certification.Config.WindowVersions). Small windows exercise the
	// low-water mark and the forgetting of transaction ids.
	WindowVersions uint64

	WorkloadTicks int64 // faults and new transactions run this long
	HealTicksMax  int64 // then the cluster has this long to converge

	// Network faults, per message, in per mille.
	DropPerMille      int
	DuplicatePerMille int
	DelayTicksMax     int64 // a message takes 1..DelayTicksMax ticks: reorders

	// Node faults: the nemesis acts every 1..NemesisTicksMax ticks and picks
	// one of these, weighted.
	NemesisTicksMax      int64
	ReplicaCrashWeight   int
	CertifierCrashWeight int
	PartitionWeight      int
	// CertifierRecreateWeight re-creates the certifier from an empty data
	// directory (a new lineage: lineage.go) while the replicas hold the
	// old log's versions; they must be refused and rebuilt.
	CertifierRecreateWeight int
	DownTicksMax            int64 // how long a crashed node or a partition lasts
	DatabaseOnlyCrashRate   int   // percent of replica crashes that keep the agent up
	AgentOnlyCrashRate      int   // percent of the others that keep the database up
	OneWayPartitionRate     int   // percent of partitions that cut one direction only

	DiskSyncTicksMax    int64 // the certifier's fsync latency: the unsynced window
	StoreFlushTicks     int64 // mw: how often the replica's store flushes
	StalenessTicks      int64 // a replica's catch-up request and keepalive period
	CertifyTimeoutTicks int64 // the agent gives up on the certifier (outcome unknown)
	ReconnectDelayTicks int64
	// RebuildTicksMax bounds how long the supervisor takes to rebuild a
	// refused replica (rebuildTicksMin..RebuildTicksMax).
	RebuildTicksMax      int64
	ApplyTicksMax        int64 // one remote batch or local commit takes 1..this
	ApplyBatchEntriesMax int
	// InFlightRequestsMax is the certifier's limit on requests received and
	// not yet answered (certifier.Limits.InFlightRequestsMax); above it,
	// requests abort as overloaded.
	InFlightRequestsMax int
	// NoPush: streams do not ask for every durable entry as soon as it is
	// durable (OpenSession.push, the agent's --no-push); replicas hear of
	// others' commits with their replies and catch-ups only.
	NoPush bool
	// SoftRecoveryPerMille is how often a replica's store refuses a local
	// commit after certification (Tashkent §8.1 soft recovery).
	SoftRecoveryPerMille int

	// DeliverDuplicateRequests hands duplicated replica-to-certifier
	// messages to the certifier a second time instead of discarding them as
	// the transport does. gRPC never does that, and the service relies on
	// it: an abort is not idempotent (see TestAbortIsFinalOnlyWithoutDuplicates).
	DeliverDuplicateRequests bool

	// Mutation breaks one thing on purpose, for the checkers' self-test.
	// Never set outside tests.
	Mutation Mutation
	// ReferencePercent is the share of an update transaction's reads that
	// are of foreign-key parents: certified as references (Reference keys).
	ReferencePercent int
	// KeepingPercent is the share of writes that keep the row (a keeping
	// update: the primary key and every value a foreign key references
	// unchanged), certified as KeepingWrite keys, which references do not
	// conflict with. A key a transaction writes several times is kept
	// only if every write kept it (extension/src/writeset.c).
	KeepingPercent int
	// RecentEntriesMax is, in mode ed, the capacity of the certifier's
	// recent ring (certifier.Config.RecentEntriesMax): an entry it cannot
	// hold without dropping one not yet durable is delivered only once
	// durable, and the entries after it too.
	RecentEntriesMax int
	// FastPercent is, in mode ed, the share of transactions that are fast
	// (synchronous_commit off: acknowledged at the commit point); the
	// others are safe (acknowledged once durable).
	FastPercent int
}

// Mutation is a deliberate bug: each one must make a checker fail, or the
// checkers prove nothing (TestMutationsAreCaught).
type Mutation int

const (
	NoMutation Mutation = iota
	// MutationSkipConflictCheck sets the real state machine's fault point,
	// certification.Config.UnsafeSkipConflictCheck: write-write conflicts go
	// undetected (lost updates).
	MutationSkipConflictCheck
	// MutationAckBeforeSync makes the certifier treat written entries as
	// durable: replies and entries leave before the fsync.
	MutationAckBeforeSync
	// MutationCommitWithoutTurn lets a local transaction commit as soon as
	// it is certified, without waiting for the versions below its own.
	MutationCommitWithoutTurn
	// MutationReadAboveSnapshot makes reads see one version past the
	// snapshot.
	MutationReadAboveSnapshot
	// MutationRecoverFromMemory makes a restarted replica resume from the
	// version it had before the crash instead of the one its store
	// recovered (mw: the lost tail is never replayed).
	MutationRecoverFromMemory
	// MutationSwapRemoteVersions makes the applier install two adjacent
	// remote versions of a batch in swapped order: that replica's snapshots
	// show a different order than the others' (long fork).
	MutationSwapRemoteVersions
	// MutationIgnoreReferences makes sessions leave their foreign-key
	// references out of certification requests: a parent changes under a
	// transaction that committed depending on it.
	MutationIgnoreReferences
	// MutationAllWritesKeeping makes sessions certify every write as a
	// keeping update: a parent deleted (a plain write) concurrently with
	// a reference to it commits.
	MutationAllWritesKeeping
	// MutationCompareNumbersOnly makes the certifier admit streams by
	// version numbers alone, as if the replica had sent no history: a
	// replica that holds another lineage's versions at the same numbers
	// is admitted once the log reaches its version, and is caught up on
	// top of them.
	MutationCompareNumbersOnly
	// MutationAckSafeBeforeDurable (mode ed) acknowledges a safe
	// transaction at its commit point, as a fast one: a safe commit whose
	// version then fails was acknowledged, and a safe read-only
	// transaction may have read versions that fail.
	MutationAckSafeBeforeDurable
	// MutationKeepFailedVersion (mode ed) makes a rewind go back to its
	// version without undoing the rows of the failed versions above it:
	// the replica serves them on as if they were part of the log.
	MutationKeepFailedVersion
	mutationsEnd
)

func (m Mutation) String() string {
	return [...]string{"none", "skip-conflict-check", "ack-before-sync", "commit-without-turn",
		"read-above-snapshot", "recover-from-memory", "swap-remote-versions", "ignore-references",
		"all-writes-keeping", "compare-numbers-only", "ack-safe-before-durable", "keep-failed-version"}[m]
}

// DefaultConfig is a mid-sized cluster with every fault enabled.
func DefaultConfig() Config {
	return Config{
		Replicas: 3, ClientsPerReplica: 2, Keys: 6, OpsPerTxnMax: 4, ReadOnlyPercent: 20, ReferencePercent: 30, KeepingPercent: 30,
		Mode: ModeMW, WindowVersions: 32,
		WorkloadTicks: 300, HealTicksMax: 2000,
		DropPerMille: 10, DuplicatePerMille: 10, DelayTicksMax: 3,
		NemesisTicksMax: 60, ReplicaCrashWeight: 3, CertifierCrashWeight: 2, PartitionWeight: 3,
		DownTicksMax: 40, DatabaseOnlyCrashRate: 30, AgentOnlyCrashRate: 20, OneWayPartitionRate: 30,
		DiskSyncTicksMax: 3, StoreFlushTicks: 10, StalenessTicks: 10, CertifyTimeoutTicks: 120,
		ReconnectDelayTicks: 3, RebuildTicksMax: 80, ApplyTicksMax: 2, ApplyBatchEntriesMax: 4, SoftRecoveryPerMille: 20,
		InFlightRequestsMax: 1 << 16, RecentEntriesMax: 1 << 16,
	}
}

// SwarmConfig varies the cluster and the fault mix with the seed (swarm
// testing): some seeds have no faults of a kind at all, others many, so
// that one fault does not always mask another.
func SwarmConfig(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0x5157a9))
	c := DefaultConfig()
	c.Replicas = 2 + r.IntN(3)
	c.ClientsPerReplica = 1 + r.IntN(3)
	c.Keys = 2 + r.IntN(10)
	c.Mode = Mode(r.IntN(2))
	c.WindowVersions = []uint64{4, 16, 64, windowUnbounded}[r.IntN(4)]
	c.DropPerMille = []int{0, 5, 20, 60}[r.IntN(4)]
	c.DuplicatePerMille = []int{0, 10, 50}[r.IntN(3)]
	c.DelayTicksMax = 1 + r.Int64N(5)
	c.NemesisTicksMax = []int64{30, 60, 150}[r.IntN(3)]
	c.ReplicaCrashWeight = r.IntN(4)
	c.CertifierCrashWeight = r.IntN(4)
	c.PartitionWeight = r.IntN(4)
	c.DiskSyncTicksMax = 1 + r.Int64N(6)
	c.StoreFlushTicks = 1 + r.Int64N(30)
	c.CertifyTimeoutTicks = []int64{30, 120, 1000}[r.IntN(3)]
	c.SoftRecoveryPerMille = []int{0, 20, 100}[r.IntN(3)]
	c.InFlightRequestsMax = []int{1 << 16, 1 << 16, 4, 1}[r.IntN(4)]
	c.AgentOnlyCrashRate = []int{0, 30}[r.IntN(2)]
	c.OneWayPartitionRate = []int{0, 50}[r.IntN(2)]
	c.NoPush = r.IntN(4) == 0
	c.CertifierRecreateWeight = []int{0, 0, 0, 1}[r.IntN(4)]
	// Drawn last, so that the seeds that stay base or mw keep the
	// configuration (and the run) they had before ed was added.
	if r.IntN(3) == 0 {
		c.Mode = ModeED
		c.FastPercent = []int{0, 30, 70, 100}[r.IntN(4)]
		c.RecentEntriesMax = []int{1 << 16, 1 << 16, 8, 2}[r.IntN(4)]
		// A safe commit's wait for durability compares version numbers
		// only (extension/src/safe.c): one that outlives a rewind below
		// its version (it was not failed) and then a re-created
		// certifier waits for the new log's number, which names another
		// transaction (doc.go, "Not modeled"). Re-creating the certifier
		// loses durable versions anyway; ed seeds leave it out.
		c.CertifierRecreateWeight = 0
	}
	return c
}

// windowUnbounded is a window no run fills: nothing is ever forgotten.
// (certification.New presizes its index for the window, so the real default
// of 1<<18 would cost a large allocation per certifier restart.)
const windowUnbounded = 4096
