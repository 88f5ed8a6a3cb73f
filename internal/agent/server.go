package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/order"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// backendConn is one backend's connection to the agent's socket
// (extension/src/channel.c). A backend asks for one certification at a
// time and waits for its decision, so a connection's frames are handled
// in order, by its own goroutine.
type backendConn struct {
	a   *Agent
	nc  net.Conn
	pid int32
	run *run // the run that welcomed it; nil if none had registered
	// timeout bounds the certification in flight (certifyOn); nil until
	// the first.
	timeout *time.Timer

	mu sync.Mutex
	// decided are this backend's versions it was told to commit, not yet
	// known committed: if its socket closes, each is checked.
	decided []*order.Local
}

func (a *Agent) accept(ctx context.Context) {
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				a.log.Error("the agent's socket stopped accepting", "err", err)
			}
			return
		}
		go a.serveConn(ctx, nc)
	}
}

func (a *Agent) serveConn(ctx context.Context, nc net.Conn) {
	defer nc.Close()
	r := bufio.NewReader(nc)
	nc.SetReadDeadline(time.Now().Add(helloReadMax))
	typ, p, err := wire.ReadFrame(r, wire.FrameBytesMax)
	if err != nil {
		return
	}
	m, err := wire.Decode(typ, p)
	hello, ok := m.(wire.Hello)
	if err != nil || !ok {
		a.log.Warn("a connection to the agent's socket did not start with a hello", "err", err)
		return
	}
	nc.SetReadDeadline(time.Time{})
	switch hello.Role {
	case wire.RoleApplier:
		a.serveApplier(nc, r, hello)
		return
	case wire.RoleFeed:
		a.serveFeed(ctx, nc, r, hello)
		return
	}
	c, welcome := a.welcome(ctx, nc, hello)
	if _, err := nc.Write(wire.Encode(welcome)); err != nil || !welcome.Accepted {
		if !welcome.Accepted {
			a.log.Warn("refused a backend", "pid", hello.PID, "database", hello.Database, "why", welcome.Text)
		}
		return
	}
	a.track(c, true)
	defer a.track(c, false)
	c.serve(ctx, r)
	a.holds.end(c, "its session ended")
	c.closed()
}

// welcome answers a session's hello: refused if it speaks another
// protocol or works in another database; else with the agent generation
// of the current run, once the run has registered (it waits a little for
// that: a backend's slot records the generation it was welcomed with, and
// a starting agent waits for the slots of earlier generations).
func (a *Agent) welcome(ctx context.Context, nc net.Conn, h wire.Hello) (*backendConn, wire.Welcome) {
	switch {
	case h.Protocol != wire.ProtocolVersion:
		return nil, wire.Welcome{Text: fmt.Sprintf("the agent speaks protocol %d, the backend %d: run an agent and an extension of the same release", wire.ProtocolVersion, h.Protocol)}
	case h.Database != a.cfg.Database:
		return nil, wire.Welcome{Text: fmt.Sprintf("this agent replicates database %s, not %s", quoteText(a.cfg.Database), quoteText(h.Database))}
	}
	r := a.registeredRun(ctx)
	c := &backendConn{a: a, nc: nc, pid: h.PID, run: r}
	gen := uint64(0)
	if r != nil {
		gen = r.generation
	}
	return c, wire.Welcome{Accepted: true, Generation: gen}
}

// registeredRun waits (a little) for a run that has registered its
// applier, and returns it, or nil.
func (a *Agent) registeredRun(ctx context.Context) *run {
	deadline := time.Now().Add(helloRegistrationWaitMax)
	for {
		if r := a.currentRun(); r != nil {
			select {
			case <-r.registered:
				return r
			default:
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		_ = ctxtime.Sleep(ctx, 10*time.Millisecond)
	}
}

func (a *Agent) track(c *backendConn, open bool) {
	a.mu.Lock()
	if open {
		a.conns[c] = struct{}{}
	} else {
		delete(a.conns, c)
	}
	n := len(a.conns)
	a.mu.Unlock()
	a.metrics.backends.Set(float64(n))
}

// serveApplier answers the hello of tashkent.register_applier: accepted
// only from the backend of the agent's own apply connection, and only
// while the agent registers it, since the applier's writes are not
// certified. The connection then stays open, unused, as long as the
// backend wants it.
func (a *Agent) serveApplier(nc net.Conn, r *bufio.Reader, h wire.Hello) {
	a.mu.Lock()
	ok := a.applyPID != 0 && uint32(h.PID) == a.applyPID
	a.mu.Unlock()
	w := wire.Welcome{Accepted: ok}
	if !ok {
		w.Text = "not the agent's apply connection"
		a.log.Warn("refused an applier that is not the agent's apply connection", "pid", h.PID)
	}
	if _, err := nc.Write(wire.Encode(w)); err != nil || !ok {
		return
	}
	io.Copy(io.Discard, r)
}

// streamFrameWaitMax bounds the wait for a streamed writeset's next
// frame: the extension's default tashkent.certify_timeout, which bounds
// each fragment's sending on its side (set by tests, while agents run).
var streamFrameWaitMax atomic.Int64

func init() { streamFrameWaitMax.Store(int64(time.Minute)) }

// serve handles a session's frames until its connection closes. A
// streamed writeset's frames (Fragment, then CertifyStreamed) come with
// nothing in between; a connection that closes before its
// CertifyStreamed cancels the stage.
func (c *backendConn) serve(ctx context.Context, r *bufio.Reader) {
	var streaming *staging
	defer func() { streaming.cancel() }()
	for {
		// Inside a streamed writeset the backend sends its frames one
		// after the other: one that stops (a stopped process) would hold
		// its stage at the certifier, so the wait is bounded.
		var deadline time.Time
		if streaming != nil {
			deadline = time.Now().Add(time.Duration(streamFrameWaitMax.Load()))
		}
		c.nc.SetReadDeadline(deadline)
		typ, p, err := wire.ReadFrame(r, wire.FrameBytesMax)
		if err != nil {
			return
		}
		m, err := wire.Decode(typ, p)
		if err != nil {
			c.a.log.Warn("a backend sent a malformed message; closing its connection", "pid", c.pid, "err", err)
			return
		}
		switch m := m.(type) {
		case wire.Fragment:
			if streaming == nil {
				streaming = c.beginStaging()
			}
			streaming.forward(m)
			continue
		case wire.CertifyStreamed:
			d := c.certifyStreamed(streaming, m)
			streaming = nil
			if _, err := c.nc.Write(wire.Encode(d)); err != nil {
				return
			}
			continue
		}
		if streaming != nil {
			c.a.log.Warn("a backend sent another message inside a streamed writeset; closing its connection", "pid", c.pid, "type", fmt.Sprintf("%T", m))
			return
		}
		switch m := m.(type) {
		case wire.Certify:
			if _, err := c.nc.Write(wire.Encode(c.certify(ctx, m))); err != nil {
				return
			}
		case wire.Abandon:
			c.abandon(m.Version)
		case wire.Sync:
			if _, err := c.nc.Write(wire.Encode(c.sync(ctx, m))); err != nil {
				return
			}
		case wire.Hold:
			if _, err := c.nc.Write(wire.Encode(c.hold(m))); err != nil {
				return
			}
		case wire.Release:
			c.a.holds.end(c, "its session released it")
		case wire.StateQuery:
			if _, err := c.nc.Write(wire.Encode(c.txnState(m))); err != nil {
				return
			}
		default:
			c.a.log.Warn("a backend sent an unexpected message; closing its connection", "pid", c.pid, "type", fmt.Sprintf("%T", m))
			return
		}
	}
}
