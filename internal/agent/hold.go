package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// holds is the one hold of the replica's commits a session may have at a
// time (tashkent.hold_commits, extension/src/hold.c): the order plans no
// apply batch past it (order.Hold), and the extension keeps local commits
// after it waiting for their turn, so that a snapshot taken meanwhile
// holds exactly that version on every replica (tashkent verify). A hold
// ends when its session releases it, when the session's connection
// closes, or when its time is up, so that a caller that dies never stops
// the replica for longer than it asked.
//
// The agent holds the replica itself to pin a snapshot at a barrier
// (barrierpin.go): it reserves the hold for the session it will ask from
// (reserveHold), since the order must be held at once, before the
// applier plans past the barrier, and that session's Hold then takes it
// over. Those holds are logged at debug level: one per barrier.
type holds struct {
	mu     sync.Mutex
	holder *backendConn
	// reserved is the backend pid of the session the hold is reserved
	// for; 0: none.
	reserved int32
	// agents: the holder took the agent's reservation over.
	agents bool
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
	if h.reserved != 0 && h.reserved != c.pid {
		return wire.Held{Text: "the agent holds this replica's commits for a moment (it pins a snapshot at a barrier)"}
	}
	v := c.a.seq.hold(m.Version)
	if h.timer != nil {
		h.timer.Stop()
	}
	h.agents = h.reserved == c.pid || h.holder == c && h.agents
	h.holder, h.reserved = c, 0
	limit := time.Duration(m.HoldMillis) * time.Millisecond
	var t *time.Timer
	t = time.AfterFunc(limit, func() { h.expire(c, t, limit) })
	h.timer = t
	c.a.log.Log(context.Background(), h.logLevel(), "commits held", "after_version", v, "pid", c.pid, "for_at_most", limit)
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
	level := h.logLevel()
	h.holder, h.timer, h.agents = nil, nil, false
	c.a.seq.release()
	c.a.log.Log(context.Background(), level, "commits no longer held", "pid", c.pid, "why", why)
}

func (h *holds) logLevel() slog.Level {
	if h.agents {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// endHoldOf ends the hold of backend pid's session now. The extension
// tells the agent of a release without waiting for it
// (tashkent.release_commits); a caller that must not meet its own hold
// afterwards ends it here, and the message, arriving later, finds no hold
// of that session to end.
func (a *Agent) endHoldOf(pid int32, why string) {
	h := &a.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holder != nil && h.holder.pid == pid {
		h.endLocked(h.holder, why)
	}
}

// reserve holds the order after version v, for at most limit, for the
// session of backend pid: its first Hold takes the hold over. False if a
// session holds the replica, or has a reservation.
func (a *Agent) reserveHold(pid int32, v uint64, limit time.Duration) bool {
	h := &a.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holder != nil || h.reserved != 0 {
		return false
	}
	a.seq.hold(v)
	h.reserved = pid
	var t *time.Timer
	t = time.AfterFunc(limit, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.timer == t {
			h.cancelReservationLocked(a, pid)
		}
	})
	h.timer = t
	return true
}

// cancelReservation ends pid's reservation if its session has not taken
// the hold over.
func (a *Agent) cancelReservation(pid int32) {
	h := &a.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancelReservationLocked(a, pid)
}

func (h *holds) cancelReservationLocked(a *Agent, pid int32) {
	if pid == 0 || h.holder != nil || h.reserved != pid {
		return
	}
	h.timer.Stop()
	h.reserved, h.timer = 0, nil
	a.seq.release()
}
