package cluster_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// An add stopped with SIGTERM while it copies exits at once, leaves no
// pg_basebackup process (pg_basebackup forks a WAL streamer) and frees
// the cluster's lock. An add killed with SIGKILL leaves its WAL streamer
// behind (the parent death signal reaches only the main process); the
// next add ends it before it copies into the same directory, and
// completes. Clients write throughout.
func TestAnAddStoppedBySignalLeavesNoCopier(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2)
	setupTable(t, st)
	loadBulk(t, st)
	w := &groupWorkload{acked: map[int]bool{}}
	stop := startWorkload(t, st, w)
	defer stop()
	staging := filepath.Join(dir, "replica3", "pgdata.transfer")
	t.Cleanup(func() {
		for _, pid := range pgserver.Copiers(staging) {
			t.Errorf("cleanup: pg_basebackup (pid %d) still copies into %s; killing it", pid, staging)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	copying := func(j cluster.TransferStatus) bool { return j.Running && j.Phase == "copying" && j.BytesDone >= 2<<20 }

	add, out := startAdd(t, bin, dir, "--donor", "1", "--max-rate", "2M")
	awaitJoining(t, bin, dir, copying)
	if n := len(pgserver.Copiers(staging)); n < 2 {
		t.Errorf("%d pg_basebackup processes copy into %s, want the main one and its WAL streamer", n, staging)
	}
	stopped := time.Now()
	syscall.Kill(add.Process.Pid, syscall.SIGTERM)
	if exited, err := waitExit(add, 20*time.Second); !exited {
		t.Fatalf("replica add has not exited 20 s after SIGTERM:\n%s", out.String())
	} else if err == nil {
		t.Errorf("replica add stopped by SIGTERM exited 0:\n%s", out.String())
	} else if took := time.Since(stopped); took > 10*time.Second {
		t.Errorf("replica add took %s to exit after SIGTERM", took)
	}
	t.Logf("replica add stopped by SIGTERM:\n%s", out.String())
	if !strings.Contains(out.String(), "interrupted") {
		t.Errorf("replica add stopped by SIGTERM does not say it was interrupted")
	}
	if pids := pgserver.Copiers(staging); len(pids) > 0 {
		t.Errorf("pg_basebackup processes %v outlived the add stopped by SIGTERM", pids)
	}
	checkUnlocked(t, dir)
	checkNotServed(t, dir)

	add, _ = startAdd(t, bin, dir, "--donor", "1", "--max-rate", "2M")
	awaitJoining(t, bin, dir, copying)
	syscall.Kill(add.Process.Pid, syscall.SIGKILL)
	add.Wait()
	left := pgserver.Copiers(staging)
	if len(left) == 0 {
		t.Fatalf("no pg_basebackup process outlived the add killed with SIGKILL: want its WAL streamer, which the next add must end")
	}

	add, out = startAdd(t, bin, dir, "--donor", "1", "--max-rate", "8M")
	awaitJoining(t, bin, dir, copying)
	for _, pid := range left {
		if process.Alive(pid) {
			t.Errorf("pg_basebackup (pid %d), left by the add killed with SIGKILL, still runs while the next add copies", pid)
		}
	}
	if err := add.Wait(); err != nil {
		t.Fatalf("replica add: %v\n%s", err, out.String())
	}
	st = load(t, dir)
	r3 := st.ReplicaByIndex(3)
	if r3 == nil {
		t.Fatalf("replica3 is not recorded after the add: %s", replicaNames(st))
	}
	stop()
	checkConverged(t, st, w)
}

// waitExit waits for cmd to exit, at most timeout (then kills it):
// whether it exited by itself, and its exit error.
func waitExit(cmd *exec.Cmd, timeout time.Duration) (bool, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(timeout):
		cmd.Process.Kill()
		return false, <-done
	}
}

// checkUnlocked checks that no process holds the cluster directory's lock.
func checkUnlocked(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "cluster.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the cluster's lock is held: %v", err)
	}
}
