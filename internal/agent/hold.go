package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// holds is the one hold of the replica's commits a session may have at a
// time (tashkent.hold_commits, extension/src/hold.c): the order plans no
// apply batch past it (order.Hold), and the extension keeps local commits
// after it waiting for their turn, so that a snapshot taken meanwhile
// holds exactly that version on every replica (tashkent verify). A hold ends when its session releases it, when the session's
// connection closes, or when its time is up, so that a caller that dies
// never stops the replica for longer than it asked.
type holds struct {
	mu     sync.Mutex
	holder *backendConn
	timer  *time.Timer
}

// hold answers a backend's Hold: the order's hold moves to the version
// asked for (or further, past what is already under way), or it is
// refused while another session holds the replica or the replica does not
// serve.
func (c *backendConn) hold(m wire.Hold) wire.Held {
	if r, why := c.a.servingRun(c.run); r == nil {
		return wire.Held{Text: why}
	}
	h := &c.a.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holder != nil && h.holder != c {
		return wire.Held{Text: fmt.Sprintf("another session (backend pid %d) holds this replica's commits", h.holder.pid)}
	}
	v := c.a.seq.hold(m.Version)
	if h.timer != nil {
		h.timer.Stop()
	}
	h.holder = c
	limit := time.Duration(m.HoldMillis) * time.Millisecond
	var t *time.Timer
	t = time.AfterFunc(limit, func() { h.expire(c, t, limit) })
	h.timer = t
	c.a.log.Info("commits held", "after_version", v, "pid", c.pid, "for_at_most", limit)
	return wire.Held{Held: true, Version: v}
}

// expire ends c's hold when timer t, the one of its latest Hold, fires:
// the timer of a Hold since renewed may fire as it is stopped.
func (h *holds) expire(c *backendConn, t *time.Timer, limit time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer == t {
		h.endLocked(c, fmt.Sprintf("its time (%s) is up", limit))
	}
}

// end ends c's hold, if it has the hold.
func (h *holds) end(c *backendConn, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLocked(c, why)
}

func (h *holds) endLocked(c *backendConn, why string) {
	if h.holder != c {
		return
	}
	h.timer.Stop()
	h.holder, h.timer = nil, nil
	c.a.seq.release()
	c.a.log.Info("commits no longer held", "pid", c.pid, "why", why)
}
