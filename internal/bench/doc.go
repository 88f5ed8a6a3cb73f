// Package bench is `tashkent bench`: benchmarks, not tests, that measure
// tashkent against PostgreSQL alone and against the peers a user would pick
// instead, side by side, in one invocation, and report ratios.
//
// Two commands share the machinery here (starting systems, pgbench,
// interleaving, medians, cleanup by PID):
//
//   - `tashkent bench pgbench` (Config, Run; bench.go, report.go): TPC-B of
//     standalone PostgreSQL against tashkent mw and base, described below.
//   - `tashkent bench WORKLOAD --systems LIST` (SuiteConfig, RunSuite;
//     suite.go, suite_report.go): one of the workloads of workload.go
//     (AllUpdates, TPC-B, select-only, sysbench oltp_read_write and
//     oltp_read_only, contention, mixed, an 80/20 read-mostly mix, TPC-C
//     by go-tpc) against any of the systems of system.go and peers.go
//     (standalone PostgreSQL with synchronous_commit on/off, tashkent mw,
//     base, mw-fast and mw-safe with 1..8 replicas, mode ed with TPC-C's
//     NewOrder fast, streaming replication with synchronous standbys,
//     pgpool-II native replication and snapshot-isolation mode). It
//     writes CSV, Markdown and
//     PNG figures (plot.go, gonum/plot), every figure also as a ratio to a
//     baseline of the same invocation. delay.go is the latency regime
//     (a delaying relay between the hosts of a replicated system: the
//     kernel here has no netem), scaleout.go the scale-out model of
//     Jiménez-Peris et al. §2.1 with wo measured from /proc (cpu.go).
//
// Both take --fsync-delay D, the slow-disk regime (fsyncdelay.go and
// internal/bench/slowdisk): every durable flush of every system takes D
// longer, after the real flush, as the Tashkent paper's 8 ms disks did (§9,
// Fig. 4–6). Every PostgreSQL runs with an LD_PRELOAD shim around fsync,
// fdatasync and syncfs (wal_sync_method pinned to fdatasync): what a commit
// waits for in sync-on, base, streaming and pgpool; the certifier, whose Go
// system calls LD_PRELOAD cannot reach, sleeps after each log sync
// (`tashkent certifier --unsafe-fault-fsync-delay`): what a commit waits
// for in mw, whose replicas run with synchronous_commit=off. The agents
// write nothing durable. Without it, fsync here takes 0.1–1 ms and the
// paper's durability-versus-ordering effect cannot show.
//
// Every workload but sysbench's and TPC-C's is a pgbench script, so that
// every system is driven by the same client with the same retry rule. A failed run of
// one system (pgpool-II ends sessions on a cross-backend deadlock, and
// sysbench then crashes) is recorded as FAILED in its cell and the others
// go on.
//
// The rest of this comment describes `tashkent bench pgbench`; the suite
// follows the same rules (interleaving, medians, settle between runs).
//
// # What is compared
//
//	sync-on   one PostgreSQL 15, synchronous_commit=on: every commit waits for
//	          its WAL fsync. The baseline of every ratio.
//	sync-off  one PostgreSQL 15, synchronous_commit=off: what the database
//	          does when durability is not its job (the ceiling for mw).
//	sync-on-rr  sync-on at REPEATABLE READ, the isolation tashkent gives:
//	          the cost of snapshot isolation itself (40001 and retries on
//	          hot rows) apart from what tashkent adds.
//	mw        tashkent mode mw: N PostgreSQL replicas with the tashkent
//	          extension (shared_preload_libraries) and
//	          synchronous_commit=off, a certifier with fsync on (durability
//	          is its group-committed log), and one `tashkent agent` per
//	          replica. Clients connect to the replicas' PostgreSQL. The
//	          issue's goal: at least 0.8x sync-on with one replica (the
//	          Tashkent paper's MW was within 5% of a standalone database),
//	          ideally 1.0x or more.
//	base      tashkent mode base: the same cluster with synchronous_commit=on
//	          on the replicas.
//	mw-fast   tashkent mode ed (eventual durability), started as `tashkent up
//	mw-safe   --mode ed` starts it: replicas with synchronous_commit=on and
//	          wal_writer_flush_after=0, agents with --mode ed (they ask the
//	          single certifier for early delivery), the certifier as in mw.
//	          Row locks are held until the commit point, not until durable.
//	          mw-fast's client sessions run with PGOPTIONS
//	          "-c synchronous_commit=off": every transaction is fast
//	          (acknowledged at its commit point); mw-safe's keep on: every
//	          transaction is safe (acknowledged once durable).
//
// Every PostgreSQL gets the same settings apart from synchronous_commit and,
// for tashkent, shared_preload_libraries (those of internal/pgserver plus
// shared_buffers=128MB); the same binaries (a tashkent replica runs from
// internal/pgext's installation, whose programs are the system's, linked);
// the same default isolation, READ COMMITTED (the extension keeps the level
// a session asks for and maps only SERIALIZABLE to REPEATABLE READ; a READ
// COMMITTED transaction is certified from its replica's version at commit);
// and the same data: pgbench's TPC-B tables at the same scale, created
// with their primary keys first (`pgbench -i -I dtp`), a primary key `hid
// uuid DEFAULT gen_random_uuid()` on pgbench_history, then the rows pgbench
// would generate, inserted in transactions of at most 50,000 rows
// (tpcbload.go), on the standalone servers too, so that they also maintain
// the history key. tashkent replicates pgbench_history without a key as
// well; the key stays so that the figures compare with BENCHMARKS.md's. A tashkent system's replicas are seeded (seed.go): the same rows
// are loaded straight into every replica before the certifier and the
// agents start, so nothing is certified and every replica starts at version
// 0; the agent's CREATE EXTENSION then installs the capture triggers.
//
// # How
//
// Run starts everything it compares itself, under a new temporary directory,
// on free ports: PostgreSQL through internal/pgserver (tashkent replicas
// from internal/pgext's installation: the first run builds the extension,
// which needs the server headers, TASHKENT_PG_INCLUDEDIR), and the
// certifier and agents as `tashkent certifier` / `tashkent agent` child
// processes of this binary (Config.Binary), each in its own process group,
// with its log next to its data. The certifier runs with --shares-host on
// the real disk, as `tashkent up` runs it (one Go thread on two cores),
// and without it with --fsync-delay, where a log flush would hold that
// thread for the emulated delay. --certifiers 3 (or 5) gives every tashkent
// system a certifier group instead (certifiergroup.go): members
// `tashkent certifier --id K --peers 1=ADDR,2=ADDR,...` on loopback, all
// ports picked before the first member starts, each keeping every CPU (no
// --shares-host, no --max-procs, as `tashkent up --certifiers N` runs
// them), each given every --certifier-arg; the system is ready once a
// member leads, and its agents are given every member and follow the
// leader. The certifier's counters are the leader's (Status over every
// member), the breakdown's certifier CPU the members' sum. --delay needs a
// single certifier (a member's redirect to the leader would go around the
// relay); --certifier-arg=--unsafe-fault-peer-delay=D delays the links
// between members instead. An agent connects to its replica through
// the server's Unix socket, listens for its backends on the extension's
// socket in the data directory, and serves /metrics and /healthz on a free
// port; a system is ready when every agent's /healthz answers 200 and its
// replica admits clients (tashkent.status(): the bench connects as the
// postgres superuser, whom the extension admits before the agent opens the
// gate, so it asks). It does not use `tashkent up` (internal/cluster),
// whose replicas run with a smaller shared_buffers. At the end, and after a
// failure or Ctrl-C, it stops what it started by the PIDs it started:
// agents (SIGTERM), pgpool, the certifier or every group member
// (SIGTERM), PostgreSQL (fast shutdown). The directory is removed unless
// --keep, or the bench failed (its logs are then worth reading).
//
// Each measured run is `pgbench -n --max-tries 1000 -T D -M PROTOCOL -c C
// -j min(C,2) -P 1` against the system's endpoint. -n: no vacuum by pgbench
// (instead, before each run the bench itself runs VACUUM ANALYZE and
// CHECKPOINT straight on every server of the system, outside the measured
// time, so that no run starts with another's dirty pages or dead tuples).
// --max-tries: transactions that get SQLSTATE 40001 (a certification abort,
// a local transaction doomed by a remote writeset, or a serialization
// failure) are retried by pgbench and counted as retried; a standalone
// server at READ COMMITTED has none. A tashkent system with several
// replicas gets its clients spread over all its replicas, one pgbench
// process per replica; tps are summed and latencies averaged weighted by
// transactions; before each of its runs the bench waits until every
// replica has committed every version the certifier assigned
// (tashkent.committed_version()). After the last run it checks that the
// replicas of every tashkent system hold the same data (verify.go: the
// same version, the same checksum of every table); a bench whose replicas
// diverged fails.
//
// pgbench's "tps = X (without initial connection time)" and "latency
// average" are parsed from its output; the certifier's Status RPC, read
// before and after each run, gives the certifications per fsync (group
// commit) of the tashkent systems.
//
// # Why ratios, interleaving and medians
//
// The machines this runs on are small (2 cores) and shared: absolute tps
// move by tens of percent from one minute to the next. A number measured
// yesterday, or in another invocation, says little; the ratio of two
// systems measured in the same minutes says much more. So every cell is
// run --repeat times, the systems alternate (A B C D A B C D, repeats
// outermost) so that a noisy moment hits one run of every system rather than
// every run of one, the table shows the median of each cell and every
// run's tps, and the ratio column divides by the sync-on median at the same
// client count from the same invocation. The suite (tashkent bench
// WORKLOAD) also divides each run by the baseline's run of the same repeat
// and reports the median and range of those ratios, with the load average
// of the machine: the spread says whether a target is met reliably or in
// one lucky cell.
//
// # Eventual durability (Kashi, chapter 4)
//
// The thesis's experiments, on this cluster (commands in BENCHMARKS.md):
//
//   - Fig. 4.1, latency of one client: allupdates --clients 1 on sync-off,
//     sync-on, mw-fast, mw-safe (and mw).
//   - Fig. 4.2-4.3, mixed (workload.go): one INSERT per transaction into a
//     keyless table of two integer columns; --fast-share P runs the scripts
//     fast.sql@P and safe.sql@(100-P), which differ only in their SET LOCAL
//     synchronous_commit (off, on), so that both pay the same statement and
//     the system's session default decides nothing (mw-fast and mw-safe
//     are then the same system: the suite refuses both at once). pgbench
//     reports each script apart ("SQL script N:"); the table, the
//     WORKLOAD-scripts.csv file and the -latency-by-script figure show the
//     fast and the safe transactions' tps and latency (medians over the
//     repeats). sync-on is the thesis's baseline PostgreSQL (fast: its
//     synchronous_commit=off); in mw a safe transaction also flushes its
//     replica's WAL, so mw is no comparison here.
//   - Fig. 4.4-4.6, contention: one-row updates of a table of 250 rows;
//     at level c a transaction updates one of the first (1-c) of the rows
//     (rounded: 125 rows at 0.5, 50 at 0.8, 13 at 0.95) with probability c
//     and one of the others otherwise, so 0.5 is uniform. Not retried
//     (--max-tries 1): the abort rate is the measurement. --isolation
//     serializable is Fig. 4.4 (tashkent runs it as REPEATABLE READ),
//     repeatable-read Fig. 4.5.
//   - --rate R offers R transactions a second over all clients (pgbench
//     -R, shared by the pgbench processes in proportion to their
//     clients), as the thesis offers 4000; latency then counts from each
//     transaction's scheduled start. Fig. 4.6 is one invocation per rate.
//
// TPC-C (Fig. 4.7-4.8) is not part of the bench.
//
// # Finding where the time goes
//
// --per-statement adds pgbench -r and prints every statement's average
// latency per system, with the 40001 retries each statement caused (on
// TPC-B at scale 1 under snapshot isolation, nearly all start at the one
// pgbench_branches row). --builtin simple-update runs pgbench's TPC-B
// without the teller and branch updates: no hot row, so what remains is
// the cost of the path itself.
//
// The suite's --breakdown (breakdown.go, pgsampler.go) explains a ratio
// instead: CPU per committed transaction and share of the cores of every
// kind of process (PostgreSQL, split into client backends, the agents'
// sessions and the rest; agents; certifier; pgpool; the clients; the rest
// of the shared machine), the system's CPU per commit against the
// baseline's, the agents' certifications (outcomes, round trip to the
// certifier), dooms and applies, aborts by cause and replica staleness.
//
// # The read path
//
// `tashkent bench select-only` is pgbench -S (one SELECT by key of
// pgbench_accounts) on the TPC-B data of --scale, every client of a
// replicated system on its first server: a replica of a running tashkent
// cluster (agents serving, certifier up) against the same PostgreSQL
// alone. A read-only transaction never leaves PostgreSQL; this says what
// the extension's hooks cost it.
//
// # The figures, one invocation each
//
//	tashkent bench tpcb --scale 16 --clients 1,8,32 \
//	    --systems sync-on,mw:1,mw:3,streaming:3,pgpool-native:3 --repeat 3
//	tashkent bench tpcb --scale 16 --clients 8 --systems sync-on,mw:1 --breakdown --repeat 3
//	tashkent bench select-only --scale 16 --clients 1,8 --systems sync-on,mw:1,mw:3 --repeat 3
//	tashkent bench tpcb --scale 16 --clients 1,8,32 --systems base,mw --fsync-delay 8ms --repeat 3
//
// (the first system is the baseline of the ratios; --out DIR keeps CSV,
// Markdown and PNG).
//
// # TPC-C
//
// `tashkent bench tpcc` (tpcc.go, tpcc_report.go) runs go-tpc
// (github.com/pingcap/go-tpc v1.0.12, `-d postgres`), built on first use
// with `go install` into the user's cache directory ($TASHKENT_GO_TPC
// names another binary). `go-tpc tpcc prepare --warehouses W` fills a
// throwaway PostgreSQL once per invocation; pg_dump and pg_restore load
// the same rows into every system (seeded into every replica of a
// tashkent system). Each run is `go-tpc tpcc run -T C --time D
// --ignore-error` on the system's endpoints (one host, every replica's
// port: go-tpc opens its connections on them in turn). go-tpc does not
// retry: a failed transaction counts as an error of its type. The suite's
// table shows all transaction types together; the TPC-C tables show tpmC
// with its ratio to the baseline, and per type throughput, latency and
// errors, and the errors by the server's message. mw-neworder-fast is mode
// ed with a statement trigger on INSERT into new_order (NewOrder's alone)
// that sets synchronous_commit off for the transaction: NewOrder fast, the
// others safe (Kashi, Eventual Durability §4.5). The ED thesis's figures:
//
//	tashkent bench tpcc --warehouses 1 --clients 2 --duration 10s \
//	    --systems sync-on,mw:1,mw-safe:1,mw-neworder-fast:1 --repeat 3
//
// # Profiling
//
// --profile-dir DIR runs every certifier and agent with the hidden root
// flag --cpu-profile (SYSTEM-certifier.prof, or SYSTEM-certifier-K.prof
// for group member K, SYSTEM-agentK.prof), written
// when the bench stops them; a profile covers the process's whole life,
// loading included. Read one with `go tool pprof -top BINARY FILE`.
// --agent-arg and --certifier-arg pass a flag to every agent or certifier
// (e.g. --agent-arg=--log-level=info to see the lock watch's dooms,
// --certifier-arg=--max-procs=1), named in the report's header; --keep
// keeps the work directory, where each agent's log is
// SYSTEM/replicaK-agent.log beside its replica's pgK/postgres.log.
package bench
