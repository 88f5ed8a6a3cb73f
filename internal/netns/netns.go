// Package netns gives test processes network namespaces of their own,
// joined by veth pairs (to the host, or to a bridge), with iproute2 (`ip`):
// real separate addresses, and real partitions by setting a link down. The
// fault harness (internal/faults) puts the certifier behind one; the
// deployment test (internal/deploytest) gives every host of a three-host
// cluster its own. Everything here needs root.
//
// Processes join a namespace in one of two ways. Command wraps a program in
// `ip netns exec`, which enters the namespace and then executes it, so the
// PID is the program's. Do runs a function on an OS thread that entered
// the namespace: every process it starts (exec.Cmd.Start forks from the
// calling thread) and every socket it opens is in the namespace, which lets
// a test start a process with the credentials and files it chooses and
// dial from inside a namespace without a helper program.
package netns

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Run runs an administrative command (ip, nft, ...) and returns its output
// in the error when it fails.
func Run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Namespace is a named network namespace (`ip netns add`, a bind mount in
// /run/netns).
type Namespace struct {
	Name string
}

// Add creates the namespace and sets its loopback up.
func Add(ctx context.Context, name string) (*Namespace, error) {
	n := &Namespace{Name: name}
	if err := Run(ctx, "ip", "netns", "add", name); err != nil {
		return nil, fmt.Errorf("create network namespace %s (needs root and iproute2): %w", name, err)
	}
	if err := n.Run(ctx, "ip", "link", "set", "lo", "up"); err != nil {
		_ = n.Delete(ctx)
		return nil, err
	}
	return n, nil
}

// Delete removes the namespace. Interfaces inside it go with it once no
// process holds it; the processes themselves are not touched.
func (n *Namespace) Delete(ctx context.Context) error {
	return Run(ctx, "ip", "netns", "del", n.Name)
}

// Run runs an administrative command inside the namespace.
func (n *Namespace) Run(ctx context.Context, args ...string) error {
	return Run(ctx, append([]string{"ip", "netns", "exec", n.Name}, args...)...)
}

// Command prefixes a command so that it runs inside the namespace; the
// started process's PID is the program's own (ip executes it).
func (n *Namespace) Command(bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, bin}, args...)...)
}

// Do runs f on an OS thread inside the namespace and returns its error.
// Processes f starts and sockets it opens belong to the namespace;
// goroutines f starts do not (they run on other threads).
func (n *Namespace) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine returns, the runtime ends its
		// thread, so no other goroutine ever runs inside the namespace.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+n.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open network namespace %s: %w", n.Name, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("enter network namespace %s: %w", n.Name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// DialContext opens a connection from inside the namespace (a socket
// keeps the namespace it was created in); it fits pgx's DialFunc.
func (n *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// PIDs lists the processes in the namespace (`ip netns pids`).
func (n *Namespace) PIDs(ctx context.Context) ([]int, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", n.Name).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", n.Name, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// List returns the names of the namespaces that start with prefix.
func List(ctx context.Context, prefix string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line) // "NAME (id: N)"
		if len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names, nil
}
