package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
)

// proc is a tashkent certifier or agent, or pgpool, that the bench started
// as its child. It runs in its own process group, so that a Ctrl-C at the
// terminal reaches only the bench, which then stops its children in order,
// by PID.
type proc struct {
	what  string
	child *process.Child
	// stopSignal asks the process to stop; 0: SIGTERM. (pgpool's SIGTERM
	// is a smart shutdown that waits for its clients; SIGINT is fast.)
	stopSignal syscall.Signal
}

// startProc starts bin with args, appending its output to logPath.
func startProc(what, bin string, args []string, logPath string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c, err := process.StartLogged(cmd, logPath, "tashkent bench")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &proc{what: what, child: c}, nil
}

func (p *proc) pid() int { return p.child.PID }

func (p *proc) exited() bool {
	done, _ := p.child.Exited()
	return done
}

// waitReady polls ready until it succeeds, the process exits, or timeout
// passes; on failure the error carries the tail of the process's log.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	exited, err := p.child.WaitReady(ctx, ready)
	switch {
	case exited:
		return fmt.Errorf("%s (pid %d) exited during startup (%v)\n--- %s (tail) ---\n%s",
			p.what, p.pid(), err, p.child.LogPath, p.logTail())
	case err != nil:
		return fmt.Errorf("%s (pid %d) not ready after %s (last check: %v)\n--- %s (tail) ---\n%s",
			p.what, p.pid(), timeout, err, p.child.LogPath, p.logTail())
	}
	return nil
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs. Only this PID is
// signalled: it is our child and not yet reaped, so it cannot have been
// reused.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	sig := p.stopSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = p.child.Signal(sig)
	select {
	case <-p.child.Done():
		return nil
	case <-time.After(grace):
	}
	_ = p.child.Signal(syscall.SIGKILL)
	<-p.child.Done()
	return fmt.Errorf("%s (pid %d) did not exit within %s of %v; killed it", p.what, p.pid(), grace, sig)
}

// addrInUse reports whether the process failed because a port it was given
// (picked as free) was taken meanwhile.
func (p *proc) addrInUse() bool {
	return p.exited() && strings.Contains(p.logTail(), "address already in use")
}

// logTail is the end of what this run of the process wrote to its log.
func (p *proc) logTail() string { return p.child.LogTail(3000) }
