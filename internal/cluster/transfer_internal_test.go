package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// Where the file system exchanges two directories atomically, the copy
// takes the data directory's place in one exchange; where it refuses (with
// any errno: here EPERM), canExchange says so before anything is stopped,
// and the copy is put in place by two renames.
func TestInstallCopyExchangesOrRenames(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		dir := t.TempDir()
		if refuse {
			saved := renameExchange
			renameExchange = func(string, string) error { return syscall.EPERM }
			t.Cleanup(func() { renameExchange = saved })
		}
		if got := canExchange(dir); got == refuse {
			t.Fatalf("canExchange = %v on a file system that refuses the exchange: %v", got, refuse)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("canExchange left %v in %s", ents, dir)
		}
		dataDir, staging := filepath.Join(dir, "pgdata"), filepath.Join(dir, "pgdata"+stagingSuffix)
		for d, marker := range map[string]string{dataDir: "old", staging: "copy"} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, marker), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		old, err := installCopy(staging, dataDir, canExchange(dir))
		if err != nil {
			t.Fatalf("installCopy (exchange refused: %v): %v", refuse, err)
		}
		for d, marker := range map[string]string{dataDir: "copy", old: "old"} {
			if _, err := os.Stat(filepath.Join(d, marker)); err != nil {
				t.Errorf("exchange refused %v: %s does not hold the %s data: %v", refuse, d, marker, err)
			}
		}
	}
}

// A data directory renamed aside by a swap that did not finish is put
// back, and the output says so.
func TestFinishDataDirSwapPutsTheOldDirectoryBack(t *testing.T) {
	dir := t.TempDir()
	r := &Replica{Name: "replica2", Postgres: Postgres{DataDir: filepath.Join(dir, "pgdata")}}
	if err := os.Mkdir(r.Postgres.DataDir+swapSuffix, 0o700); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	u := &upper{o: Options{Progress: &out}}
	if err := u.finishDataDirSwap(r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Postgres.DataDir); err != nil {
		t.Errorf("the data directory is not back: %v", err)
	}
	if !strings.Contains(out.String(), "replica2: a rebuild was interrupted while it swapped the data directories; the old data directory is put back from") {
		t.Errorf("finishDataDirSwap printed %q", out.String())
	}
	out.Reset()
	if err := u.finishDataDirSwap(r); err != nil || out.Len() > 0 {
		t.Errorf("finishDataDirSwap with the data directory in place: %v, printed %q", err, out.String())
	}
}

// The hints of status for an interrupted transfer name the command that
// goes on, with the cluster directory and the replica.
func TestInterruptedTransferHints(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		kind, phase string
		joining     bool
		want        string
	}{
		{"add", "copying", true, "add from replica1 INTERRUPTED while copying (started 2026-01-02T03:04:05Z); run `tashkent replica add --data-dir /c` again to start over"},
		{"add", "starting", true, "add from replica1 INTERRUPTED after the copy, before the replica was recorded (started 2026-01-02T03:04:05Z); run `tashkent replica add --data-dir /c` again to start over"},
		{"add", "catching up", false, "add from replica1 INTERRUPTED after the copy (started 2026-01-02T03:04:05Z); `tashkent up --data-dir /c` starts the replica"},
		{"rebuild", "copying", false, "rebuild from replica1 INTERRUPTED while copying (started 2026-01-02T03:04:05Z); run `tashkent replica rebuild --data-dir /c 3` again to start over"},
	} {
		ts := TransferStatus{Transfer: Transfer{Kind: c.kind, Index: 3, Donor: "replica1", Phase: c.phase, Started: started}}
		if got := ts.line("/c", c.joining); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s %s (joining %v):\n got %s\nwant %s", c.kind, c.phase, c.joining, got, c.want)
		}
	}
}
