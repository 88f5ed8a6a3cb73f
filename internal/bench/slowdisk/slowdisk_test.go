package slowdisk_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/bench/slowdisk"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/wal"
)

const delay = 20 * time.Millisecond

// A synchronous commit of PostgreSQL started with the shim waits for its
// WAL flush, so it takes at least the delay (the slow disk of Tashkent §9);
// an asynchronous one does not flush, so it does not.
func TestPostgresSynchronousCommitTakesTheDelay(t *testing.T) {
	dir := pgtest.PublicTempDir(t, "tashkent-slowdisk-test-")
	shim, err := slowdisk.Build(filepath.Join(dir, "shim"), delay)
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Init(ctx, pgserver.Config{DataDir: filepath.Join(dir, "pg"), SynchronousCommit: true,
		Settings: slowdisk.PostgresSettings(), BinDir: binDir, NoSync: true, Env: shim.Env()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("stop postgres (pid %d): %v", srv.PID(), err)
		}
	})
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	mustExec(t, conn, "CREATE TABLE t (id int PRIMARY KEY, v int)")
	var method string
	if err := conn.QueryRow(ctx, "SHOW wal_sync_method").Scan(&method); err != nil || method != "fdatasync" {
		t.Fatalf("wal_sync_method = %q (%v), want fdatasync pinned", method, err)
	}

	on := commitTimes(t, conn, "on", 5)
	for i, d := range on {
		if d < delay {
			t.Errorf("synchronous commit %d took %s, less than the %s delay: the shim did not slow the WAL flush", i, d, delay)
		}
	}
	off := commitTimes(t, conn, "off", 5)
	if fastest := minDuration(off); fastest >= delay {
		t.Errorf("every asynchronous commit took %s or more (fastest %s): the delay is not only on the flush", delay, fastest)
	}
	t.Logf("synchronous_commit=on: %v; off: %v", on, off)
}

// commitTimes times n autocommit updates at the given synchronous_commit.
func commitTimes(t *testing.T, conn *pgx.Conn, syncCommit string, n int) []time.Duration {
	t.Helper()
	mustExec(t, conn, "SET synchronous_commit = "+syncCommit)
	out := make([]time.Duration, n)
	for i := range out {
		start := time.Now()
		mustExec(t, conn, "INSERT INTO t VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET v = excluded.v", i)
		out[i] = time.Since(start)
	}
	return out
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func minDuration(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = min(m, d)
	}
	return m
}

// The certifier's log (wal.Options.SyncDelay, set by `tashkent certifier
// --unsafe-fault-fsync-delay`) sleeps after each real sync: an append
// returns no sooner than the delay, and the sync still happened.
func TestWalAppendTakesTheSyncDelay(t *testing.T) {
	log, err := wal.Open(wal.Options{Dir: t.TempDir(), SegmentBytes: 1 << 20, SyncDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	for v := uint64(1); v <= 3; v++ {
		before := log.Fsyncs()
		start := time.Now()
		if err := log.Append([]wal.Entry{{Version: v, Payload: []byte("writeset")}}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < delay {
			t.Errorf("append of version %d took %s, less than the %s sync delay", v, took, delay)
		}
		if log.Fsyncs() == before {
			t.Errorf("append of version %d did not sync", v)
		}
	}
}

// Build explains what is missing rather than failing obscurely.
func TestBuildRejectsNoDelay(t *testing.T) {
	if _, err := slowdisk.Build(t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Fatalf("Build with no delay: %v", err)
	}
}
