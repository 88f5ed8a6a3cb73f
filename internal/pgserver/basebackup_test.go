package pgserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A copy taken with BaseBackup from a running server starts as a server of
// its own that holds the rows committed before the copy, without the
// copied server's log and socket locks; progress is reported in bytes.
func TestBaseBackupCopiesARunningServer(t *testing.T) {
	ctx := ctxT(t)
	dir := testDir(t)
	src := initServer(t, Config{DataDir: filepath.Join(dir, "src")})
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c := connect(t, src)
	if _, err := c.Exec(ctx, `CREATE TABLE t AS SELECT g AS k, repeat('x', 100) AS pad FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		reports [][2]int64
		pid     int
	)
	copyDir := filepath.Join(dir, "copy")
	err := BaseBackup{
		Host: "127.0.0.1", Port: src.Port(), User: "postgres", DataDir: copyDir, Label: "test copy",
		Started: func(p int) { pid = p },
		Progress: func(done, total int64) {
			mu.Lock()
			reports = append(reports, [2]int64{done, total})
			mu.Unlock()
		},
	}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pid == 0 {
		t.Error("Started was not called with pg_basebackup's PID")
	}
	if len(reports) == 0 {
		t.Fatal("no progress reported")
	}
	last := reports[len(reports)-1]
	if last[0] < 5<<20 || last[0] > last[1] {
		t.Errorf("last progress report %d of %d bytes: want at least the table's 5 MiB, at most the total", last[0], last[1])
	}
	for _, name := range []string{LogFile, ".s.PGSQL." + itoa(src.Port()) + ".lock"} {
		if _, err := os.Stat(filepath.Join(copyDir, name)); !os.IsNotExist(err) {
			t.Errorf("the copy holds the copied server's %s (%v)", name, err)
		}
	}

	cp := initServer(t, Config{DataDir: copyDir})
	if err := cp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := connect(t, cp).QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 50000 {
		t.Fatalf("the copy holds %d rows (%v), want 50000", n, err)
	}
}

// A copy into a directory that holds files is refused before anything runs.
func TestBaseBackupRefusesADirectoryInUse(t *testing.T) {
	dir := testDir(t)
	if err := os.WriteFile(filepath.Join(dir, "something"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := BaseBackup{Host: "127.0.0.1", Port: 1, User: "postgres", DataDir: dir}.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("BaseBackup into a directory that holds a file: %v, want refused as not empty", err)
	}
}

// A copy whose context ends while it copies returns at once, and leaves no
// pg_basebackup process behind: neither the one started nor the child it
// forks to stream the WAL.
func TestBaseBackupCanceledLeavesNoCopier(t *testing.T) {
	ctx := ctxT(t)
	dir := testDir(t)
	src := initServer(t, Config{DataDir: filepath.Join(dir, "src")})
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, src).Exec(ctx, `CREATE TABLE t AS SELECT g AS k, repeat('x', 100) AS pad FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(dir, "copy")
	t.Cleanup(func() { killCopiers(copyDir) }) // should the test fail

	copyCtx, cancel := context.WithCancel(ctx)
	copying := make(chan struct{})
	var once sync.Once
	returned := make(chan error, 1)
	go func() {
		returned <- BaseBackup{
			Host: "127.0.0.1", Port: src.Port(), User: "postgres", DataDir: copyDir, MaxRate: "1M",
			Progress: func(done, _ int64) {
				if done >= 1<<20 {
					once.Do(func() { close(copying) })
				}
			},
		}.Run(copyCtx)
	}()
	select {
	case <-copying:
	case err := <-returned:
		t.Fatalf("the copy ended before it was canceled: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the copy reported no progress within a minute")
	}
	if n := len(Copiers(copyDir)); n < 2 {
		t.Errorf("%d pg_basebackup processes copy into %s, want the main one and its WAL streamer", n, copyDir)
	}
	canceled := time.Now()
	cancel()
	select {
	case err := <-returned:
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Errorf("a canceled copy returned %v, want interrupted", err)
		}
		if took := time.Since(canceled); took > 5*time.Second {
			t.Errorf("a canceled copy took %s to return", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a canceled copy has not returned after 20 s")
	}
	if pids := Copiers(copyDir); len(pids) > 0 {
		t.Errorf("pg_basebackup processes %v still copy into %s after the copy returned", pids, copyDir)
	}
}

// killCopiers kills what copies into dir, by PID.
func killCopiers(dir string) {
	for _, pid := range Copiers(dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
