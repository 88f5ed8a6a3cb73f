package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// testNet makes a namespace joined to a new bridge by a veth pair: the
// namespace has inside, the host has outside, on a /24 of 10.216.0.0/16
// chosen by this process's PID. Cleanups remove all of it.
func testNet(t *testing.T) (ns *Namespace, v Veth, inside, outside string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces need root (CI runs as root)")
	}
	ctx := context.Background()
	pid := os.Getpid()
	ns, err := Add(ctx, fmt.Sprintf("tashkent-netns-test-%d", pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete(context.Background()) })
	subnet := fmt.Sprintf("10.216.%d.", pid%250)
	inside, outside = subnet+"1", subnet+"10"
	bridge := fmt.Sprintf("tkn%dbr", pid)
	if err := AddBridge(ctx, bridge, outside+"/24"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteLink(context.Background(), bridge) })
	v = Veth{Outside: fmt.Sprintf("tkn%dh", pid), Inside: fmt.Sprintf("tkn%dn", pid), InsideAddr: inside + "/24", Bridge: bridge}
	if err := AddVeth(ctx, ns, v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteLink(context.Background(), v.Outside) })
	return ns, v, inside, outside
}

// listenInside listens on addr inside ns and counts the connections.
func listenInside(t *testing.T, ns *Namespace, addr string) (string, <-chan struct{}) {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	return l.Addr().String(), accepted
}

func TestDoAndDialContextRunInsideTheNamespace(t *testing.T) {
	ns, _, _, _ := testNet(t)
	addr, accepted := listenInside(t, ns, "127.0.0.1:0")
	c, err := ns.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from inside the namespace: %v", addr, err)
	}
	c.Close()
	waitAccepted(t, accepted, true)

	// The same address from the host is another loopback: the listener
	// inside must see nothing.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
	}
	waitAccepted(t, accepted, false)
}

func TestSetLinkDownCutsTheNamespaceOff(t *testing.T) {
	ctx := context.Background()
	ns, v, inside, _ := testNet(t)
	addr, accepted := listenInside(t, ns, inside+":0")
	dial := func() error {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
	// A new link takes a moment to forward: the first dials may time out.
	reachable := func(when string) {
		deadline := time.Now().Add(5 * time.Second)
		for err := dial(); err != nil; err = dial() {
			if time.Now().After(deadline) {
				t.Fatalf("dial %s %s: %v", addr, when, err)
			}
		}
		waitAccepted(t, accepted, true)
	}
	reachable("across the bridge")
	if err := SetLink(ctx, v.Outside, false); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err == nil {
		t.Fatalf("dial %s succeeded with the link down", addr)
	}
	if err := SetLink(ctx, v.Outside, true); err != nil {
		t.Fatal(err)
	}
	reachable("after the link came back")
}

// waitAccepted checks whether the listener accepted a connection: within
// 2 s when one is expected; none within 300 ms when none is.
func waitAccepted(t *testing.T, accepted <-chan struct{}, want bool) {
	t.Helper()
	wait := 300 * time.Millisecond
	if want {
		wait = 2 * time.Second
	}
	select {
	case <-accepted:
		if !want {
			t.Fatal("the listener inside the namespace accepted a connection made outside it")
		}
	case <-time.After(wait):
		if want {
			t.Fatal("the listener inside the namespace accepted nothing")
		}
	}
}
