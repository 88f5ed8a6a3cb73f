// Package certgroup replicates the certifier with Raft (Tashkent §7.3,
// which uses Paxos), on go.etcd.io/raft/v3.
//
// # Why it is built this way
//
// The certifier's decisions must survive the loss of its process and its
// machine, and updates must go on while a majority of certifiers is up.
// Raft orders and persists; certification stays the pure state machine of
// package certification. etcd's RawNode is itself a deterministic state
// machine whose Ready batches list what to persist and send, so one member
// is a pure Core (Raft + certification state, no I/O, no goroutines) driven
// by a thin Node (ticker, disk, network), and the simulation drives many
// Cores in one goroutine.
//
// # Layers
//
//   - core.go: Core. The leader certifies (certification.State.Certify);
//     everything it certified since its last proposal goes to Raft as one
//     entry at the next Ready (a batch, entry.go: Raft framing, the record
//     checksum, one append message per peer and one apply are paid per
//     batch; old logs of one version per entry still read, as batches of
//     one). Followers apply committed batches with State.Restore, version
//     by version: the decisions and versions are the log's, so any member
//     replaying it reaches the same state. A leader certifies only once an
//     entry of its own term is applied (the barrier Raft appends on
//     election). A lost leadership, or a batch Raft refuses, rebuilds the
//     state from the applied prefix: versions certified and not committed
//     are failed versions, never acknowledged (the service drops their
//     replies; Node reports the loss before the versions committed in the
//     same batch). Aborts wait for a ReadIndex that confirms the leadership
//     after the decision. CertifyAll decides a stream's message under one
//     lock. A streamed transaction (CertifySpan) commits as the versions
//     first..last in one entry of its own, its span head (kindSpan: the
//     span's last log entry with an empty fragment), proposed right after
//     the batch before it; every member applies it with State.RestoreSpan
//     and reports the head alone, at last (Applied.Committed). The
//     fragments never travel in Raft: the service copies them into its
//     versioned log from its stage.
//   - raftlog.go, storage.go: DiskLog, the member's Raft state on disk: the
//     last snapshot (raft.snap, replaced atomically) and the log after it in
//     segment files (entries and hard state as checksummed records, one
//     write and one sync per batch; a torn tail of the last segment is
//     dropped on load). Compaction starts a segment and deletes the oldest
//     ones a durable snapshot covers: crash-safe at every step, no rewrite.
//   - base.go: the group's base, fixed once by the first leader in an
//     entry of its own; a leader's epoch (LogEntry.epoch) is base + term,
//     so a group re-created from empty directories does not reuse the old
//     group's epochs.
//   - snapshot.go: snapshots (Tashkent §7.3 "state transfer"): every
//     SnapshotEntries applied versions (or SnapshotBytes) a member snapshots
//     its applied state (certification.State.Marshal plus the applied
//     version and its entry's epoch, the group's base, the members'
//     addresses and the service's last log retention decision, entry.go),
//     compacts its log but for
//     CatchUpEntries Raft entries (batches), and restarts from snapshot
//     plus log. A snapshot is always at a batch boundary. A follower
//     behind the leader's first entry, or a new member, installs the
//     leader's snapshot (MsgSnap; the transport reports it sent or lost,
//     Raft's ReportSnapshot); Applied.Installed tells the service, whose
//     versioned log then restarts after it (certifier/group_snapshot.go).
//   - members.go, admin.go: online membership: the CertifierGroup service
//     (api/certifierpb/group.proto) adds a member as a learner, waits for
//     it to catch up, promotes it; removes a member, the leader handing its
//     leadership over first. Addresses travel in the ConfChange context and
//     in snapshots; the transport and Status follow the applied
//     configuration. Adding a member forces a snapshot: Raft refuses one
//     whose configuration does not list the receiver.
//   - node.go: Node, the driver: Ready loop, callbacks to the certifier
//     service (committed versions, lost leadership, confirmed aborts). A
//     follower's Raft clock follows the wall clock (tickClock: a ticker
//     drops ticks on a loaded machine).
//   - transport.go: one gRPC stream per peer (Raft.Send in api/certifierpb),
//     redialled within 250 ms of a peer coming back (gRPC's default backoff
//     kept a restarted member unreachable for seconds, which slowed the
//     next election).
//   - fault.go: a partition fault point for real-process tests.
//   - sim_test.go: the seeded simulation (network drops, delays, partitions;
//     crashes; disks that lose unsynced writes; snapshots every few entries,
//     restarts from them, catch-up by the leader's snapshot, crashes between
//     snapshot and compaction; members added and removed online; checkers;
//     -seed=N replays).
//
// The certifier service (internal/certifier/group.go) owns what the group
// means to agents: only the leader serves Certify and Stage, replies wait
// for durability (commit) or confirmation (abort), streams end with a lost
// leadership, and every member serves Fetch from its versioned log. A
// streamed writeset's fragments go from the leader to the other members'
// stages outside Raft (certifier/group_stage.go); Raft carries the span's
// head only, which every member's service writes out as the span's
// entries, from its own stage or fetched from another member
// (certifier/group_writer.go).
//
// # Not done
//
//   - Throughput: the 3-member group does 33,000-39,000 certifications/s
//     on the shared 2-core machine when it is quiet, not the 50,000
//     (the single certifier does 70,000-80,000 there); see
//     docs/BENCHMARKS.md. etcd's AsyncStorageWrites (the leader's fsync off
//     the Ready loop) is not tried.
//   - Failover: most of the pause is the election timeout (0.4 to 0.8 s,
//     DefaultElectionTicks); an election that takes a second round (about
//     one kill in ten) then still ends within 2 s. A shorter timeout risks elections while the leader lives on a loaded
//     machine (PreVote keeps those from deposing it while the other
//     follower hears it).
//   - A snapshot is taken, written and fsynced in the Raft loop (a pass
//     over the conflict window, tens of MB with the default window): every
//     SnapshotEntries versions the loop stops for a moment (the p99 of a
//     benchmark run that includes one is hundreds of ms). etcd takes and
//     writes snapshots off the loop; not done here. A snapshot is sent as
//     one gRPC message (limit about 65 MiB): a larger state would need
//     chunking.
//   - A member restarted empty under an id the group knows is only caught
//     at the leader's first heartbeat that commits beyond its log
//     (ErrLostLog: it stops); until then it may have voted again. It must
//     be removed and added under a new id (docs/OPERATIONS.md).
//   - An agent behind the start of the leader's versioned log is told to
//     rebuild its replica even if another member holds the versions: the
//     Certify stream delivers from the leader only (Fetch falls back).
//   - tashkent up/down know only the members they started; the fault
//     harness knows only member 1.
//   - Streamed writesets (internal/certifier/group_stage.go): a member
//     copies its own stage into its versioned log after checking only the
//     fragment count, not a checksum of the content; StageCopy and
//     StageDiscard are admitted on the sender's id and term from request
//     metadata, which is not authentication. BeforeCompact waits, in the
//     Raft loop, for the writer to finish a span it is copying or
//     fetching. A member lacking a committed span that no running member
//     serves waits for it without bound (it reports the span; see
//     docs/OPERATIONS.md).
//
// (TLS between members: NodeConfig.DialOptions carries the member's
// certifier TLS, package grpctls; the server side is certifier.Listen's.)
//
// # Debugging
//
// Every member logs "certifier group: role changed"; `tashkent certifier
// members` and `tashkent status` show each member's role, term, Raft index,
// applied index and durable version. A simulation failure prints its seed:
// go test ./internal/certgroup -run TestSimulation -seed=N -v prints the
// trace.
package certgroup
