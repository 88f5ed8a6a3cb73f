// Package certgroup replicates the certifier with Raft (Tashkent §7.3,
// which uses Paxos; issue 4), on go.etcd.io/raft/v3.
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
//   - core.go: Core. The leader certifies (certification.State.Certify) and
//     proposes the committed entry; followers apply committed entries with
//     State.Restore. A leader certifies only once an entry of its own term is
//     applied (the barrier Raft appends on election). A lost leadership
//     rebuilds the state from the applied prefix: versions certified and not
//     committed are failed versions, never acknowledged. Aborts wait for a
//     ReadIndex that confirms the leadership after the decision.
//   - raftlog.go: DiskLog, the member's Raft log on disk (entries and hard
//     state as checksummed records, one write and one sync per batch; a torn
//     tail is dropped on load).
//   - node.go: Node, the driver: Ready loop, callbacks to the certifier
//     service (committed versions, lost leadership, confirmed aborts).
//   - transport.go: one gRPC stream per peer (Raft.Send in api/certifierpb).
//   - fault.go: a partition fault point for real-process tests.
//   - sim_test.go: the seeded simulation (network drops, delays, partitions;
//     crashes; disks that lose unsynced writes; checkers; -seed=N replays).
//
// The certifier service (internal/certifier/group.go) owns what the group
// means to proxies: only the leader serves Certify, replies wait for
// durability (commit) or confirmation (abort), streams end with a lost
// leadership, and every member serves Fetch from its versioned log.
//
// # Not done
//
// Membership changes (Core.ProposeConfChange exists; nothing calls it),
// snapshots and log compaction (the Raft log grows; a restart replays it).
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
