package certclient

import (
	"errors"
	"time"
)

// A member that stops without closing its connections (a paused or hung
// process, a network that drops packets instead of refusing them) leaves
// the stream open: nothing fails, and without a deadline every pending
// request would wait on it until it resumes, while the other members have
// long elected a new leader. gRPC's keepalive cannot help: its client
// pings at most every 10 s. So with several members the client gives up
// on a stream that has brought nothing for stallTimeout while a request
// has waited at least that long, and moves to the next member, which
// leads or names the leader. The requests are sent again; the certifier
// answers a repeated transaction from its log, never twice.

// stallTimeout is about Raft's election timeout here: after it, a new
// leader is likely.
const stallTimeout = time.Second

// stallCheckInterval is how often the stream is checked.
const stallCheckInterval = 200 * time.Millisecond

var errStalled = errors.New("the certifier member answered nothing for a second while requests waited; trying another member")

// stalled reports whether the current stream has brought nothing for
// stallTimeout while a request has been waiting at least as long.
func (c *Client) stalled(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handing || len(c.pending) == 0 || now.Sub(c.heardAt) < stallTimeout {
		return false
	}
	for _, cl := range c.pending {
		if now.Sub(cl.queued) >= stallTimeout {
			return true
		}
	}
	return false
}
