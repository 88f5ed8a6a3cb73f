package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/netns"
)

// Network partitions, with network namespaces and veth pairs. The certifier runs in
// a network namespace of its own. Every replica reaches it through a veth
// pair of its own, and the harness through one more. The agents, started
// by `tashkent up` with the certifier at 127.0.0.1:PORT, connect to a TCP
// relay on that address; the relay finds which agent a connection comes
// from (its socket's owner, from /proc) and dials the certifier across that
// replica's veth. The replicas' backends talk to their agent over a Unix
// socket, which no partition cuts: a cut replica's commits wait for
// certification, as they would behind a real network partition. Setting the host end of a veth down drops that replica's
// packets to and from the certifier: its connections stall, new ones time
// out. Down on one veth isolates one replica (a minority of one against the
// certifier and the other replicas); down on every replica's veth isolates
// the certifier. Up heals.

const (
	// relayDialTimeout bounds the relay's connection to the certifier; a
	// partition makes dials hang, and the agent then retries.
	relayDialTimeout = 2 * time.Second
)

// vethLink is one veth pair between the host and the certifier's namespace.
type vethLink struct {
	hostIf, nsIf string
	hostIP, nsIP string
}

// certNet is the certifier's namespace, its veth pairs and the relay.
// links[i] serves replica i; the last link serves the harness itself.
type certNet struct {
	ns    *netns.Namespace
	links []vethLink

	// linkOf maps a connection's client port (on 127.0.0.1) to the link it
	// must take: the replica whose agent owns the socket, or the harness's.
	linkOf func(clientPort int) int

	relay net.Listener
	port  int // the certifier's port, inside the namespace and at the relay
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
	// dialed counts the relayed connections per link, so that a run shows
	// that every replica's traffic took its own veth.
	dialed []int
}

// newCertNet creates the namespace and one veth pair per replica plus one
// for the harness. Names and subnets derive from this process's PID so that
// concurrent runs do not collide.
func newCertNet(ctx context.Context, replicas int) (*certNet, error) {
	pid := os.Getpid()
	n := &certNet{conns: map[net.Conn]bool{}}
	ns, err := netns.Add(ctx, fmt.Sprintf("tashkent-faults-%d", pid))
	if err != nil {
		return nil, err
	}
	n.ns = ns
	for i := range replicas + 1 {
		idx := (pid%4096)*4 + i // a /30 inside 10.213.0.0/16
		l := vethLink{
			hostIf: fmt.Sprintf("tkf%dh%d", pid, i), nsIf: fmt.Sprintf("tkf%dn%d", pid, i),
			hostIP: fmt.Sprintf("10.213.%d.%d", idx/64, idx%64*4+1), nsIP: fmt.Sprintf("10.213.%d.%d", idx/64, idx%64*4+2),
		}
		n.links = append(n.links, l)
		err := netns.AddVeth(ctx, ns, netns.Veth{Outside: l.hostIf, Inside: l.nsIf, OutsideAddr: l.hostIP + "/30", InsideAddr: l.nsIP + "/30"})
		if err != nil {
			n.teardown()
			return nil, fmt.Errorf("set up the certifier's network namespace: %w", err)
		}
	}
	return n, nil
}

// command prefixes a command so that it runs inside the namespace.
func (n *certNet) command(bin string, args ...string) *exec.Cmd { return n.ns.Command(bin, args...) }

// harnessLink is the link of the harness's own connections.
func (n *certNet) harnessLink() vethLink { return n.links[len(n.links)-1] }

// setLinks sets the host ends of the given replicas' links down or up.
func (n *certNet) setLinks(ctx context.Context, replicas []int, up bool) error {
	for _, i := range replicas {
		if err := netns.SetLink(ctx, n.links[i].hostIf, up); err != nil {
			return err
		}
	}
	return nil
}

// startRelay listens on addr (where the agents look for the certifier)
// and relays every connection across the veth of the replica it comes from.
func (n *certNet) startRelay(addr string, port int) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("certifier relay: %w", err)
	}
	n.relay, n.port = l, port
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
	li := len(n.links) - 1 // the harness's
	if a, ok := down.RemoteAddr().(*net.TCPAddr); ok && n.linkOf != nil {
		if i := n.linkOf(a.Port); i >= 0 && i < len(n.links) {
			li = i
		}
	}
	link := n.links[li]
	n.mu.Lock()
	if n.dialed == nil {
		n.dialed = make([]int, len(n.links))
	}
	n.dialed[li]++
	n.mu.Unlock()
	d := net.Dialer{Timeout: relayDialTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(link.hostIP)}}
	up, err := d.Dial("tcp", net.JoinHostPort(link.nsIP, strconv.Itoa(n.port)))
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

// dialedPerLink returns how many connections took each link.
func (n *certNet) dialedPerLink() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]int(nil), n.dialed...)
}

// teardown closes the relay and deletes the veth pairs and the namespace.
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
	// Any of them may already be gone (a failed set-up): nothing to report.
	for _, l := range n.links {
		_ = netns.DeleteLink(ctx, l.hostIf)
	}
	if n.ns != nil {
		_ = n.ns.Delete(ctx)
	}
}
