package bench

import (
	"context"
	"fmt"
	"io"
	"os"
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
	what    string
	cmd     *exec.Cmd
	logPath string
	logFrom int64         // where this run's output starts in logPath
	done    chan struct{} // closed once the process has been reaped
	waitErr error
	// stopSignal asks the process to stop; 0: SIGTERM. (pgpool's SIGTERM
	// is a smart shutdown that waits for its clients; SIGINT is fast.)
	stopSignal syscall.Signal
}

// startProc starts bin with args, appending its output to logPath.
func startProc(what, bin string, args []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", what, err)
	}
	defer logf.Close() // the child holds its own copy
	from, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "--- %s: tashkent bench starts: %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = filepath.Dir(logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", what, bin, err)
	}
	p := &proc{what: what, cmd: cmd, logPath: logPath, logFrom: from, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls ready until it succeeds, the process exits, or timeout
// passes; on failure the error carries the tail of the process's log.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if p.exited() {
			return fmt.Errorf("%s (pid %d) exited during startup (%v)\n--- %s (tail) ---\n%s",
				p.what, p.pid(), p.waitErr, p.logPath, p.logTail())
		}
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(actx)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s (pid %d) not ready after %s (last check: %v)\n--- %s (tail) ---\n%s",
				p.what, p.pid(), timeout, err, p.logPath, p.logTail())
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
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
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s (pid %d) did not exit within %s of %v; killed it", p.what, p.pid(), grace, sig)
}

// addrInUse reports whether the process failed because a port it was given
// (picked as free) was taken meanwhile.
func (p *proc) addrInUse() bool {
	return p.exited() && strings.Contains(p.logTail(), "address already in use")
}

// logTail is the end of what this run of the process wrote to its log.
func (p *proc) logTail() string { return process.LogTail(p.logPath, p.logFrom, 3000) }
