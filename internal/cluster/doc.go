// Package cluster runs a whole tashkent cluster on one machine: N PostgreSQL
// 15 replicas, one certifier and one proxy per replica. It is what
// `tashkent up`, `tashkent down` and `tashkent status` do; the commands in
// internal/cli only parse flags and print.
//
// # The cluster directory
//
//	DIR/
//	  cluster.json           the record of the cluster (State): mode, binary, and for
//	                         every process its ports, PID, data directory and log
//	  cluster.lock           flock held by `up` and `down` while they work
//	  certifier/             the certifier's --data-dir: its log segments (*.wal, LOCK)
//	    certifier.log        the certifier's stdout and stderr
//	  replica1/
//	    pgdata/              the PostgreSQL data directory (initdb), owned by
//	                         the postgres user when up runs as root
//	      tashkent.conf      settings tashkent owns (port, synchronous_commit, ...;
//	                         see internal/pgserver)
//	      postgres.log       PostgreSQL's output
//	    proxy.log            the proxy's stdout and stderr
//	  replica2/ ...
//
// DIR and the replica directories are mode 0755 so that the postgres user
// reaches its data directories when up runs as root (initdb refuses root;
// internal/pgserver runs PostgreSQL as postgres).
//
// cluster.json is rewritten atomically (temporary file, fsync, rename) after
// every process start and stop, so a reader, or an up that dies halfway,
// never leaves a record that misses a running process. All paths in it are
// absolute; a PID of 0 means "not running".
//
// # Lifecycle
//
// Up on a directory without cluster.json creates the cluster: it records
// the layout, then starts, recording each PID as soon as the process
// exists:
//
//  1. PostgreSQL, all replicas in parallel: pgserver.Init (initdb the first
//     time; synchronous_commit off for mode mw, on for base) and
//     pgserver.StartDetached, on a free port.
//  2. The certifier: `tashkent certifier` started detached (setsid, output
//     to its log), ready when its Status RPC answers with its own PID.
//  3. The proxies, in parallel: `tashkent proxy --backend <its PostgreSQL>
//     --certifier <the certifier>`, ready when `SELECT 1` through it works.
//
// Processes are started from the binary running up (recorded as "binary"),
// so the cluster runs the version of tashkent that started it. A process
// that exits or does not get ready within the timeout is killed and the
// error carries the tail of its log; a port picked as free that someone else
// took meanwhile is picked again.
//
// Up on a directory with cluster.json restarts what is not running and
// adopts what is: a PostgreSQL serving the data directory (postmaster.pid,
// checked with pgserver.IsPostgres), a certifier or proxy whose recorded PID
// still has the recorded command line. Nothing is initialized again, and
// every process gets its recorded ports back. The number of replicas, the
// mode and the ports of an existing cluster cannot change.
//
// Down stops in the reverse order of dependence: proxies (SIGTERM, so no
// client commits while the rest goes away), then the certifier (SIGTERM; it
// closes its log), then PostgreSQL (pgserver.StopPID: fast shutdown). A PID
// is signalled only after /proc/PID/cmdline shows it still is the recorded
// process (subcommand plus --data-dir or --listen; for PostgreSQL, a
// postgres on that data directory): PIDs are reused. Down records every
// stopped process with PID 0, so it is idempotent.
//
// Status reads cluster.json and probes without changing anything: process
// liveness, each replica's version read straight from its database
// (replica.ReadVersion, 0 before the proxy installed its schema), the lag
// behind the certifier's durable version, and the certifier's Status RPC.
//
// # Debugging
//
// Start with `tashkent status --data-dir DIR`, then the log of whatever is
// down: DIR/certifier/certifier.log, DIR/replicaK/proxy.log,
// DIR/replicaK/pgdata/postgres.log. Each start appends a "--- ... tashkent
// up starts" line with the full command line to the certifier and proxy
// logs.
package cluster
