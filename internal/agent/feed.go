package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// durableWatch is the certifier's durable version that the durability
// feeds pass on, and their wake-up. It is heard only on certifier streams
// that admitted the replica's history (admission.go), and only rises,
// as shared memory's does (extension/src/durable.c). After a refusal it
// is suspended: the feeds send nothing until a stream admits the history
// again. An advance never waits for a feed: it closes the channel the
// feeds wait on and makes a new one, so a feed that is slow to write sees
// only the latest value when it looks again.
type durableWatch struct {
	mu        sync.Mutex
	v         uint64
	heard     bool // a value was heard since the agent started
	suspended bool
	changed   chan struct{}
}

func newDurableWatch() *durableWatch { return &durableWatch{changed: make(chan struct{})} }

// advance records v if it is higher than the value, or the first heard,
// lifts a suspension, and wakes the feeds if any of that changed what
// they would send.
func (w *durableWatch) advance(v uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wake := !w.heard || w.suspended || v > w.v
	w.v, w.heard, w.suspended = max(w.v, v), true, false
	if wake {
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

// suspend stops the feeds until the next advance.
func (w *durableWatch) suspend() {
	w.mu.Lock()
	w.suspended = true
	w.mu.Unlock()
}

// load is the value, and whether the feeds may send it: one was heard,
// and the watch is not suspended.
func (w *durableWatch) load() (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.v, w.heard && !w.suspended
}

// wait is closed at the next advance after the call that changes what the
// feeds would send.
func (w *durableWatch) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// feedWriteMax bounds a write to a feed: a server that stopped reading
// (stopped, or swapping) loses its connection, and its feed connects
// again when it can.
const feedWriteMax = 10 * time.Second

// feedPace is how often at most a feed sends outside mode ed. There no
// commit waits for the feed: the certifier answers a commit once it is
// durable, and the decision says so. Only tashkent.durable_version() and
// wait_durable read it, and an advance per certifier batch would wake the
// feed's worker about once per commit. In mode ed a safe COMMIT waits for
// the feed, which sends each advance at once.
const feedPace = 10 * time.Millisecond

// serveFeed serves the extension's durability feed (extension/src/feed.c,
// Hello role 2): the durable version at once if known, then at each
// advance (none while the watch is suspended), until the connection
// closes or the agent stops. The feed is the server's, not a database's:
// its hello names none.
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
	var failedSent wire.Failed
	failedSentAny := false
	paced := a.cfg.Mode != ModeED
	var lastSent time.Time
	for {
		changed := a.durable.wait()
		failedChanged := a.failed.wait()
		// failed first: a durable version that follows may be a later
		// epoch's, at a number that failed in this one (failed.go)
		if f, known := a.failed.load(); known && (!failedSentAny || f != failedSent) {
			nc.SetWriteDeadline(time.Now().Add(feedWriteMax))
			if _, err := nc.Write(wire.Encode(f)); err != nil {
				return
			}
			failedSent, failedSentAny = f, true
		}
		if v, ok := a.durable.load(); ok && (!sentAny || v > sent) {
			nc.SetWriteDeadline(time.Now().Add(feedWriteMax))
			if _, err := nc.Write(wire.Encode(wire.Durable{Version: v})); err != nil {
				return
			}
			sent, sentAny, lastSent = v, true, time.Now()
			a.metrics.feedSends.Inc()
		}
		failedNews := false
		select {
		case <-changed:
		case <-failedChanged:
			failedNews = true
		case <-closed:
			return
		case <-ctx.Done():
			return
		}
		if wait := feedPace - time.Since(lastSent); paced && !failedNews && wait > 0 {
			select {
			case <-time.After(wait):
			case <-closed:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}
