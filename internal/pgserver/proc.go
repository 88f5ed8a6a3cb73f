package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
)

// PostmasterInfo is the content of a data directory's postmaster.pid.
type PostmasterInfo struct {
	PID        int
	DataDir    string
	StartTime  time.Time
	Port       int
	SocketDir  string
	ListenAddr string
	// Status is "starting", "ready", "stopping" or "standby" (empty while
	// the postmaster has not written it yet).
	Status string
}

// ReadPostmasterPID parses dataDir/postmaster.pid. It returns an error
// wrapping os.ErrNotExist when no postmaster is (or claims to be) running.
// The file may be stale after a crash: use Running to check the PID.
func ReadPostmasterPID(dataDir string) (*PostmasterInfo, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	get := func(i int) string {
		if i < len(lines) {
			return strings.TrimSpace(lines[i])
		}
		return ""
	}
	pid, err := strconv.Atoi(get(0))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("pgserver: malformed %s/postmaster.pid: %q", dataDir, get(0))
	}
	info := &PostmasterInfo{PID: pid, DataDir: get(1), SocketDir: get(4), ListenAddr: get(5), Status: get(7)}
	if sec, err := strconv.ParseInt(get(2), 10, 64); err == nil {
		info.StartTime = time.Unix(sec, 0)
	}
	info.Port, _ = strconv.Atoi(get(3))
	return info, nil
}

// Running reports the PID of the postmaster serving dataDir, if one is alive:
// postmaster.pid names a live process that is a postgres started on dataDir.
func Running(dataDir string) (int, bool) {
	info, err := ReadPostmasterPID(dataDir)
	if err != nil {
		return 0, false
	}
	if IsPostgres(info.PID, dataDir) != nil {
		return 0, false
	}
	return info.PID, true
}

// IsPostgres checks that pid is a live (not zombie) postgres process whose
// command line names dataDir. It guards against signalling a recycled PID.
func IsPostgres(pid int, dataDir string) error {
	if pid <= 0 {
		return fmt.Errorf("pgserver: invalid pid %d", pid)
	}
	if !process.Alive(pid) {
		return fmt.Errorf("pgserver: process %d is not running", pid)
	}
	args, err := process.Cmdline(pid)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "postgres") {
		return fmt.Errorf("pgserver: process %d is not postgres (cmdline %q)", pid, strings.Join(args, " "))
	}
	want := dataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		want = abs
	}
	for _, a := range args[1:] {
		if filepath.Clean(a) == want || filepath.Clean(a) == filepath.Clean(dataDir) {
			return nil
		}
	}
	return fmt.Errorf("pgserver: process %d is a postgres, but not for %s (cmdline %q)", pid, dataDir, strings.Join(args, " "))
}

// StopPID stops the postmaster pid serving dataDir with a fast shutdown
// (SIGINT), waiting until it has exited; after the context's deadline (or 60
// seconds without one) it kills the postmaster and its children. It refuses
// to signal a pid that is not a postgres for dataDir. Stopping a server that
// is not running is not an error.
func StopPID(ctx context.Context, dataDir string, pid int) error {
	if !process.Alive(pid) {
		return nil
	}
	if err := IsPostgres(pid, dataDir); err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgserver: signal %d: %w", pid, err)
	}
	fastShutdownWait := 60 * time.Second
	if deadline, ok := ctx.Deadline(); ok {
		fastShutdownWait = time.Until(deadline)
	}
	if process.WaitGone(ctx, pid, fastShutdownWait) {
		return nil
	}
	killTree(pid)
	if !process.WaitGone(context.Background(), pid, 10*time.Second) {
		return fmt.Errorf("pgserver: postgres %d did not exit after SIGKILL", pid)
	}
	return nil
}

// killTree SIGKILLs the postmaster pid and its children. The postmaster is
// stopped first so that it cannot fork while its children are listed;
// children forked anyway notice the postmaster's death and exit by
// themselves.
func killTree(pid int) []int {
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	kids := process.Children(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, c := range kids {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	return kids
}
