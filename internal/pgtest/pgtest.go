package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgext"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
)

type options struct {
	syncCommit bool
	settings   map[string]string
	tashkent   bool
}

// Option configures Start.
type Option func(*options)

// SynchronousCommitOff runs the instance with synchronous_commit=off, as
// the `mw` durability placement does.
func SynchronousCommitOff() Option {
	return func(o *options) { o.syncCommit = false }
}

// WithSettings adds postgresql.conf settings (later calls win per key).
func WithSettings(settings map[string]string) Option {
	return func(o *options) {
		for k, v := range settings {
			o.settings[k] = v
		}
	}
}

// WithTashkent runs the instance from an installation that has the
// tashkent extension (internal/pgext) and loads it at start
// (shared_preload_libraries). The database still needs CREATE EXTENSION
// tashkent, which the agent runs.
func WithTashkent() Option {
	return func(o *options) {
		o.tashkent = true
		o.settings["shared_preload_libraries"] = pgext.Library
	}
}

const dirPrefix = "tashkent-pgtest-"
const ownerFile = "owner"

var sweepOnce sync.Once

// Start initializes and starts a fresh PostgreSQL instance for the test and
// registers a cleanup that stops it (by its PID) and removes its directory.
// The instance listens on 127.0.0.1 on a free port; connect as the
// postgres superuser with srv.DSN("postgres").
func Start(t testing.TB, opts ...Option) *pgserver.Server {
	t.Helper()
	o := options{syncCommit: true, settings: map[string]string{}}
	for _, opt := range opts {
		opt(&o)
	}
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatalf("pgtest: %v.\nThe tests need a real PostgreSQL %s server; they do not skip without one.",
			err, pgserver.MajorVersion)
	}
	if o.tashkent {
		if binDir, err = pgext.Prepare(context.Background()); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	base := baseDir()
	sweepOnce.Do(func() { sweep(base) })

	dir, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	removeDir := func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("pgtest: remove %s: %v", dir, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		removeDir()
		t.Fatalf("pgtest: %v", err)
	}
	if err := writeOwner(dir); err != nil {
		removeDir()
		t.Fatalf("pgtest: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Init(ctx, pgserver.Config{
		DataDir:           filepath.Join(dir, "data"),
		SynchronousCommit: o.syncCommit,
		Settings:          o.settings,
		BinDir:            binDir,
		NoSync:            true,
	})
	if err != nil {
		removeDir()
		t.Fatalf("pgtest: %v", err)
	}
	if err := srv.Start(ctx); err != nil {
		removeDir()
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if t.Failed() {
			t.Logf("pgtest: tail of %s (pid %d, port %d):\n%s", srv.LogPath(), srv.PID(), srv.Port(), srv.LogTail(3000))
		}
		if err := srv.Stop(sctx); err != nil {
			t.Errorf("pgtest: stop: %v", err)
		}
		removeDir()
	})
	return srv
}

// Connect opens a connection to database db of srv, closed when the test
// ends.
func Connect(t testing.TB, srv *pgserver.Server, db string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", srv.DSN(db), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func baseDir() string {
	if d := os.Getenv("TASHKENT_PGTEST_DIR"); d != "" {
		return d
	}
	return os.TempDir()
}

// writeOwner records this process (PID and start time) as the owner of dir.
func writeOwner(dir string) error {
	st := "?"
	if self, ok := process.ReadStat(os.Getpid()); ok && self.StartTime != "" {
		st = self.StartTime
	}
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(fmt.Sprintf("%d %s\n", os.Getpid(), st)), 0o644)
}

// ownerAlive reports whether the test process that created dir still runs.
// Directories without a readable owner file are treated as alive unless
// they are more than a day old.
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		st, serr := os.Stat(dir)
		return serr == nil && time.Since(st.ModTime()) < 24*time.Hour
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false
	}
	st, ok := process.ReadStat(pid)
	return !ok || f[1] == "?" || st.StartTime == f[1]
}

// sweep stops and removes instances left behind by test processes that died
// before their cleanups ran.
func sweep(base string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if ownerAlive(dir) {
			continue
		}
		data := filepath.Join(dir, "data")
		if info, err := pgserver.ReadPostmasterPID(data); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			// StopPID checks that the PID is a postgres for this directory.
			_ = pgserver.StopPID(ctx, data, info.PID)
			cancel()
		}
		if _, ok := pgserver.Running(data); !ok {
			_ = os.RemoveAll(dir)
		}
	}
}

// PublicTempDir is a new temporary directory, removed after the test, that
// the postgres user can traverse (t.TempDir's parent is private), for the
// data directories of servers a test starts itself.
func PublicTempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
