package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
)

// The certifiers and the agents are `tashkent` subcommands started
// detached (setsid, output to a log file) so that they outlive `tashkent
// up`. They are identified later by their recorded PID plus their command
// line: the subcommand and one flag value that names this cluster's
// instance. Up starts them with --config and a file in the instance's
// directory; a process started with the flags themselves (the fault
// harness restarts certifiers so) is named by a certifier's --data-dir or
// an agent's --socket, which is in its replica's data directory. A PID
// whose command line does not match is someone else's process and is
// never signalled.

// procIdentity says what a recorded process must look like.
type procIdentity struct {
	sub   string      // "certifier" or "agent"
	names []flagValue // any one of them on its command line names the instance
}

// flagValue is a flag and its value on a command line.
type flagValue struct {
	flag  string // e.g. "--data-dir"
	value string // e.g. "/abs/dir/certifier"
}

func certifierIdentity(c *Certifier) procIdentity {
	return procIdentity{sub: "certifier", names: configOr(c.Config, flagValue{"--data-dir", c.DataDir})}
}

func agentIdentity(a *Agent) procIdentity {
	return procIdentity{sub: "agent", names: configOr(a.Config, flagValue{"--socket", a.Socket})}
}

// configOr is --config with the config file, if recorded, and other.
func configOr(config string, other flagValue) []flagValue {
	if config == "" {
		return []flagValue{other}
	}
	return []flagValue{{"--config", config}, other}
}

func (id procIdentity) String() string {
	alternatives := make([]string, len(id.names))
	for i, n := range id.names {
		alternatives[i] = n.flag + " " + n.value
	}
	return fmt.Sprintf("tashkent %s %s", id.sub, strings.Join(alternatives, " or "))
}

// cmdline returns the arguments of a live, non-zombie process.
func cmdline(pid int) ([]string, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("no pid")
	}
	if !process.Alive(pid) {
		return nil, fmt.Errorf("process %d is not running", pid)
	}
	return process.Cmdline(pid)
}

// check returns nil when pid is a live process matching id.
func (id procIdentity) check(pid int) error {
	args, err := cmdline(pid)
	if err != nil {
		return err
	}
	if len(args) >= 2 && args[1] == id.sub {
		for _, n := range id.names {
			if n.on(args[2:]) {
				return nil
			}
		}
	}
	return fmt.Errorf("process %d is not %s (cmdline %q)", pid, id, strings.Join(args, " "))
}

// on reports whether args carry the flag with the value, as "--flag value"
// or "--flag=value".
func (n flagValue) on(args []string) bool {
	for i, a := range args {
		if a == n.flag+"="+n.value || a == n.flag && i+1 < len(args) && args[i+1] == n.value {
			return true
		}
	}
	return false
}

// stopProcess stops the process pid after checking it matches id: SIGTERM,
// then SIGKILL after grace. It reports whether it had to kill. A pid that
// is not running is not an error (nothing to stop); a pid that is running
// but is some other program is.
func stopProcess(ctx context.Context, id procIdentity, pid int, grace time.Duration) (killed bool, err error) {
	if !process.Alive(pid) {
		return false, errNotRunning
	}
	if err := id.check(pid); err != nil {
		return false, fmt.Errorf("%w: %v", errNotOurs, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return false, fmt.Errorf("signal %d: %w", pid, err)
	}
	if process.WaitGone(ctx, pid, grace) {
		return false, nil
	}
	// Re-check before the SIGKILL: the PID cannot have been reused while
	// the process was alive, but it may have exited just now.
	if id.check(pid) != nil {
		return false, nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if !process.WaitGone(context.Background(), pid, 10*time.Second) {
		return true, fmt.Errorf("process %d did not exit after SIGKILL", pid)
	}
	return true, nil
}

var (
	errNotRunning = errors.New("not running")
	errNotOurs    = errors.New("the recorded pid now belongs to another process")
)

// child is a detached process this `tashkent up` started.
type child struct{ *process.Child }

// spawnDetached starts bin with args in a new session, its stdin on
// /dev/null and its output appended to logPath, so that it survives the end
// of this process and of its terminal.
func spawnDetached(bin string, args []string, logPath string) (*child, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c, err := process.StartLogged(cmd, logPath, "tashkent up")
	if err != nil {
		return nil, err
	}
	return &child{c}, nil
}

// kill kills a child that did not become ready and waits for it.
func (c *child) kill() {
	_ = c.Signal(syscall.SIGKILL)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
	}
}

// logTail returns the end of what this run of the child wrote to its log.
func (c *child) logTail() string { return c.LogTail(logTailBytes) }

const logTailBytes = 3000

// errStartup is returned when a child exits or times out during startup.
type errStartup struct {
	what    string
	pid     int
	reason  string
	logPath string
	tail    string
}

func (e *errStartup) Error() string {
	return fmt.Sprintf("%s (pid %d) %s\n--- %s (tail) ---\n%s\n---", e.what, e.pid, e.reason, e.logPath, e.tail)
}

// portInUse reports whether a startup failure looks like a lost race for a
// port picked as free: a bind failed, and not on one of the fixed
// addresses (a port the user chose, or a recorded one, stays taken).
func (e *errStartup) portInUse(fixed ...string) bool {
	found := false
	for _, line := range strings.Split(e.tail, "\n") {
		if !strings.Contains(line, "address already in use") {
			continue
		}
		found = true
		for _, addr := range fixed {
			if strings.Contains(line, addr) {
				return false
			}
		}
	}
	return found
}

// waitReady polls ready until it succeeds, the child exits or timeout
// passes. On failure it kills the child (it is not recorded as running) and
// the error carries the tail of the child's log.
func waitReady(ctx context.Context, c *child, what string, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	exited, err := c.WaitReady(ctx, ready)
	if exited {
		return &errStartup{what: what, pid: c.PID, reason: fmt.Sprintf("exited during startup (%v)", err),
			logPath: c.LogPath, tail: c.logTail()}
	}
	if err == nil {
		return nil
	}
	c.kill()
	reason := fmt.Sprintf("not ready after %s (last check: %v); killed it", timeout, err)
	if errors.Is(ctx.Err(), context.Canceled) {
		reason = "startup interrupted; killed it"
	}
	return &errStartup{what: what, pid: c.PID, reason: reason, logPath: c.LogPath, tail: c.logTail()}
}
