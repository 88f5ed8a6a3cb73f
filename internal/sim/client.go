package sim

import (
	"slices"

	"github.com/tashkent-db/tashkent/internal/certification"
)

// streamClient models internal/certclient: one stream to the certifier at
// a time; requests pipelined on it; on a broken stream, a new one opened
// from the delivered version with every pending request re-sent under the
// same transaction id (session); pending calls settled from delivered
// entries (settleFromLog); entries checked to continue the delivered
// sequence (deliver).
type streamClient struct {
	r      *replica
	epoch  uint64 // the sequencer epoch this client delivers in
	closed bool

	conn      connID
	connected bool // the stream is open (its opening message was sent)
	sendNext  uint64
	recvNext  uint64
	lastHeard int64

	delivered uint64
	nextID    uint64
	pending   map[uint64]*call
	byTxn     map[certification.TxnID]uint64
}

type call struct {
	req     request
	session *session
}

// deadStreamPeriods is how many staleness periods without a message mark a
// stream dead (a keepalive timeout).
const deadStreamPeriods = 3

func newStreamClient(r *replica, epoch, delivered uint64) *streamClient {
	return &streamClient{
		r: r, epoch: epoch, delivered: delivered,
		pending: make(map[uint64]*call), byTxn: make(map[certification.TxnID]uint64),
	}
}

func (c *streamClient) close() { c.closed, c.connected = true, false }

// connect opens a stream from the delivered version, asking for catch-up,
// and re-sends every pending request in request-id order.
func (c *streamClient) connect() {
	r := c.r
	r.connN++
	c.conn = connID{replica: r.id, n: r.connN}
	c.connected, c.sendNext, c.recvNext, c.lastHeard = true, 0, 0, r.w.now
	r.w.note("connect", uint64(r.id), r.connN, c.delivered)
	c.send(message{open: true, startVersion: c.delivered, catchUp: true})
	if len(c.pending) == 0 {
		return
	}
	ids := make([]uint64, 0, len(c.pending))
	for id := range c.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	reqs := make([]request, len(ids))
	for i, id := range ids {
		reqs[i] = c.pending[id].req
	}
	r.w.stats.Resent += len(reqs)
	c.send(message{requests: reqs})
}

func (c *streamClient) send(m message) {
	m.conn, m.seq, m.toCert = c.conn, c.sendNext, true
	c.sendNext++
	c.r.w.net.send(m)
}

// certify queues a request and returns its id; the answer comes to the
// session's onReply.
func (c *streamClient) certify(req request, s *session) uint64 {
	c.nextID++
	req.id = c.nextID
	c.pending[req.id] = &call{req: req, session: s}
	c.byTxn[req.txn] = req.id
	if c.connected {
		c.send(message{requests: []request{req}})
	}
	return req.id
}

func (c *streamClient) forget(id uint64) { c.take(id) }

func (c *streamClient) take(id uint64) *call {
	cl := c.pending[id]
	if cl != nil {
		delete(c.pending, id)
		delete(c.byTxn, cl.req.txn)
	}
	return cl
}

// keepalive is the maintenance tick: ask for catch-up, and give up on a
// stream that has been silent too long.
func (c *streamClient) keepalive() {
	if !c.connected || c.closed {
		return
	}
	if c.r.w.now-c.lastHeard > deadStreamPeriods*c.r.w.cfg.StalenessTicks {
		c.breakStream()
		return
	}
	c.send(message{catchUp: true})
}

// breakStream ends the stream and reopens one after the reconnect delay.
func (c *streamClient) breakStream() {
	if !c.connected {
		return
	}
	c.connected = false
	c.r.w.stats.StreamBreaks++
	c.r.w.note("stream-broken", uint64(c.r.id), c.conn.n, 0)
	conn := c.conn
	c.r.w.after(c.r.w.cfg.ReconnectDelayTicks, "reconnect", func() {
		if !c.closed && c.conn == conn && c.r.up {
			c.connect()
		}
	})
}

func (c *streamClient) receive(m message) {
	if c.closed || !c.connected || m.conn != c.conn {
		return // a message of an older stream
	}
	if m.reset || m.seq > c.recvNext {
		c.breakStream() // closed by the certifier, or a message went missing
		return
	}
	if m.seq < c.recvNext {
		return // a duplicate: the transport discards it, as TCP does
	}
	c.recvNext++
	c.lastHeard = c.r.w.now
	if !c.deliver(m.entries) {
		c.breakStream()
		return
	}
	if c.epoch == c.r.seq.Epoch() {
		c.r.durableSeen(m.durable)
	}
	for _, rep := range m.replies {
		if cl := c.take(rep.id); cl != nil {
			if rep.commit {
				c.r.w.stats.CommitReplies++
			}
			cl.session.onReply(rep)
		}
	}
}

// deliver checks that entries continue the delivered sequence (a gap or a
// repeat drops the stream, as certclient does) and hands them on.
func (c *streamClient) deliver(entries []entry) bool {
	for i, e := range entries {
		if e.version != c.delivered+1+uint64(i) {
			c.r.w.note("entry-out-of-sequence", uint64(c.r.id), e.version, c.delivered)
			return false
		}
	}
	if len(entries) == 0 {
		return true
	}
	c.r.deliver(c.epoch, entries)
	c.delivered = entries[len(entries)-1].version
	c.settleFromLog(entries)
	return true
}

// settleFromLog answers pending calls whose transaction is in the
// delivered entries: it committed, at that version.
func (c *streamClient) settleFromLog(entries []entry) {
	for _, e := range entries {
		id, ok := c.byTxn[e.txn]
		if !ok {
			continue
		}
		cl := c.take(id)
		c.r.w.stats.SettledFromLog++
		cl.session.onReply(reply{id: id, txn: e.txn, commit: true, commitVersion: e.version})
	}
}
