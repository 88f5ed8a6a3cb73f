package bench

// The peers a user would pick instead of tashkent, started by the bench
// like the tashkent systems: PostgreSQL streaming replication with
// synchronous standbys, and pgpool-II (Debian's 4.3) in native replication
// and snapshot-isolation mode over standalone PostgreSQL backends.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// pgpoolBinary is where Debian's pgpool2 package installs pgpool-II.
const pgpoolBinary = "/usr/sbin/pgpool"

// standbyName is the application_name of standby i (1-based), the name
// synchronous_standby_names lists.
func standbyName(i int) string { return "standby" + strconv.Itoa(i) }

// startStreaming starts a primary and s.replicas-1 standbys made with
// pg_basebackup, then makes every standby synchronous:
// synchronous_standby_names = 'FIRST k (standby1, ..., standbyk)' with k =
// every standby, synchronous_commit=on (a commit waits for its WAL to be
// flushed on every standby). Clients talk to the primary only: the
// standbys are hot standbys that serve no benchmark traffic, since the
// workloads here mix reads and writes in one connection.
func (s *system) startStreaming(ctx context.Context, r *runner) error {
	primary, err := s.initPG(ctx, r, 0, true, nil)
	if err != nil {
		return err
	}
	s.pgs = []*pgserver.Server{primary}
	if _, err := primary.StartDetached(ctx); err != nil {
		return err
	}
	upstream := primary.Port()
	if s.delay > 0 {
		rl, err := startRelay(net.JoinHostPort("127.0.0.1", strconv.Itoa(primary.Port())), s.delay)
		if err != nil {
			return err
		}
		s.relays = append(s.relays, rl)
		upstream = rl.port()
	}
	names := make([]string, 0, s.replicas-1)
	for i := 1; i < s.replicas; i++ {
		dir := filepath.Join(s.dir, "pg"+strconv.Itoa(i+1))
		if err := baseBackup(ctx, r.binDir, primary.Port(), dir); err != nil {
			return err
		}
		conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", upstream, standbyName(i))
		standby, err := s.initPG(ctx, r, i, true, map[string]string{"primary_conninfo": conninfo, "hot_standby": "on"})
		if err != nil {
			return err
		}
		r.mu.Lock()
		s.pgs = append(s.pgs, standby)
		r.mu.Unlock()
		if _, err := standby.StartDetached(ctx); err != nil {
			return err
		}
		names = append(names, standbyName(i))
	}
	if len(names) == 0 {
		return nil
	}
	return makeSynchronous(ctx, primary, names)
}

// initPG initializes (or, for a base backup, adopts) the data directory
// of server i of the system with the bench's common settings.
func (s *system) initPG(ctx context.Context, r *runner, i int, syncCommit bool, extra map[string]string) (*pgserver.Server, error) {
	settings := map[string]string{"shared_buffers": sharedBuffers}
	for k, v := range extra {
		settings[k] = v
	}
	return pgserver.Init(ctx, pgserver.Config{
		DataDir:           filepath.Join(s.dir, "pg"+strconv.Itoa(i+1)),
		SynchronousCommit: syncCommit,
		Settings:          r.pgSettings(settings),
		BinDir:            r.binDir,
		NoSync:            true,
		Env:               r.pgEnv(),
	})
}

// baseBackup copies the primary into dir as the postgres user and marks it
// a standby (standby.signal). Its primary_conninfo is written by initPG,
// into tashkent.conf.
func baseBackup(ctx context.Context, binDir string, port int, dir string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-U", "postgres", "-D", dir, "-X", "stream", "--no-sync", "-c", "fast")
	cred, err := postgresCred()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup into %s: %w\n%s", dir, err, out)
	}
	signal := filepath.Join(dir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return err
	}
	if cred != nil {
		return os.Chown(signal, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

// postgresCred is the credential to run PostgreSQL tools with: the
// postgres user when the bench runs as root, nil (ourselves) otherwise.
func postgresCred() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// makeSynchronous sets synchronous_standby_names on the primary once the
// standbys stream (setting it before would block every commit of the
// setup), and waits until all of them are reported sync.
func makeSynchronous(ctx context.Context, primary *pgserver.Server, names []string) error {
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	list := fmt.Sprintf("FIRST %d (%s)", len(names), strings.Join(names, ", "))
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+list+"'"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").Scan(&n)
		if err == nil && n == len(names) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d standbys synchronous after %s (err %v)", n, len(names), readyTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startPgpool starts s.replicas standalone PostgreSQL backends
// (synchronous_commit=on) and one pgpool-II in front of them, in native
// replication mode (pgpool sends every write to every backend, and
// load-balances reads) or in snapshot-isolation mode (the same, plus a
// global snapshot ordering; pgpool requires the backends to run at
// REPEATABLE READ by default).
func (s *system) startPgpool(ctx context.Context, r *runner) error {
	if _, err := os.Stat(pgpoolBinary); err != nil {
		return fmt.Errorf("pgpool-II not found at %s (apt-get install pgpool2): %w", pgpoolBinary, err)
	}
	var extra map[string]string
	if s.kind == PgpoolSI {
		extra = map[string]string{"default_transaction_isolation": "repeatable read"}
	}
	s.pgs = make([]*pgserver.Server, s.replicas)
	errs := make([]error, s.replicas)
	var wg sync.WaitGroup
	for i := range s.replicas {
		wg.Go(func() {
			pg, err := s.initPG(ctx, r, i, true, extra)
			if err != nil {
				errs[i] = err
				return
			}
			r.mu.Lock()
			s.pgs[i] = pg
			r.mu.Unlock()
			_, errs[i] = pg.StartDetached(ctx)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	backends := make([]int, s.replicas)
	for i, pg := range s.pgs {
		backends[i] = pg.Port()
		if s.delay > 0 {
			rl, err := startRelay(net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port())), s.delay)
			if err != nil {
				return err
			}
			s.relays = append(s.relays, rl)
			backends[i] = rl.port()
		}
	}
	what := s.label + " pgpool"
	return startWithPorts(ctx, r, what, 2, readyTimeout,
		func(ports []int) (*proc, error) {
			conf, err := s.writePgpoolConf(ports[0], ports[1], backends, r.maxClients)
			if err != nil {
				return nil, err
			}
			p, err := startProc(what, pgpoolBinary, []string{"-n", "-f", conf, "-F", filepath.Join(s.dir, "pcp.conf")},
				filepath.Join(s.dir, "pgpool.log"))
			if p != nil {
				p.stopSignal = syscall.SIGINT
			}
			return p, err
		},
		func(p *proc, ports []int) { s.pgpool, s.pgpoolPort = p, ports[0] },
		func(ctx context.Context, ports []int) error { return selectOne(ctx, dsn(ports[0])) })
}

// writePgpoolConf writes pgpool.conf (and an empty pcp.conf) into the
// system's directory. Every backend may take every client: pgpool forks
// num_init_children processes, each serving one client at a time.
func (s *system) writePgpoolConf(port, pcpPort int, backends []int, clients int) (string, error) {
	mode := "native_replication"
	if s.kind == PgpoolSI {
		mode = "snapshot_isolation"
	}
	kv := [][2]string{
		{"backend_clustering_mode", "'" + mode + "'"},
		{"listen_addresses", "'127.0.0.1'"},
		{"port", strconv.Itoa(port)},
		{"socket_dir", "'" + s.dir + "'"},
		{"pcp_listen_addresses", "'127.0.0.1'"},
		{"pcp_port", strconv.Itoa(pcpPort)},
		{"pcp_socket_dir", "'" + s.dir + "'"},
		{"pid_file_name", "'" + filepath.Join(s.dir, "pgpool.pid") + "'"},
		{"logdir", "'" + s.dir + "'"},
		{"log_destination", "'stderr'"},
		{"num_init_children", strconv.Itoa(clients + 4)},
		{"max_pool", "1"},
		{"enable_pool_hba", "off"},
		{"use_watchdog", "off"},
		{"health_check_period", "0"},
		{"sr_check_period", "0"},
		{"failover_on_backend_error", "off"},
		{"load_balance_mode", "on"},
		{"replicate_select", "off"},
		{"insert_lock", "on"},
		{"memory_cache_enabled", "off"},
		{"replication_stop_on_mismatch", "off"},
	}
	var b strings.Builder
	b.WriteString("# Written by tashkent bench for this run.\n")
	for _, p := range kv {
		fmt.Fprintf(&b, "%s = %s\n", p[0], p[1])
	}
	for i, bp := range backends {
		fmt.Fprintf(&b, "backend_hostname%d = '127.0.0.1'\nbackend_port%d = %d\nbackend_weight%d = 1\nbackend_data_directory%d = '%s'\nbackend_flag%d = 'DISALLOW_TO_FAILOVER'\n",
			i, i, bp, i, i, s.pgs[i].DataDir(), i)
	}
	conf := filepath.Join(s.dir, "pgpool.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "pcp.conf"), nil, 0o644); err != nil {
		return "", err
	}
	return conf, nil
}
