package pgserver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/process"
)

// testDir returns a directory the postgres user can reach (t.TempDir is
// 0700 under a root-owned parent), removed at the end of the test.
func testDir(t *testing.T) string {
	t.Helper()
	if _, err := FindBinDir(); err != nil {
		t.Fatalf("%v", err)
	}
	dir, err := os.MkdirTemp("", "tashkent-pgserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// initServer runs Init and registers a cleanup that stops the server.
func initServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.NoSync = true
	s, err := Init(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

func connect(t *testing.T, s *Server) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func show(t *testing.T, c *pgx.Conn, name string) string {
	t.Helper()
	var v string
	if err := c.QueryRow(ctxT(t), "select current_setting($1)", name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLifecycle(t *testing.T) {
	ctx := ctxT(t)
	dir := filepath.Join(testDir(t), "data")
	s := initServer(t, Config{DataDir: dir, SynchronousCommit: false, Settings: map[string]string{"work_mem": "8MB", "application_name": "it's quoted"}})
	if s.PID() != 0 || s.Running() {
		t.Fatalf("not started yet, but PID=%d Running=%v", s.PID(), s.Running())
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.Running() || s.PID() <= 0 {
		t.Fatalf("Running=%v PID=%d after Start", s.Running(), s.PID())
	}
	if err := IsPostgres(s.PID(), dir); err != nil {
		t.Fatal(err)
	}
	if info, err := ReadPostmasterPID(dir); err != nil || info.PID != s.PID() || info.Port != s.Port() || info.DataDir != dir {
		t.Fatalf("postmaster.pid = %+v, %v; want pid %d port %d", info, err, s.PID(), s.Port())
	}
	c := connect(t, s)
	for name, want := range map[string]string{
		"synchronous_commit":        "off",
		"wal_writer_flush_after":    "0",
		"fsync":                     "on",
		"listen_addresses":          "127.0.0.1",
		"shared_buffers":            "64MB",
		"max_connections":           "200",
		"wal_level":                 "replica",
		"max_prepared_transactions": "0",
		"work_mem":                  "8MB",
		"application_name":          "it's quoted",
		"server_version_num":        "15",
		"unix_socket_directories":   dir,
	} {
		got := show(t, c, name)
		if name == "server_version_num" {
			got = got[:2]
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if _, err := c.Exec(ctx, "create table t (id int primary key); insert into t values (1)"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	if err := s.Start(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Start: %v, want 'already running'", err)
	}

	pid := s.PID()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Running() || process.Alive(pid) {
		t.Fatalf("postgres %d still alive after Stop", pid)
	}
	if _, ok := Running(dir); ok {
		t.Fatal("Running(dir) true after Stop")
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop of a stopped server: %v", err)
	}

	// Init again on the same directory: reuses the cluster and its data,
	// rewrites tashkent.conf (new setting), keeps one include line.
	s2 := initServer(t, Config{DataDir: dir, SynchronousCommit: true})
	if err := s2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := connect(t, s2)
	var n int
	if err := c2.QueryRow(ctx, "select count(*) from t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("data after restart: n=%d err=%v", n, err)
	}
	if got := show(t, c2, "synchronous_commit"); got != "on" {
		t.Errorf("synchronous_commit after re-Init = %q, want on", got)
	}
	if got := show(t, c2, "wal_writer_flush_after"); got != "1MB" {
		t.Errorf("wal_writer_flush_after with synchronous_commit on = %q, want PostgreSQL's 1MB", got)
	}
	conf, err := os.ReadFile(filepath.Join(dir, "postgresql.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if k := strings.Count(string(conf), "include_if_exists = '"+ConfFile+"'"); k != 1 {
		t.Errorf("postgresql.conf includes tashkent.conf %d times, want 1", k)
	}
	if _, err := os.Stat(s2.LogPath()); err != nil {
		t.Errorf("log file: %v", err)
	}
}

func TestKill9KillsTreeAndRecovers(t *testing.T) {
	ctx := ctxT(t)
	s := initServer(t, Config{DataDir: filepath.Join(testDir(t), "data"), SynchronousCommit: true})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c := connect(t, s)
	if _, err := c.Exec(ctx, "create table t (id int primary key); insert into t select generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	kids := process.Children(pid)
	if len(kids) < 3 { // checkpointer, bgwriter, walwriter, ..., our backend
		t.Fatalf("postmaster %d has %d children, expected the usual auxiliary processes", pid, len(kids))
	}
	if err := s.Kill9(); err != nil {
		t.Fatal(err)
	}
	if process.Alive(pid) {
		t.Fatalf("postmaster %d alive after Kill9", pid)
	}
	for _, k := range kids {
		if process.Alive(k) {
			t.Errorf("child %d of postmaster %d alive after Kill9", k, pid)
		}
	}
	if err := s.Kill9(); err == nil {
		t.Error("Kill9 of a dead server succeeded")
	}
	// Restart on the same directory: crash recovery, committed rows present.
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := connect(t, s)
	var n int
	if err := c2.QueryRow(ctx, "select count(*) from t").Scan(&n); err != nil || n != 100 {
		t.Fatalf("after crash recovery: n=%d err=%v", n, err)
	}
	if !strings.Contains(s.LogTail(20000), "not properly shut down") {
		t.Errorf("log does not show crash recovery:\n%s", s.LogTail(2000))
	}
}

func TestStartDetachedAndStopPID(t *testing.T) {
	ctx := ctxT(t)
	dir := filepath.Join(testDir(t), "data")
	s := initServer(t, Config{DataDir: dir})
	pid, err := s.StartDetached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid != s.PID() {
		t.Fatalf("StartDetached returned %d, PID() = %d", pid, s.PID())
	}
	// A new session: the postmaster leads it.
	if sid, err := getsid(pid); err != nil || sid != pid {
		t.Fatalf("getsid(%d) = %d, %v; want its own session", pid, sid, err)
	}
	if got, ok := Running(dir); !ok || got != pid {
		t.Fatalf("Running(dir) = %d, %v; want %d", got, ok, pid)
	}
	// StopPID refuses a PID that is not that postgres.
	if err := StopPID(ctx, dir, os.Getpid()); err == nil {
		t.Fatal("StopPID accepted the test process's PID")
	}
	if err := StopPID(ctx, filepath.Join(testDir(t), "other"), pid); err == nil {
		t.Fatal("StopPID accepted a postgres for another data directory")
	}
	if !process.Alive(pid) {
		t.Fatal("refused StopPID still stopped the server")
	}
	if err := StopPID(ctx, dir, pid); err != nil {
		t.Fatal(err)
	}
	if process.Alive(pid) {
		t.Fatal("alive after StopPID")
	}
	if _, ok := Running(dir); ok {
		t.Fatal("Running(dir) after StopPID")
	}
	if err := StopPID(ctx, dir, pid); err != nil {
		t.Fatalf("StopPID of a stopped server: %v", err)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	s := initServer(t, Config{DataDir: filepath.Join(testDir(t), "data"), Settings: map[string]string{"shared_buffers": "bogus"}})
	err := s.Start(ctxT(t))
	if err == nil {
		t.Fatal("Start with an invalid setting succeeded")
	}
	if !strings.Contains(err.Error(), "shared_buffers") || !strings.Contains(err.Error(), "exited during startup") {
		t.Fatalf("error does not carry the log tail: %v", err)
	}
}

func TestInvalidSettingName(t *testing.T) {
	_, err := Init(ctxT(t), Config{DataDir: filepath.Join(testDir(t), "data"), NoSync: true,
		Settings: map[string]string{"x = 1\nfsync": "off"}})
	if err == nil || !strings.Contains(err.Error(), "invalid setting name") {
		t.Fatalf("Init with a malicious setting name: %v", err)
	}
}

func TestPortTakenRetries(t *testing.T) {
	s := initServer(t, Config{DataDir: filepath.Join(testDir(t), "data")})
	taken := s.Port()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", itoa(taken)))
	if err != nil {
		t.Fatalf("occupy port %d: %v", taken, err)
	}
	defer l.Close()
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if s.Port() == taken {
		t.Fatalf("server claims port %d, which the test holds", taken)
	}
	c := connect(t, s)
	if got := show(t, c, "port"); got != itoa(s.Port()) {
		t.Fatalf("port = %s, want %d", got, s.Port())
	}
}

func TestFixedPortTakenFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s := initServer(t, Config{DataDir: filepath.Join(testDir(t), "data"), Port: port})
	if err := s.Start(ctxT(t)); err == nil {
		t.Fatal("Start on a taken fixed port succeeded")
	} else if !strings.Contains(err.Error(), "could not") {
		t.Fatalf("error lacks the server's bind message: %v", err)
	}
}

func TestMissingBinaries(t *testing.T) {
	t.Setenv("TASHKENT_PG_BIN", t.TempDir())
	_, err := FindBinDir()
	if err == nil || !strings.Contains(err.Error(), "apt-get install postgresql-15") {
		t.Fatalf("FindBinDir with an empty TASHKENT_PG_BIN: %v", err)
	}
}
