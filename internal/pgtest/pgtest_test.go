package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
)

func TestStartOptionsAndCleanup(t *testing.T) {
	var srv *pgserver.Server
	t.Run("inner", func(t *testing.T) {
		srv = Start(t, SynchronousCommitOff(), WithSettings(map[string]string{"work_mem": "7MB"}))
		c := Connect(t, srv, "postgres")
		ctx := context.Background()
		for name, want := range map[string]string{"synchronous_commit": "off", "work_mem": "7MB", "fsync": "on"} {
			var got string
			if err := c.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil || got != want {
				t.Errorf("%s = %q, %v; want %q", name, got, err, want)
			}
		}
		if err := pgserver.IsPostgres(srv.PID(), srv.DataDir()); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Dir(srv.DataDir()))
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("instance directory mode %v, %v; want 0755 so that postgres can reach it", st.Mode().Perm(), err)
		}
	})
	if srv == nil {
		t.Fatal("inner test did not start a server")
	}
	// The cleanup stopped the server and removed its directory.
	if srv.Running() || syscall.Kill(srv.PID(), 0) == nil {
		t.Errorf("postgres %d still running after the test ended", srv.PID())
	}
	if _, err := os.Stat(filepath.Dir(srv.DataDir())); !os.IsNotExist(err) {
		t.Errorf("instance directory still there: %v", err)
	}
}

func TestDefaultSynchronousCommitOn(t *testing.T) {
	srv := Start(t)
	var got string
	if err := Connect(t, srv, "postgres").QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&got); err != nil || got != "on" {
		t.Errorf("synchronous_commit = %q, %v; want on", got, err)
	}
}

func TestParallelInstances(t *testing.T) {
	// Instances started at once get distinct ports and directories.
	const n = 3
	srvs := make([]*pgserver.Server, n)
	var wg sync.WaitGroup
	for i := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i] = Start(t)
		}()
	}
	wg.Wait()
	ports := map[int]bool{}
	for _, s := range srvs {
		if s == nil {
			t.Fatal("an instance failed to start")
		}
		if ports[s.Port()] {
			t.Errorf("port %d used twice", s.Port())
		}
		ports[s.Port()] = true
		Connect(t, s, "postgres")
	}
}

// fakeTB records Fatalf and ends the calling goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestMissingBinariesFail(t *testing.T) {
	t.Setenv("TASHKENT_PG_BIN", t.TempDir())
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(f)
		t.Error("Start returned without PostgreSQL binaries")
	}()
	<-done
	if !strings.Contains(f.fatal, "apt-get install postgresql-15") || !strings.Contains(f.fatal, "do not skip") {
		t.Errorf("Fatalf message = %q", f.fatal)
	}
}

func TestSweepStopsOrphans(t *testing.T) {
	// A directory whose owning test process is gone, with a server still
	// running in it (its test binary was killed): sweep stops the server
	// and removes the directory; a directory owned by a live process stays.
	base, err := os.MkdirTemp("", "pgtest-sweep-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TASHKENT_PGTEST_DIR", base)

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphanDir := filepath.Join(base, dirPrefix+"orphan")
	liveDir := filepath.Join(base, dirPrefix+"live")
	for _, d := range []string{orphanDir, liveDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(orphanDir, ownerFile), []byte(fmt.Sprintf("%d 1\n", dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeOwner(liveDir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := pgserver.Init(ctx, pgserver.Config{DataDir: filepath.Join(orphanDir, "data"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := srv.StartDetached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })

	sweep(base)
	if syscall.Kill(pid, 0) == nil && pgserver.IsPostgres(pid, srv.DataDir()) == nil {
		t.Errorf("orphaned postgres %d still running after sweep", pid)
	}
	if _, err := os.Stat(orphanDir); !os.IsNotExist(err) {
		t.Errorf("orphan directory still there: %v", err)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("sweep removed a live test's directory: %v", err)
	}
}
