package sim

import (
	"slices"

	"github.com/tashkent-db/tashkent/internal/certification"
)

// certifier models internal/certifier around the real state machine:
// certification in arrival order, in memory (service.go, certify); a writer
// that makes everything certified since its last write durable with one
// write and one sync (writeLoop); per-stream senders that answer only once
// what a reply depends on is durable, after every durable entry the replica
// has not been sent (stream.go, sendLoop and send).
type certifier struct {
	w           *world
	up          bool
	incarnation uint64

	state   *certification.State
	disk    disk
	pending []entry // certified, not yet written
	writing bool    // a write and its sync are in flight

	streams []*certStream // in opening order: iteration must not depend on maps
	// inFlight counts requests received and not yet answered, over all
	// streams (stream.go, acquire and release).
	inFlight int
}

// certStream is the certifier's side of one replica's stream.
type certStream struct {
	conn      connID
	delivered uint64 // highest version sent on this stream
	recvNext  uint64 // next sequence number expected from the replica
	sendNext  uint64
	queue     []queued
}

// queued is a reply (or, with reply nil, a catch-up request) waiting until
// version waitFor is durable.
type queued struct {
	reply   *reply
	waitFor uint64
}

func newCertifier(w *world) *certifier { return &certifier{w: w} }

func (c *certifier) start() { c.restart() }

// restart recovers like service.go's restore: the last window of the log is
// replayed into a fresh state machine, transaction ids included.
func (c *certifier) restart() {
	c.up = true
	c.incarnation++
	last := c.disk.last()
	base := uint64(0)
	if last > c.w.cfg.WindowVersions {
		base = last - c.w.cfg.WindowVersions
	}
	c.state = certification.New(certification.Config{
		WindowVersions:          c.w.cfg.WindowVersions,
		UnsafeSkipConflictCheck: c.w.cfg.Mutation == MutationSkipConflictCheck, // the real fault point
	}, base)
	for _, e := range c.disk.entries[base:] {
		c.state.Restore(e.version, e.txn, e.keys)
	}
	c.disk.sync(len(c.disk.entries)) // recovery reads and syncs what it keeps
	c.w.note("certifier-up", c.incarnation, last, base)
}

// crash loses the streams, everything certified but not written, and
// whatever the disk had not synced.
func (c *certifier) crash() {
	c.crashKeeping(c.w.rng.IntN(len(c.disk.entries) - c.disk.synced + 1))
}

// crashKeeping crashes with keep of the unsynced entries surviving.
func (c *certifier) crashKeeping(keep int) {
	if !c.up {
		return
	}
	c.up = false
	c.incarnation++
	lost := c.disk.crash(keep)
	c.w.stats.CertifierCrashes++
	c.w.note("certifier-crash", uint64(len(c.pending)), uint64(lost), c.disk.durable())
	c.pending, c.writing, c.streams, c.state, c.inFlight = nil, false, nil, nil, 0
}

func (c *certifier) receive(m message) {
	if !c.up {
		return
	}
	st := c.stream(m.conn)
	switch {
	case m.open && st != nil:
		return // a duplicate of the opening message
	case m.open:
		st = c.open(m)
		if st == nil {
			return
		}
	case st == nil:
		c.send(&certStream{conn: m.conn}, message{reset: true}) // a stream this incarnation never opened
		return
	case m.seq > st.recvNext:
		c.w.stats.StreamBreaks++
		c.close(st) // a message went missing: the stream is broken
		return
	case m.seq == st.recvNext:
		st.recvNext++
	case !c.w.cfg.DeliverDuplicateRequests:
		return // a duplicate: the transport discards it, as TCP does
	}
	c.handle(st, m)
}

func (c *certifier) stream(conn connID) *certStream {
	for _, st := range c.streams {
		if st.conn == conn {
			return st
		}
	}
	return nil
}

// open is checkOpen: a replica can never be ahead of the durable log.
func (c *certifier) open(m message) *certStream {
	if m.startVersion > c.disk.durable() {
		c.w.violate("replica %d opened a stream at version %d, above the certifier's durable version %d (it holds versions the log never made durable)",
			m.conn.replica, m.startVersion, c.disk.durable())
		c.send(&certStream{conn: m.conn}, message{reset: true})
		return nil
	}
	// A newer stream of the same replica replaces the old one.
	c.streams = slices.DeleteFunc(c.streams, func(s *certStream) bool {
		if s.conn.replica == m.conn.replica {
			c.inFlight -= unanswered(s.queue)
			return true
		}
		return false
	})
	st := &certStream{conn: m.conn, delivered: m.startVersion, recvNext: 1}
	c.streams = append(c.streams, st)
	c.w.note("stream-open", uint64(m.conn.replica), m.conn.n, m.startVersion)
	return st
}

func (c *certifier) close(st *certStream) {
	c.streams = slices.DeleteFunc(c.streams, func(s *certStream) bool { return s == st })
	c.inFlight -= unanswered(st.queue)
	c.send(st, message{reset: true})
}

func (c *certifier) handle(st *certStream, m message) {
	for _, req := range m.requests {
		c.inFlight++
		r, waitFor := c.certify(req, c.inFlight > c.w.cfg.InFlightRequestsMax)
		st.queue = append(st.queue, queued{reply: r, waitFor: waitFor})
	}
	if m.catchUp {
		st.queue = append(st.queue, queued{})
	}
	c.kickWriter()
	c.flush(st)
}

// certify is service.go's certify: the state machine decides, a commit is
// queued for the writer, and the reply waits for its version's durability.
// Overloaded, it aborts the request unless it is a retry of a transaction
// that committed, which gets its version back.
func (c *certifier) certify(req request, overloaded bool) (*reply, uint64) {
	r := &reply{id: req.id, txn: req.txn}
	if overloaded {
		c.w.stats.Overloaded++
		if v, ok := c.state.CommittedVersion(req.txn); ok {
			r.commit, r.commitVersion = true, v
			return r, v
		}
		r.reason = reasonOverloaded
		return r, 0
	}
	out := c.state.Certify(certification.Request{Txn: req.txn, StartVersion: req.startVersion, Keys: req.keys})
	c.w.note("certify", req.txn.Seq, out.CommitVersion, uint64(out.Reason))
	if out.Decision != certification.Commit {
		r.reason = out.Reason
		if out.Reason == certification.ReasonTooOld {
			c.w.stats.TooOld++
		}
		return r, 0
	}
	r.commit, r.commitVersion = true, out.CommitVersion
	if out.Duplicate {
		c.w.stats.DuplicateOutcomes++
	} else {
		c.pending = append(c.pending, entry{version: out.CommitVersion, txn: req.txn, writes: req.writes, keys: req.keys})
	}
	return r, out.CommitVersion
}

// kickWriter starts a group commit of everything pending, if none is in
// flight.
func (c *certifier) kickWriter() {
	if c.writing || len(c.pending) == 0 {
		return
	}
	c.writing = true
	c.disk.write(c.pending)
	c.pending = nil
	if c.w.cfg.Mutation == MutationAckBeforeSync {
		for _, st := range c.streams {
			c.flush(st)
		}
	}
	upTo, inc := len(c.disk.entries), c.incarnation
	c.w.after(c.w.between(1, c.w.cfg.DiskSyncTicksMax), "fsync", func() {
		if c.incarnation != inc {
			return // crashed meanwhile
		}
		c.disk.sync(upTo)
		c.writing = false
		c.w.note("durable", c.disk.durable(), 0, 0)
		for _, st := range c.streams {
			c.flush(st)
		}
		c.kickWriter()
	})
}

// flush sends, in order, the queued replies whose versions are durable,
// after every durable entry the stream has not carried yet.
func (c *certifier) flush(st *certStream) {
	durable := c.disk.durable()
	if c.w.cfg.Mutation == MutationAckBeforeSync {
		durable = c.disk.last()
	}
	n := 0
	for n < len(st.queue) && st.queue[n].waitFor <= durable {
		n++
	}
	if n == 0 {
		return
	}
	m := message{durable: durable}
	if st.delivered < durable {
		m.entries = c.disk.entries[st.delivered:durable:durable]
		st.delivered = durable
	}
	for _, q := range st.queue[:n] {
		if q.reply != nil {
			m.replies = append(m.replies, *q.reply)
		}
	}
	c.inFlight -= len(m.replies)
	st.queue = slices.Delete(st.queue, 0, n)
	c.send(st, m)
}

func (c *certifier) send(st *certStream, m message) {
	m.conn, m.seq, m.toCert = st.conn, st.sendNext, false
	st.sendNext++
	c.w.net.send(m)
}

// reasonOverloaded stands for pb.AbortReason_ABORT_REASON_OVERLOADED, which
// the state machine does not know: the service decides it.
const reasonOverloaded = certification.Reason(-1)

func unanswered(queue []queued) int {
	n := 0
	for _, q := range queue {
		if q.reply != nil {
			n++
		}
	}
	return n
}
