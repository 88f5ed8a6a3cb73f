package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// durableWatch is the certifier's durable version as the agent last heard
// it (stream replies, Status), which only rises, and the wake-up of the
// durability feeds that pass it on. An advance never waits for a feed: it
// closes the channel the feeds wait on and makes a new one, so a feed that
// is slow to write sees only the latest value when it looks again.
type durableWatch struct {
	v     atomic.Uint64
	heard atomic.Bool

	mu      sync.Mutex
	changed chan struct{}
}

func newDurableWatch() *durableWatch { return &durableWatch{changed: make(chan struct{})} }

// advance records v if it is higher than the value, or the first heard,
// and wakes the feeds if so.
func (w *durableWatch) advance(v uint64) {
	raised := false
	for old := w.v.Load(); v > old; old = w.v.Load() {
		if w.v.CompareAndSwap(old, v) {
			raised = true
			break
		}
	}
	first := !w.heard.Load() && w.heard.CompareAndSwap(false, true) // after the value: heard means it is there
	if !first && !raised {
		return
	}
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// load is the value, and whether any was heard.
func (w *durableWatch) load() (uint64, bool) { return w.v.Load(), w.heard.Load() }

// wait is closed at the next advance after the call.
func (w *durableWatch) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// feedWriteMax bounds a write to a feed: a server that stopped reading
// (stopped, or swapping) loses its connection, and its feed connects
// again when it can.
const feedWriteMax = 10 * time.Second

// serveFeed serves the extension's durability feed (extension/src/feed.c,
// Hello role 2): the durable version at once if known, then at each
// advance, until the connection closes or the agent stops. The feed is the
// server's, not a database's: its hello names none.
func (a *Agent) serveFeed(ctx context.Context, nc net.Conn, r *bufio.Reader, h wire.Hello) {
	if h.Protocol != wire.ProtocolVersion {
		why := fmt.Sprintf("the agent speaks protocol %d, the durability feed %d: run an agent and an extension of the same release", wire.ProtocolVersion, h.Protocol)
		a.log.Warn("refused a durability feed", "pid", h.PID, "why", why)
		nc.Write(wire.Encode(wire.Welcome{Text: why}))
		return
	}
	if _, err := nc.Write(wire.Encode(wire.Welcome{Accepted: true})); err != nil {
		return
	}
	a.metrics.feeds.Inc()
	defer a.metrics.feeds.Dec()
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, r) // the feed sends nothing more: this sees the close
		close(closed)
	}()
	var sent uint64
	sentAny := false
	failedSent, failedSentAny := uint64(0), false
	for {
		changed := a.durable.wait()
		failedChanged := a.failed.wait()
		// failed first: a durable version that follows may be a later
		// epoch's, at a number that failed in this one (failed.go)
		if f := a.failed.load(); !failedSentAny || f != failedSent {
			nc.SetWriteDeadline(time.Now().Add(feedWriteMax))
			if _, err := nc.Write(wire.Encode(wire.Failed{After: f})); err != nil {
				return
			}
			failedSent, failedSentAny = f, true
		}
		if v, ok := a.durable.load(); ok && (!sentAny || v > sent) {
			nc.SetWriteDeadline(time.Now().Add(feedWriteMax))
			if _, err := nc.Write(wire.Encode(wire.Durable{Version: v})); err != nil {
				return
			}
			sent, sentAny = v, true
		}
		select {
		case <-changed:
		case <-failedChanged:
		case <-closed:
			return
		case <-ctx.Done():
			return
		}
	}
}
