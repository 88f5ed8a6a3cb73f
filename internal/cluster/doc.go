// Package cluster runs a whole tashkent cluster on one machine: N PostgreSQL
// 15 replicas with the tashkent extension loaded, an agent beside each, and
// a certifier (or a Raft group of certifiers). It is what `tashkent up`,
// `tashkent down` and `tashkent status` do; the commands in internal/cli
// only parse flags and print. It also changes a running cluster's
// replicas (`tashkent replica add|remove|rebuild`, replica_*.go, by state
// transfer from a donor: transfer.go) and runs the supervisor that rebuilds
// a replica whose agent halted (supervisor.go).
//
// Clients connect to the replicas' PostgreSQL servers directly. The
// extension certifies each writing transaction at commit through the
// replica's agent (a Unix socket in the data directory), and the agent
// talks to the certifier, applies the other replicas' writesets and
// recovers the replica after a crash (internal/agent, extension/).
//
// # The cluster directory
//
//	DIR/
//	  cluster.json           the record of the cluster (State): mode, binary, and for
//	                         every process its ports, PID, data directory and log
//	  cluster.lock           flock held by the commands that change the cluster
//	                         (up, down, replica add/remove/rebuild, a supervisor's rebuild)
//	  supervisor.log         the supervisor's output
//	  removed/replicaK-TIME/ the directory of a removed replica (replica remove)
//	  removed/replicaK-rebuilt-TIME/pgdata/  replica K's data directory from
//	                         before its last rebuild (only the last is kept)
//	  certifier/             the certifier's --data-dir: its log segments (*.wal, LOCK)
//	    certifier.toml       the certifier's config file (config.go)
//	    certifier.log        the certifier's stdout and stderr
//	  certifier-K/           member K of a certifier group (--certifiers 3 or 5)
//	  certifier-tls/         CA and certificates (--certifier-tls)
//	  replica1/
//	    pgdata/              the PostgreSQL data directory (initdb), owned by
//	                         the postgres user when up runs as root
//	      tashkent.conf      settings tashkent owns (port, synchronous_commit,
//	                         shared_preload_libraries, ...; see internal/pgserver)
//	      postgres.log       PostgreSQL's output
//	      tashkent_agent.sock  the agent's socket (tashkent.agent_socket)
//	    agent.toml           the agent's config file (config.go)
//	    agent.log            the agent's stdout and stderr
//	    pgdata.transfer/     a copy being taken from a donor (never started)
//	    transfer.json        the record of a copy in progress or interrupted
//	  replica2/ ...
//
// DIR and the replica directories are mode 0755 so that the postgres user
// reaches its data directories when up runs as root (initdb refuses root;
// internal/pgserver runs PostgreSQL as postgres).
//
// cluster.json is rewritten atomically (temporary file, fsync, rename) after
// every process start and stop, so a reader, or an up that dies halfway,
// never leaves a record that misses a running process. All paths in it are
// absolute; a PID of 0 means "not running". Its format is 2; a file of
// format 1 (replicas behind proxies) is refused with what to do.
//
// # Lifecycle
//
// Up on a directory without cluster.json creates the cluster: it records
// the layout, then starts, recording each PID as soon as the process
// exists:
//
//  1. PostgreSQL, all replicas in parallel, from the installation
//     internal/pgext builds with the extension (pgext.Prepare, once per
//     extension source and server): pgserver.Init (initdb the first time;
//     shared_preload_libraries = 'tashkent', default_transaction_isolation
//     = 'repeatable read', synchronous_commit off for mode mw and on for
//     base and ed, wal_writer_flush_after = 0 for ed) and pgserver.StartDetached, on --base-port+K-1 or a free port.
//  2. The certifier (or every group member): `tashkent certifier --config
//     <data-dir>/certifier.toml` started detached (setsid, output to its
//     log), ready when its Status RPC answers with its own PID. Up writes
//     the config file (data-dir, listen, metrics-listen; shares-host for
//     a single certifier, which runs beside the replicas; id and peers for
//     a member; the TLS files) just before.
//  3. The agents, in parallel: `tashkent agent --config
//     DIR/replicaK/agent.toml`, a file with name = "replicaK", socket =
//     "<pgdata>/tashkent_agent.sock", postgres = "host=<pgdata>
//     port=<port> user=postgres", certifier = "<every member>", mode,
//     metrics = "127.0.0.1:<port>" and replica-index = K (the replica's
//     index, members.go). An agent installs the extension in the
//     database, catches the replica up from the certifier's log and then
//     opens the replica's admission gate: until then PostgreSQL refuses
//     clients with 57P03
//     (extension/src/admit.c; the agent's role, postgres, is let in). It
//     is ready when the metrics port is its own listening socket (/proc),
//     its /healthz says serving and tashkent.status() says the gate is
//     open.
//
// Processes are started from the binary running up (recorded as "binary"),
// so the cluster runs the version of tashkent that started it. A process
// that exits or does not get ready within the timeout is killed and the
// error carries the tail of its log; a port picked as free that someone else
// took meanwhile is picked again.
//
// Up on a directory with cluster.json restarts what is not running and
// adopts what is: a PostgreSQL serving the data directory (postmaster.pid,
// checked with pgserver.IsPostgres), a certifier or agent whose recorded
// PID still has the recorded command line (an adopted agent must also
// serve within the timeout). Nothing is initialized again, and every
// process gets its recorded ports back. The mode and the ports of an
// existing cluster cannot change; a --replicas that differs from the
// recorded number grows the cluster (replica add) or shrinks it (replica
// remove, highest index first) once everything runs. Last, up starts the
// supervisor (or adopts it), unless the cluster records auto_rebuild off.
// After every process was killed (a machine crash), up starts PostgreSQL
// (crash recovery; with
// synchronous_commit off it may lose its last commits), the certifier (its
// log has every acknowledged commit), and the agents, which replay what
// the replicas lost before they admit clients. The remains of a postmaster
// killed a moment ago (a zombie, orphaned backends holding its shared
// memory) are waited out.
//
// Down stops in the reverse order of dependence: the supervisor first
// (before taking the lock, which a supervisor rebuilding a replica holds),
// then the agents (SIGTERM; an agent
// closes its replica's gate and ends its backends' sessions, so no client
// commits while the rest goes away), then the certifiers (SIGTERM; each
// closes its log), then PostgreSQL (pgserver.StopPID: fast shutdown). A PID
// is signalled only after /proc/PID/cmdline shows it still is the recorded
// process (subcommand plus its --config file, or the --data-dir of a
// certifier and the --socket of an agent started with flags; for
// PostgreSQL, a postgres on that data directory): PIDs are reused. Down records every stopped process with PID 0, so it is
// idempotent.
//
// Status reads cluster.json and probes without changing anything: process
// liveness, each agent's /healthz, each replica's version
// (tashkent.committed_version()) and gate (tashkent.status()) read from its
// database as postgres, the lag behind the certifier's durable version, and
// the certifier's Status RPC.
//
// # Debugging
//
// Start with `tashkent status --data-dir DIR`, then the log of whatever is
// down or not serving: DIR/replicaK/agent.log (each step of an agent's
// start, with versions), DIR/replicaK/pgdata/postgres.log,
// DIR/certifier/certifier.log. Each start appends a "--- ... tashkent up
// starts" line with the full command line to the certifier and agent logs;
// `tashkent agent --config DIR/replicaK/agent.toml --print-config` shows
// every setting an agent runs with (likewise for a certifier).
// Inside a replica, SELECT * FROM tashkent.status() shows its version, its
// applier and its gate, and tashkent.backends() every backend's place in
// the commit order.
package cluster
