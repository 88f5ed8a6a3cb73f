// Package sim is a seeded, deterministic, single-threaded simulation of the
// certifier and N replicas (FoundationDB and TigerBeetle VOPR style): one
// seed runs a whole cluster in one goroutine, with a simulated clock, network
// and disk, injects faults, and checks at the end that snapshot isolation,
// durability and convergence held. A failing seed replays identically.
//
// # Why a simulation
//
// The real-process fault tests (internal/faults) run a handful of
// schedules per minute. The orderings that break replication protocols are
// rare interleavings: a reply lost just before the certifier crashes, a retry
// arriving after its transaction slid out of the certifier's window, a replica
// losing its unsynced tail while a local commit waits for its turn. A
// simulation runs thousands of schedules per second and makes every one of
// them reproducible from its seed.
//
// # What is real and what is modeled
//
// The certifier's decisions and the replica's commit order are real code,
// called as the services call them; the simulation drives them with its
// own network, disk and clock in place of goroutines, gRPC and fsync.
//
// Real code:
//   - internal/certification: the certifier's state machine (conflict index,
//     low-water mark, transaction-id deduplication, Restore after a restart).
//   - internal/certifier's decisions (core.go): each message's requests
//     prepared, decided and answered (CertifyMessage: limits, keys read from
//     the encoded writeset, the log entry encoded, the overloaded path); which
//     replies a stream may send and when it is pushed entries (TakeSendable,
//     PushDue); the entries sent before the replies (SendReplies); which
//     sessions are admitted (Admit: the history a replica sends compared
//     with the log's runs by log matching); where recovery starts
//     (WindowBase) and how entries are restored (DecodeEntryKeys).
//   - internal/agent/order: the replica's commit order as the agent keeps it
//     (Register, Deliver, Abandon and the cancel of a batch waiting behind an
//     abandoned version, Next, Done, Observe, Reset).
//   - internal/certclient.Continuing and internal/logentry: entries travel
//     encoded, as the log holds them, and writesets as the extension sends
//     them (api/certifierpb).
//
// Modeled, following the code they stand for (file names under internal/):
//   - certProcess (certifier/single.go, stream.go): the goroutines around
//     the decisions: one group commit (write, then sync) in flight at a
//     time, a send round per stream whenever its answers or the durable
//     version change. On restart it restores the last window of its log into
//     a new State and takes a new generation, the epoch of the entries it
//     certifies (LogEntry.epoch), as nextGeneration does: above the
//     generation file's and every epoch in the log, and at least the clock
//     (the tick). It admits streams with the log's runs (epoch, first
//     version), computed from its entries. A crash loses what was not
//     synced, and in mode ed the versions decided and not yet written.
//   - disk: entries written but not fsynced are lost on a crash (a random
//     prefix of them survives, as a torn write behind a CRC would leave).
//   - streamClient (certclient/client.go): pipelined requests; on a broken
//     stream it reopens from the delivered version, re-sends every pending
//     request with the same transaction id, and settles pending calls from
//     delivered entries.
//   - replica: the agent's drivers around the order (agent/apply.go,
//     certify.go, maintain.go) and the database. A key-value store with
//     multi-version history stands in for PostgreSQL, and its commits take
//     their turn as the extension makes them (extension/src/turn.c): a
//     version commits once the one before it is visible, so the applier's
//     batch, sent as soon as it is planned, waits in the database for the
//     local versions before it. Sessions label a transaction with the
//     database's version at BEGIN and take their snapshot at the first
//     statement (so the label may be older than the snapshot: Tashkent §6.2
//     "conservative assigning of versions"; the extension certifies from the
//     replica's version at commit instead, extension/src/commit.c), send
//     (start_version, writeset) on COMMIT, and commit locally when their
//     turn comes (Tashkent §6.2 C4/C5). In mw mode the store loses its
//     unflushed tail on a crash (synchronous_commit=off, Tashkent §7.1 case
//     2) and the replica catches up from the certifier's log.
//   - the replica's history (agent/history.go, the table tashkent.history):
//     runs (epoch, first version) kept in the store. A run is recorded with
//     a synchronous commit (which flushes every commit before it too)
//     before the first entry of a new epoch goes to the order, so a run
//     may precede its version but never follow it; entries that would start
//     a run while the database is down are not delivered. Every start of
//     the agent (and every restart of its database) deletes the runs above
//     the version the store recovered; every stream opens with the rest.
//   - supervisor (cluster/supervisor.go): a replica the certifier refuses
//     halts (no new transactions; its client keeps trying and applies what
//     an admitted stream delivers) until its agent's next run (an agent
//     start or a database restart), and the supervisor rebuilds the
//     replicas whose agent runs and says it halted, one at a time. A
//     rebuild copies the store of the serving replica with the highest
//     version (its versions, epochs and history; chooseDonor: its agent
//     runs, has caught up and has not halted, and the certifier admitted
//     its stream), and the agent catches up from the copy's version. When
//     no replica serves, as after most re-creations of the certifier, the
//     real supervisor cannot rebuild and an operator must act; the
//     simulation then rebuilds from an empty store that catches up from
//     the log's start (the simulated log is never compacted) and counts
//     it as "rebuilt without a donor" (Stats.RebuildsWithoutDonor), which
//     TestSimulation reports.
//   - lineages (lineage.go): re-creating the certifier from an empty data
//     directory starts a new log whose versions reuse the numbers from 1,
//     under generations no older lineage used. Replicas still hold the old
//     lineage's versions: they must be refused and rebuilt. (In base and
//     mw entries reach replicas only once durable, so a restarted
//     certifier never leaves them another history; a re-created one
//     does.) Each transaction is judged against the log of its lineage.
//   - mode ed, eventual durability (ed.go; Kashi, "Eventual Durability",
//     ch. 2 and §3.6–3.8; docs/MODES.md): streams ask for early delivery,
//     and the certifier sends entries and commit replies as it decides
//     them, before any write, while the write of an earlier batch may be
//     in flight (certifier/early.go; early.go here); an entry its recent
//     ring cannot hold without dropping one not yet durable, and the
//     entries after it, wait until it is durable (Config.RecentEntriesMax,
//     small in some seeds). A stream that opens at a version it delivered
//     early waits until that version is durable before it is judged
//     (awaitDeliveredTail). A replica commits at the commit point; a fast
//     transaction (Config.FastPercent) is acknowledged then, a safe one
//     once the durable version its stream names reaches its version, a
//     safe read-only one once it reaches the replica's version at COMMIT.
//     A certifier crash that loses delivered versions fails them and every
//     later one of its epoch (durability is a prefix, §2.2.3); its next
//     generation reuses the numbers. A replica that applied one is refused
//     with a verdict "rewind to C" (certifier.Admit, pb.RewindRequired),
//     and the agent (agent/rewind.go, failed.go) tells its sessions ('X'
//     C, epoch: a safe commit waiting for durability fails with TK006 and
//     is never acknowledged, a decided transaction waiting for its turn
//     and a safe read above C get 40001, the fast commits above C are told
//     they failed), ends its run and the transactions in the way, undoes
//     what its store holds above C back to the newest usable pin (a
//     snapshot taken in this agent process and database life, at a version
//     the durable version reached), and catches up from there; without one
//     it halts and is rebuilt. Seeds in mode ed never re-create the
//     certifier (see Not modeled).
//
// Not modeled: row locks and the lock-watch preemption (Tashkent §8.2), the
// wire protocol, DDL, the certifier group (Raft: internal/certgroup has its
// own simulation), flow control, backends that keep their certified
// version across an agent restart (order.Inherit): an agent crash closes
// the simulated sessions, log retention (no replica is ever below the
// log's start), and the time a rebuild's copy takes (the donor's store is
// copied at once when the rebuild is due). In mode ed: barriers (TRUNCATE,
// DDL) and streamed spans, which are delivered only once durable; the
// rewinder's undo window and the limits of its pins; the durability feed
// apart from the stream (a safe commit waits for what its replica's
// stream names, and an agent or database crash ends the wait, unknown to
// the client); and re-creating the certifier: a safe commit's wait
// compares version numbers only (extension/src/safe.c), so one that
// outlives a rewind below its version and then a re-created certifier
// waits for the new log's number, which names another transaction.
//
// # Faults
//
// Each replica talks to the certifier over streams (gRPC in the real system).
// A stream carries per-direction sequence numbers, as TCP does. Faults act on
// single messages: a drop or a reorder shows up as a gap and breaks the stream
// (both sides then reconnect, which is how a real stream fails, and the
// client re-sends what is unanswered); a duplicate is discarded by the
// receiver, as TCP would (Config.DeliverDuplicateRequests hands it to the
// certifier instead, see TestAbortIsFinalOnlyWithoutDuplicates). A partition
// drops everything between one replica and the certifier, in both directions
// or one, for a while. The nemesis also crashes replicas (agent and database,
// the database alone, or the agent alone; a commit in flight may or may not
// have reached the database), crashes the certifier (its disk loses what was
// not synced), re-creates the certifier from an empty data directory (in a
// quarter of the SwarmConfig seeds), lets a store refuse a local commit
// (soft recovery, Tashkent §8.1), and the certifier aborts requests over
// its in-flight limit (overloaded). Streams ask for pushes, or not (Config.NoPush). SwarmConfig
// varies the mix with the seed, and runs a third of the seeds in mode ed
// (drawn last, so the others run as they did before ed was added).
//
// # Checkers (check.go)
//
// No version assigned twice; no acknowledged commit lost; every replica
// applies versions in order with no gap; all replicas converge to the same
// version and state after healing; no lost update (two committed transactions
// with overlapping writesets and overlapping [snapshot, commit] intervals);
// every read equals the value the log's prefix at the snapshot holds (which
// rules out G1a aborted reads, G1b intermediate reads, fractured reads and
// long fork, since every snapshot is a prefix of the one log); every replica
// applied the log's transaction at every version (long fork across replicas);
// and, from the values read alone, without trusting the snapshots the
// simulation recorded, each transaction's reads fit one prefix of the log
// (long fork as observed by clients). In mode ed: the acknowledged commits
// that must survive every crash are the safe ones; a fast one is in the
// log or a certifier crash failed its version; a transaction told its
// version failed (TK006, or a fast one told afterwards) is not in the log
// of the lineage that told it; a transaction whose snapshot held failed
// versions (its version there is not the log's) never commits, and a safe
// read-only one is never acknowledged (Kashi §2.2.1, property 5b); the
// reads of the others are checked as above. A transaction whose client was
// answered 40001 must not be in the log of the lineage whose certifier
// sent the answer (messages carry their sender's lineage, so an answer
// delivered after a re-creation names the older one), nor, if its
// session closed before COMMIT was sent, in any log. Foreign keys: some
// reads of update transactions stand for a foreign-key check of a parent
// row (Config.ReferencePercent) and are certified as references; no committed
// transaction's referenced key was written between its snapshot and its
// commit, and no write committed from a snapshot older than a reference to
// its key committed before it (the orphan-row race, in both orders).
//
// Histories (lineage.go), checked as they happen: every version a replica
// commits is durable in the log, with the log's transaction and epoch,
// and its run was recorded before it (nothing reaches a replica before it
// is durable, so no replica applies a failed version; in mode ed, it is
// the entry the certifier of its epoch delivered); it is committed on
// top of versions of the same log, so every replica holds the log's
// transaction at every version it holds (a replica caught up from a log
// that holds other transactions at its versions, or in mode ed that
// commits a new epoch's version on top of a failed one, holds "another
// history at the same versions"); the history a stream opens with gives the epochs
// the replica's store held when it was sent, and the certifier admits the
// stream exactly when that history agrees with the log's epochs at every
// version up to the replica's (compared version by version, not with
// certifier.CommonVersion). At the end every replica's history gives the
// log's epochs, and the cluster has converged only when every replica
// serves on an admitted stream: equal version numbers alone prove
// nothing.
//
// The self-test (TestMutationsAreCaught) runs deliberate bugs (Mutation): the
// real certification.Config.UnsafeSkipConflictCheck fault point, replies
// before fsync, a commit that does not wait for its turn, reads above the
// snapshot, recovery from the in-memory version instead of the store's, a
// replica installing two versions in swapped order, requests sent
// without their references, every write certified as a keeping update,
// admission by version numbers alone (Admit without the replica's
// history; it needs a re-created certifier, which the self-test turns on
// in every seed of it), and in mode ed a safe transaction acknowledged at
// its commit point, like a fast one (caught as a lost acknowledged commit
// or a safe read of failed versions), and a rewind that keeps the rows of
// the failed versions (caught as a read of a value no committed
// transaction wrote, G1a, or a state that differs from the log's replay).
// Each must be caught by the checker meant for it.
//
// # Running
//
//	go test ./internal/sim -run TestSimulation              # 2,000 seeds
//	go test ./internal/sim -run TestSimulation -seeds=100000
//	go test ./internal/sim -run TestSimulation -seed=N -v   # replay one, with its trace
//	go test ./internal/sim -run TestEventualDurability -v   # mode ed, versions failing often
package sim
