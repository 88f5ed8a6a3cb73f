package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/process"
)

// Config describes one PostgreSQL instance.
type Config struct {
	// DataDir is the cluster directory (initdb target), created if missing.
	// Its parent directories must be traversable by the postgres user when
	// running as root.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one (and Start
	// picks another one if it is taken by the time the server binds it).
	Port int
	// SynchronousCommit sets synchronous_commit on or off.
	SynchronousCommit bool
	// Settings are extra postgresql.conf settings; they override the
	// defaults tashkent writes.
	Settings map[string]string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger

	// BinDir holds initdb and postgres; empty means FindBinDir.
	BinDir string
	// NoSync runs initdb --no-sync. Only for throwaway instances (tests):
	// a freshly initialized cluster is not durable until the OS writes it
	// back. A kill -9 of PostgreSQL does not lose it; a machine crash can.
	NoSync bool
	// Env is extra environment (NAME=value) for the postmaster and so for
	// every backend, not for initdb: e.g. the bench's LD_PRELOAD slow-disk
	// shim (internal/bench/slowdisk).
	Env []string
}

// Server is one local PostgreSQL instance. Its methods are safe for
// concurrent use.
type Server struct {
	cfg      Config
	binDir   string
	dataDir  string
	log      *slog.Logger
	cred     *syscall.Credential // nil when not root
	autoPort bool

	mu        sync.Mutex
	port      int
	cmd       *exec.Cmd
	pid       int
	done      chan struct{} // closed when the process we started has been reaped
	waitErr   error
	logOffset int64
	detached  bool
}

// ConfFile is the configuration file tashkent owns inside the data
// directory; postgresql.conf includes it.
const ConfFile = "tashkent.conf"

// LogFile is the file, inside the data directory, that receives the
// server's stderr.
const LogFile = "postgres.log"

const includeLine = "include_if_exists = '" + ConfFile + "'\t# added by tashkent"

// Init prepares cfg.DataDir: it runs initdb when the directory holds no
// cluster yet, and (re)writes tashkent.conf. It does not start the server.
// Init is idempotent: an existing cluster is reused and only tashkent.conf
// is rewritten.
func Init(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pgserver: Config.DataDir is empty")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("pgserver: invalid port %d", cfg.Port)
	}
	binDir := cfg.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, binDir: binDir, dataDir: dataDir, log: lg.With("datadir", dataDir)}
	if os.Geteuid() == 0 {
		if s.cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}

	if _, err := s.conf(); err != nil { // validate before initdb
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := s.initdb(ctx); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	} else {
		v, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
		if err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		if got := strings.TrimSpace(string(v)); got != MajorVersion {
			return nil, fmt.Errorf("pgserver: %s holds a PostgreSQL %s cluster; tashkent needs %s", dataDir, got, MajorVersion)
		}
		s.log.Debug("reusing existing cluster")
	}
	if s.cred != nil {
		if err := checkTraversable(dataDir, s.cred); err != nil {
			return nil, err
		}
	}

	s.port = cfg.Port
	if s.port == 0 {
		s.autoPort = true
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := s.ensureInclude(); err != nil {
		return nil, err
	}
	if err := s.writeConf(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) initdb(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.dataDir), 0o755); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := os.Mkdir(s.dataDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := os.Chmod(s.dataDir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(s.dataDir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgserver: chown %s to postgres: %w", s.dataDir, err)
		}
		if err := checkTraversable(s.dataDir, s.cred); err != nil {
			return err
		}
	}
	args := []string{"-D", s.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"}
	if s.cfg.NoSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"), args...)
	cmd.Dir = s.dataDir
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: initdb %s: %w\n%s", s.dataDir, err, process.OutputTail(string(out), 4000))
	}
	s.log.Info("initdb done", "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// ensureInclude makes postgresql.conf include tashkent.conf (once).
func (s *Server) ensureInclude() error {
	p := filepath.Join(s.dataDir, "postgresql.conf")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "include_if_exists = '"+ConfFile+"'") {
			return nil
		}
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	prefix := ""
	if len(b) > 0 && b[len(b)-1] != '\n' {
		prefix = "\n"
	}
	_, err = f.WriteString(prefix + "\n" + includeLine + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// SocketPath is the server's Unix socket, or "" when its data directory's
// path is too long for one (it then listens on TCP only).
func (s *Server) SocketPath() string {
	if len(s.dataDir)+len("/.s.PGSQL.65535") > 107 {
		return ""
	}
	return fmt.Sprintf("%s/.s.PGSQL.%d", s.dataDir, s.Port())
}

// walWriterFlushAfter is wal_writer_flush_after by synchronous_commit.
// With synchronous_commit off, the WAL writer is what writes and flushes
// the commits, and each committing backend wakes it once a full WAL page
// lies past the flushed position (XLogSetAsyncXactLSN). With PostgreSQL's
// default, 1 MB, the writer writes a page or two per wake and flushes
// only once a megabyte has piled up, so the flushed position lags and it
// is woken at nearly every other commit: 14 µs of CPU per TPC-B commit
// on the project's machine. With 0 it flushes what it writes, is woken
// once per new page, and took 10.5 µs. With synchronous_commit on,
// commits flush themselves: PostgreSQL's default stays.
var walWriterFlushAfter = map[bool]string{true: "1MB", false: "0"}

// conf renders tashkent.conf.
func (s *Server) conf() (string, error) {
	onoff := map[bool]string{true: "on", false: "off"}
	socketDir := s.dataDir
	if len(socketDir)+len("/.s.PGSQL.65535") > 107 {
		socketDir = "" // too long for a Unix socket path: TCP only
	}
	kv := [][2]string{
		{"listen_addresses", "127.0.0.1"},
		{"port", strconv.Itoa(s.port)},
		{"unix_socket_directories", socketDir},
		{"max_connections", "200"},
		{"shared_buffers", "64MB"},
		{"fsync", "on"},
		{"synchronous_commit", onoff[s.cfg.SynchronousCommit]},
		{"wal_writer_flush_after", walWriterFlushAfter[s.cfg.SynchronousCommit]},
		{"wal_level", "replica"},
		{"max_prepared_transactions", "0"},
		{"logging_collector", "off"},
		{"log_destination", "stderr"},
	}
	keys := make([]string, 0, len(s.cfg.Settings))
	for k := range s.cfg.Settings {
		if !settingName.MatchString(k) {
			return "", fmt.Errorf("pgserver: invalid setting name %q", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kv = append(kv, [2]string{k, s.cfg.Settings[k]})
	}
	var b strings.Builder
	b.WriteString("# Written by tashkent (internal/pgserver) at every Init: do not edit.\n")
	b.WriteString("# Later lines win; extra settings come from the replica's configuration.\n")
	for _, p := range kv {
		fmt.Fprintf(&b, "%s = '%s'\n", p[0], strings.ReplaceAll(p[1], "'", "''"))
	}
	return b.String(), nil
}

func (s *Server) writeConf() error {
	text, err := s.conf()
	if err != nil {
		return err
	}
	p := filepath.Join(s.dataDir, ConfFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := s.chown(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

func (s *Server) chown(p string) error {
	if s.cred == nil {
		return nil
	}
	if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
		return fmt.Errorf("pgserver: chown %s: %w", p, err)
	}
	return nil
}

// Start starts `postgres -D DataDir` as a child process and waits until it
// accepts connections (until ctx is done, or 60 seconds when ctx has no
// deadline). On failure the error carries the tail of the server log.
func (s *Server) Start(ctx context.Context) error {
	return s.start(ctx, false)
}

// StartDetached starts the server in a new session (setsid) with its output
// in the log file, so that it outlives this process, waits until it accepts
// connections, and returns its PID. Record the PID and stop the server later
// with StopPID (or with Stop while this process still runs).
func (s *Server) StartDetached(ctx context.Context) (int, error) {
	if err := s.start(ctx, true); err != nil {
		return 0, err
	}
	return s.PID(), nil
}

var errPortInUse = errors.New("port in use")

func (s *Server) start(ctx context.Context, detached bool) error {
	s.mu.Lock()
	if s.done != nil {
		select {
		case <-s.done:
		default:
			pid := s.pid
			s.mu.Unlock()
			return fmt.Errorf("pgserver: %s already running (pid %d)", s.dataDir, pid)
		}
	}
	s.mu.Unlock()
	if pid, ok := Running(s.dataDir); ok {
		return fmt.Errorf("pgserver: another postmaster (pid %d) already serves %s", pid, s.dataDir)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		if err := s.spawn(detached); err != nil {
			return err
		}
		err := s.waitReady(ctx)
		if err == nil {
			s.log.Info("postgres started", "pid", s.PID(), "port", s.Port(), "detached", detached)
			return nil
		}
		if errors.Is(err, errPortInUse) && s.autoPort && attempt < 5 {
			port, perr := freePort()
			if perr != nil {
				return perr
			}
			s.log.Info("port taken, retrying", "port", s.Port(), "new_port", port)
			s.mu.Lock()
			s.port = port
			s.mu.Unlock()
			if err := s.writeConf(); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

func (s *Server) spawn(detached bool) error {
	logPath := s.LogPath()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgserver: open log: %w", err)
	}
	defer logf.Close() // the child holds its own copy
	if err := s.chown(logPath); err != nil {
		return err
	}
	off, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), "-D", s.dataDir)
	cmd.Dir = s.dataDir
	cmd.Env = append(childEnv(), s.cfg.Env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setsid: detached}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: start postgres: %w", err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.pid, s.done, s.waitErr, s.logOffset, s.detached = cmd, cmd.Process.Pid, done, nil, off, detached
	s.mu.Unlock()
	go func() {
		// Reaps the child; for a detached server it only matters while this
		// process lives (afterwards init reaps it).
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(done)
	}()
	return nil
}

// waitReady polls until the server we started accepts connections.
func (s *Server) waitReady(ctx context.Context) error {
	s.mu.Lock()
	pid, done := s.pid, s.done
	s.mu.Unlock()
	for {
		select {
		case <-done:
			s.mu.Lock()
			werr := s.waitErr
			s.mu.Unlock()
			logTail := s.logTail(4000)
			err := fmt.Errorf("pgserver: postgres (pid %d) exited during startup: %v\n--- %s (tail) ---\n%s",
				pid, werr, s.LogPath(), logTail)
			if strings.Contains(logTail, "could not bind") || strings.Contains(logTail, "could not create any TCP/IP sockets") {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return err
		default:
		}
		if ok := s.ping(ctx); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			kids := killTree(pid)
			<-done
			waitAll(kids)
			return fmt.Errorf("pgserver: postgres (pid %d) not accepting connections: %w (killed it)\n--- %s (tail) ---\n%s",
				pid, ctx.Err(), s.LogPath(), s.logTail(4000))
		case <-done:
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// ping connects and checks that the server answering is ours (another
// instance could hold the port while ours is failing to bind it).
func (s *Server) ping(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := pgconn.Connect(cctx, s.DSN("postgres"))
	if err != nil {
		return false
	}
	defer c.Close(context.Background())
	res := c.ExecParams(cctx, "select current_setting('data_directory')", nil, nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 {
		return false
	}
	return filepath.Clean(string(res.Rows[0][0])) == s.dataDir
}

// Stop shuts the server down (fast shutdown: SIGINT) and waits for it to
// exit. When ctx is done first (or after 60 seconds when it has no
// deadline) it kills the server and its children. Stop on a server that is
// not running returns nil.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	pid, done := s.pid, s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgserver: signal %d: %w", pid, err)
	}
	timeout := 60 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		s.log.Info("postgres stopped", "pid", pid)
		return nil
	case <-t.C:
	}
	s.log.Warn("postgres did not stop in time; killing it", "pid", pid)
	kids := killTree(pid)
	<-done
	waitAll(kids)
	return fmt.Errorf("pgserver: postgres (pid %d) did not shut down within %v; killed it", pid, timeout)
}

// Kill9 kills the postmaster and all its children with SIGKILL, as a crash
// would, and waits until they are gone. The data directory is left as the
// crash left it; Start runs crash recovery.
func (s *Server) Kill9() error {
	s.mu.Lock()
	pid, done := s.pid, s.done
	s.mu.Unlock()
	if done == nil {
		return errors.New("pgserver: Kill9: server was never started")
	}
	select {
	case <-done:
		return fmt.Errorf("pgserver: Kill9: postgres (pid %d) is not running", pid)
	default:
	}
	kids := killTree(pid)
	<-done
	if !waitAll(kids) {
		return fmt.Errorf("pgserver: Kill9: children of %d still alive", pid)
	}
	s.log.Info("postgres killed", "pid", pid)
	return nil
}

func waitAll(pids []int) bool {
	ok := true
	for _, p := range pids {
		if !process.WaitGone(context.Background(), p, 10*time.Second) {
			ok = false
		}
	}
	return ok
}

// PID returns the postmaster's PID (0 before the first Start).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Running reports whether the process this Server started is still alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Done is closed when the process this Server started has exited (nil
// before the first Start).
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Port returns the TCP port the server listens on.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// DataDir returns the absolute data directory.
func (s *Server) DataDir() string { return s.dataDir }

// BinDir returns the directory of the PostgreSQL binaries in use.
func (s *Server) BinDir() string { return s.binDir }

// LogPath returns the file that receives the server's output.
func (s *Server) LogPath() string { return filepath.Join(s.dataDir, LogFile) }

// DSN returns a connection URL for database db as the postgres superuser.
func (s *Server) DSN(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port())),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// LogTail returns up to n bytes of the end of the server log.
func (s *Server) LogTail(n int) string { return process.LogTail(s.LogPath(), 0, n) }

// logTail returns the end of what the current run wrote to the log.
func (s *Server) logTail(n int) string {
	s.mu.Lock()
	off := s.logOffset
	s.mu.Unlock()
	return process.LogTail(s.LogPath(), off, n)
}

func childEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	return []string{"PATH=" + path, "LC_ALL=C", "LANG=C"}
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root needs a `postgres` user to run PostgreSQL as (initdb refuses root): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgserver: bad uid/gid for postgres: %s/%s", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// checkTraversable checks that the postgres user can reach dir: every
// ancestor must grant it search (x) permission.
func checkTraversable(dir string, cred *syscall.Credential) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if ok {
			m := st.Mode().Perm()
			var can bool
			switch {
			case sys.Uid == cred.Uid:
				can = m&0o100 != 0
			case sys.Gid == cred.Gid:
				can = m&0o010 != 0
			default:
				can = m&0o001 != 0
			}
			if !can {
				return fmt.Errorf("pgserver: the postgres user cannot traverse %s (mode %v), so it cannot reach %s; "+
					"use a data directory under a world-traversable path such as /tmp or /var/lib/tashkent", d, m, dir)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	port, err := netutil.FreePort()
	if err != nil {
		return 0, fmt.Errorf("pgserver: pick a free port: %w", err)
	}
	return port, nil
}
