package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/process"
)

// The WAL streamer that pg_basebackup forks outlives the main process
// when that is killed (as it is, by the parent death signal, when the
// tashkent process running a transfer is killed), and goes on writing into
// the staging directory. clearStaging, which runs before the next copy
// into that directory, ends it.
func TestClearStagingEndsAnOrphanedWALStreamer(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	if _, err := pgtest.Connect(t, srv, "postgres").Exec(ctx,
		`CREATE TABLE t AS SELECT g AS k, repeat('x', 100) AS pad FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(t.TempDir(), "pgdata"+stagingSuffix)
	cmd := exec.Command(filepath.Join(binDir, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port()),
		"-U", "postgres", "-D", staging, "-X", "stream", "-c", "fast", "--max-rate", "1M", "--no-password")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	deadline := time.Now().Add(30 * time.Second)
	for len(pgserver.Copiers(staging)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("pg_basebackup has not forked its WAL streamer after 30 s: copiers %v", pgserver.Copiers(staging))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	time.Sleep(time.Second)
	streamers := pgserver.Copiers(staging)
	if len(streamers) == 0 {
		t.Fatal("no WAL streamer outlived pg_basebackup's main process: nothing for clearStaging to end")
	}

	if err := clearStaging(staging); err != nil {
		t.Fatal(err)
	}
	for _, pid := range streamers {
		if process.Alive(pid) {
			t.Errorf("the WAL streamer (pid %d) still runs after clearStaging", pid)
		}
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("clearStaging left %s: %v", staging, err)
	}
}
