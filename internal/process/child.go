package process

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
)

// Child is a process this one started, its output appended to a log file.
// A goroutine of its own reaps it: Done is closed then, and Exited says
// how it ended.
type Child struct {
	PID     int
	LogPath string
	cmd     *exec.Cmd
	logFrom int64 // where this run's output starts in the log
	done    chan struct{}
	waitErr error // set before done is closed
}

// StartLogged starts cmd with its output appended to the log at logPath
// (created, with its directory, if need be), after a line that says when
// and with which arguments starter started it. The caller sets cmd's
// directory and process attributes (a process group or a session of its
// own).
func StartLogged(cmd *exec.Cmd, logPath, starter string) (*Child, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close() // the child holds its own copy
	from, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "--- %s: %s starts: %s\n", time.Now().Format(time.RFC3339), starter, strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c := &Child{PID: cmd.Process.Pid, LogPath: logPath, cmd: cmd, logFrom: from, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the child has exited, and how (its Wait error).
func (c *Child) Exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.waitErr
	default:
		return false, nil
	}
}

// Signal sends sig to the child unless it has been reaped: until then its
// PID cannot have been reused.
func (c *Child) Signal(sig syscall.Signal) error { return c.cmd.Process.Signal(sig) }

// LogTail returns up to n bytes of what this run of the child wrote to its
// log (LogTail).
func (c *Child) LogTail(n int) string { return LogTail(c.LogPath, c.logFrom, n) }

// Readiness checks: each attempt is bounded, and they come this often.
const (
	readyAttemptMax   = 2 * time.Second
	readyPollInterval = 50 * time.Millisecond
)

// WaitReady calls ready until it succeeds, the child exits or ctx ends
// (the caller's timeout). It returns exited and the child's Wait error if
// the child exited first, or the last check's error if ctx ended first;
// nil once ready.
func (c *Child) WaitReady(ctx context.Context, ready func(context.Context) error) (exited bool, err error) {
	for {
		if done, werr := c.Exited(); done {
			return true, werr
		}
		attempt, cancel := context.WithTimeout(ctx, readyAttemptMax)
		err = ready(attempt)
		cancel()
		if err == nil {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, err
		case <-c.done:
		case <-time.After(readyPollInterval):
		}
	}
}

// OutputTail is the end of a program's output for an error message: its
// last n bytes, marked as cut when there was more.
func OutputTail(out string, n int) string {
	if len(out) > n {
		return "..." + out[len(out)-n:]
	}
	return out
}
