package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Network partitions (issue 7: "ip netns and veth"). The certifier runs in
// a network namespace of its own, reached from the host through a veth
// pair; the proxies, started by `tashkent up` with the certifier at
// 127.0.0.1:PORT, reach it through a TCP relay on that address that dials
// across the veth. Setting the host end of the veth down partitions the
// certifier from every replica: packets are dropped, connections stall,
// new ones time out. Setting it up heals the partition.

const (
	// relayDialTimeout bounds the relay's connection to the certifier; a
	// partition makes dials hang, and the proxy then retries.
	relayDialTimeout = 2 * time.Second
)

// certNet is the certifier's namespace, veth pair and relay.
type certNet struct {
	ns     string
	hostIf string
	nsIf   string
	hostIP string
	nsIP   string

	relay    net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool
	upstream string
}

// newCertNet creates the namespace and the veth pair. Names carry this
// process's PID so that concurrent runs do not collide.
func newCertNet(ctx context.Context) (*certNet, error) {
	pid := os.Getpid()
	sub := pid % 16384 // a /30 inside 10.213.0.0/16
	n := &certNet{
		ns:     fmt.Sprintf("tashkent-faults-%d", pid),
		hostIf: fmt.Sprintf("tkf%dh", pid),
		nsIf:   fmt.Sprintf("tkf%dn", pid),
		hostIP: fmt.Sprintf("10.213.%d.%d", sub/64, sub%64*4+1),
		nsIP:   fmt.Sprintf("10.213.%d.%d", sub/64, sub%64*4+2),
		conns:  map[net.Conn]bool{},
	}
	steps := [][]string{
		{"ip", "netns", "add", n.ns},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", n.nsIf},
		{"ip", "link", "set", n.nsIf, "netns", n.ns},
		{"ip", "addr", "add", n.hostIP + "/30", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		{"ip", "netns", "exec", n.ns, "ip", "addr", "add", n.nsIP + "/30", "dev", n.nsIf},
		{"ip", "netns", "exec", n.ns, "ip", "link", "set", n.nsIf, "up"},
		{"ip", "netns", "exec", n.ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			n.teardown()
			return nil, fmt.Errorf("set up the certifier's network namespace (needs root and iproute2): %w", err)
		}
	}
	return n, nil
}

func run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// command prefixes a command so that it runs inside the namespace.
func (n *certNet) command(bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.ns, bin}, args...)...)
}

// cut partitions the certifier from every replica.
func (n *certNet) cut(ctx context.Context) error {
	return run(ctx, "ip", "link", "set", n.hostIf, "down")
}

// heal ends the partition.
func (n *certNet) heal(ctx context.Context) error {
	return run(ctx, "ip", "link", "set", n.hostIf, "up")
}

// startRelay listens on addr (where the proxies look for the certifier)
// and relays every connection to upstream, across the veth.
func (n *certNet) startRelay(addr, upstream string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("certifier relay: %w", err)
	}
	n.relay, n.upstream = l, upstream
	n.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.wg.Go(func() { n.pipe(c) })
		}
	})
	return nil
}

func (n *certNet) pipe(down net.Conn) {
	up, err := net.DialTimeout("tcp", n.upstream, relayDialTimeout)
	if err != nil {
		down.Close()
		return
	}
	if !n.track(down, up) {
		return
	}
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Go(func() { cp(up, down) })
	wg.Go(func() { cp(down, up) })
	wg.Wait()
	n.untrack(down, up)
}

// track registers a relayed pair; false (and both closed) when the relay
// is closing.
func (n *certNet) track(cs ...net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		n.conns[c] = true
	}
	return true
}

func (n *certNet) untrack(cs ...net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range cs {
		delete(n.conns, c)
	}
}

// teardown closes the relay and deletes the veth pair and the namespace.
// The certifier inside must have been stopped.
func (n *certNet) teardown() {
	if n.relay != nil {
		n.relay.Close()
	}
	n.mu.Lock()
	for c := range n.conns {
		c.Close()
	}
	n.conns = nil
	n.mu.Unlock()
	n.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Either may already be gone (a failed set-up): nothing to report.
	_ = run(ctx, "ip", "link", "del", n.hostIf)
	_ = run(ctx, "ip", "netns", "del", n.ns)
}
