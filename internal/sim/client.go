package sim

import (
	"slices"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// streamClient models internal/certclient, whose goroutines and gRPC
// stream the simulation cannot run: one stream to the certifier at a time;
// requests pipelined on it; on a broken stream, a new one opened from the
// delivered version with every pending request re-sent under the same
// transaction id (session); pending calls settled from delivered entries
// (settleFromLog). Entries are checked to continue the delivered sequence
// by the client's own certclient.Continuing. Every session opens with the
// replica's history (certclient.Options.History).
type streamClient struct {
	r      *replica
	round  uint64 // the order's round this client delivers in
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
	req     *pb.CertifyRequestEncoded
	session *session
}

// deadStreamPeriods is how many staleness periods without a message mark a
// stream dead (a keepalive timeout).
const deadStreamPeriods = 3

func newStreamClient(r *replica, round, delivered uint64) *streamClient {
	return &streamClient{
		r: r, round: round, delivered: delivered,
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
	open := &pb.OpenSession{Replica: r.name, ReplicaVersion: c.delivered, Push: !r.w.cfg.NoPush, History: slices.Clone(r.db.runs),
		EarlyDelivery: r.w.cfg.Mode == ModeED}
	c.sendMessage(message{req: &pb.CertifyStreamRequestEncoded{Open: open, CatchUp: true}, storeEpochs: slices.Clone(r.db.epochs)})
	if len(c.pending) == 0 {
		return
	}
	ids := make([]uint64, 0, len(c.pending))
	for id := range c.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	reqs := make([]*pb.CertifyRequestEncoded, len(ids))
	for i, id := range ids {
		reqs[i] = c.pending[id].req
	}
	r.w.stats.Resent += len(reqs)
	c.send(&pb.CertifyStreamRequestEncoded{Requests: reqs})
}

func (c *streamClient) send(req *pb.CertifyStreamRequestEncoded) {
	c.sendMessage(message{req: req})
}

func (c *streamClient) sendMessage(m message) {
	m.conn, m.seq, m.toCert = c.conn, c.sendNext, true
	c.r.w.net.send(m)
	c.sendNext++
}

// certify queues a request and returns its id; the answer comes to the
// session's onReply.
func (c *streamClient) certify(req *pb.CertifyRequestEncoded, s *session) uint64 {
	c.nextID++
	req.RequestId = c.nextID
	c.pending[req.RequestId] = &call{req: req, session: s}
	c.byTxn[txnOf(req.Txn)] = req.RequestId
	if c.connected {
		c.send(&pb.CertifyStreamRequestEncoded{Requests: []*pb.CertifyRequestEncoded{req}})
	}
	return req.RequestId
}

func (c *streamClient) forget(id uint64) { c.take(id) }

func (c *streamClient) take(id uint64) *call {
	cl := c.pending[id]
	if cl != nil {
		delete(c.pending, id)
		delete(c.byTxn, txnOf(cl.req.Txn))
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
	c.send(&pb.CertifyStreamRequestEncoded{CatchUp: true})
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
	if m.refused && m.rewind && c.r.w.cfg.Mode == ModeED && c.r.askedToRewind(m.commonVersion, m.lineage) {
		return // the run ended; the next one opened its own stream
	}
	if m.refused {
		c.r.refused()
	}
	if m.reset || m.seq > c.recvNext {
		c.breakStream() // closed or refused by the certifier, or a message went missing
		return
	}
	if m.seq < c.recvNext {
		return // a duplicate: the transport discards it, as TCP does
	}
	c.recvNext++
	c.lastHeard = c.r.w.now
	if !c.deliver(m.rep.Entries, m.rep.DurableVersion, m.lineage) {
		c.breakStream()
		return
	}
	if c.round == c.r.ord.Round() {
		c.r.durableSeen(m.rep.DurableVersion)
	}
	for _, rep := range m.rep.Replies {
		if cl := c.take(rep.RequestId); cl != nil {
			if rep.Decision == pb.Decision_DECISION_COMMIT {
				c.r.w.stats.CommitReplies++
			}
			cl.session.onReply(rep, m.lineage)
		}
	}
}

// deliver hands entries that continue the delivered sequence on (a gap
// or a repeat drops the stream, as certclient does), in a message that
// names the durable version.
func (c *streamClient) deliver(raw [][]byte, durable uint64, lineage int) bool {
	entries, err := certclient.Continuing(raw, c.delivered)
	if err != nil {
		c.r.w.note("entry-out-of-sequence", uint64(c.r.id), c.delivered, 0)
		return false
	}
	if len(entries) == 0 {
		return true
	}
	if !c.r.deliver(c.round, entries) {
		return false
	}
	c.delivered = entries[len(entries)-1].Version
	c.r.noteDelivered(c.delivered, durable)
	c.settleFromLog(entries, lineage)
	return true
}

// settleFromLog answers pending calls whose transaction is in the
// delivered entries (sent by a certifier of lineage): it committed, at
// that version.
func (c *streamClient) settleFromLog(entries []logentry.Entry, lineage int) {
	if len(c.pending) == 0 {
		return
	}
	for _, e := range entries {
		h, err := logentry.RawHeaderOf(e.Bytes)
		if err != nil {
			continue
		}
		id, ok := c.byTxn[certification.TxnID{Origin: string(h.Origin), Seq: h.Seq}]
		if !ok {
			continue
		}
		cl := c.take(id)
		c.r.w.stats.SettledFromLog++
		cl.session.onReply(&pb.CertifyReply{RequestId: id, Txn: cl.req.Txn, Decision: pb.Decision_DECISION_COMMIT, CommitVersion: e.Version}, lineage)
	}
}
