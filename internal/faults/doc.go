// Package faults is the fault-test harness: it proves, the way
// Jepsen does, that tashkent keeps snapshot isolation across replicas
// (Tashkent §2, GSI) and loses no acknowledged commit while its processes
// crash, pause and get partitioned.
//
// Why real processes. The properties at stake live in the seams between
// processes: a PostgreSQL that loses its last commits under
// synchronous_commit=off and must be caught up from the certifier's log
// (Tashkent §7.1), a backend that dies between certification and its
// commit, or while it holds the replica's commit turn (§8.1), an agent
// that dies while backends wait for its decisions, a certifier restarted
// on its log while agents re-send. Only kill -9 of real processes
// exercises those paths, so Run starts a real 3-replica cluster (mode mw, or ed) with
// cluster.Up (what `tashkent up` runs: PostgreSQL with the extension, an
// agent per replica, the certifier) and signals the PIDs recorded in
// cluster.json, or, for kill-backend, a backend that tashkent.backends()
// shows in the commit order. The clients connect to the replicas'
// PostgreSQL servers, as applications do. The seeded deterministic
// simulation (internal/sim) covers the same checkers over many more
// interleavings, without PostgreSQL.
//
// Mode ed (Config.Mode, EDShortProfile; ed.go) runs the same harness on a
// cluster with eventual durability (Kashi ch. 2): a share of the
// list-append transactions is fast, and the certifier waits before writing
// each batch (a hidden fault flag) so that each kill -9 of it fails the
// versions it decided and had not made durable. After the run each
// transaction's outcome is asked with tashkent.txn_state(version, epoch):
// a fast commit that failed becomes :fail in the history, so that adya
// reports any transaction that read its write and did not fail with it
// (G1a); an acknowledged safe commit must be durable, a safe COMMIT told
// FATAL TK006 failed, and no replica may keep a failed write.
//
// Layout, one concern per file:
//
//   - run.go: one run: cluster, setup, workload under faults, checks.
//   - client.go: a session pinned to one replica; how an error maps to
//     :ok / :fail / :info (Elle's outcome types).
//   - listappend.go, history.go, adya.go: the list-append workload, its
//     EDN history, and adya's verdict (G2-item allowed, everything else
//     forbidden).
//   - ed.go: mode ed's fast and safe transactions, their outcomes resolved
//     after the run, and its checks.
//   - bank.go, longfork.go: invariants checked by the harness itself.
//   - converge.go: equal versions and checksums after the faults heal.
//   - nemesis.go, control.go, netpart.go: the faults, the processes (and
//     backends) they hit, and the certifier's network namespace for
//     partitions of the agents' certifier connections.
//   - group.go, group_nemesis.go: a certifier group (Config.Certifiers > 1,
//     Tashkent §7.3): its members taken over, the leader found by Status,
//     kill -9 / SIGSTOP of the leader or a follower, and member-to-member
//     partitions through the group's transport fault point.
//   - pauses.go: the longest time without an acknowledged commit around
//     each fault (the failover pause as clients see it).
//   - selftest.go: the detector self-test; a harness that cannot see a
//     certifier that certifies nothing proves nothing.
//
// Where to start debugging a failed run: summary.json and faults.txt in
// the output directory, then adya's report (history.adya.json), then the
// processes' logs under cluster/. docs/RELIABILITY.md says what is tested.
package faults
