package sim

import (
	"cmp"
	"slices"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// certProcess is the certifier process: it drives the single certifier's
// decisions (internal/certifier, core.go) with the simulation's network,
// disk and clock. Each message's requests are certified in arrival order
// by certifier.CertifyMessage (the real preparation, state machine and
// replies); a writer makes everything certified since its last write
// durable with one write and one sync (single.go, writeLoop); each stream
// sends what certifier.TakeSendable and certifier.PushDue let go, after
// the entries certifier.SendReplies puts before the replies (stream.go,
// sendLoop). Recovery starts at certifier.WindowBase and restores entries
// as a group member does (certifier.DecodeEntryKeys); every start takes a
// new generation, the epoch of the entries it certifies. Streams are
// admitted by certifier.Admit, with the history the replica sends and the
// log's runs. What is left here is I/O: streams and their sequence
// numbers, the disk, timing.
//
// In mode ed (early.go here and in internal/certifier) what a message's
// requests commit is deliverable as it is decided, before any write, and
// while the write of an earlier batch may be in flight: streams that
// asked for early delivery (the agents of mode ed) are sent the entries,
// and their commit replies, at once, up to the first entry the recent
// ring could not hold (that one waits until it is durable), and a
// message naming the durable version once it passes what they hold. The
// writer still writes and syncs everything decided since its last write
// as one batch. A stream opening at a version this process delivered
// early waits until that version is durable before it is judged
// (awaitDeliveredTail). A crash loses what was not synced, decided
// entries not yet written included: every version above the surviving
// prefix fails if one of them was delivered.
type certProcess struct {
	w           *world
	up          bool
	incarnation uint64
	// generation is the epoch of every entry this start certifies
	// (LogEntry.epoch; the service's single.go).
	generation uint64

	state   *certification.State
	disk    disk
	pending []logentry.Entry // certified, not yet written
	writing bool             // a write and its sync are in flight

	streams []*certStream // in opening order: iteration must not depend on maps
	// inFlight counts requests received and not yet answered, over all
	// streams (stream.go, acquire and release).
	inFlight int
	// deliverable is the highest version streams that take entries early
	// may be sent (early.go, Service.deliverable): what decide committed,
	// up to the first stop. Never below the durable version.
	deliverable uint64
	recent      recentRing
	// decided is the last version decided, heldBack the versions decided
	// and not yet durable that the recent ring refused (early.go's
	// earlyStops: barriers and spans, its other stops, are not modeled).
	decided  uint64
	heldBack []uint64 // ascending
	// awaiting are the streams whose opening waits for the versions their
	// replica holds of this process's early deliveries to be durable
	// (awaitDeliveredTail), with the messages that came after the opening.
	awaiting []*awaitingOpen
}

// awaitingOpen is a stream's opening message and what followed it, held
// until the replica's version is durable.
type awaitingOpen struct {
	conn connID
	msgs []message
}

// certStream is the certifier's side of one replica's stream.
type certStream struct {
	conn      connID
	push      bool   // OpenSession.push
	early     bool   // OpenSession.early_delivery: entries and replies at the commit point
	delivered uint64 // highest version sent on this stream
	// durableSent is the durable version the stream's last message named
	// (sendLoop's durableSent).
	durableSent uint64
	recvNext    uint64 // next sequence number expected from the replica
	sendNext    uint64
	// waiting are the answers (a zero Answer: a catch-up) not sent yet.
	waiting []certifier.Answer
}

func newCertifier(w *world) *certProcess { return &certProcess{w: w} }

func (c *certProcess) start() { c.restart() }

// restart recovers as the service does: the log's last window is restored
// into a fresh state machine, transaction ids included.
func (c *certProcess) restart() {
	c.up = true
	c.incarnation++
	base := certifier.WindowBase(c.disk.first(), c.disk.last(), c.w.cfg.WindowVersions)
	c.state = certification.New(certification.Config{
		WindowVersions:          c.w.cfg.WindowVersions,
		UnsafeSkipConflictCheck: c.w.cfg.Mutation == MutationSkipConflictCheck, // the real fault point
	}, base)
	for _, e := range c.disk.entries[base:] {
		txn, keys, err := certifier.DecodeEntryKeys(e.Bytes)
		if err != nil {
			panic("sim: the certifier's log holds an entry it cannot read: " + err.Error())
		}
		c.state.Restore(e.Version, txn, keys)
	}
	c.disk.sync(len(c.disk.entries)) // recovery reads and syncs what it keeps
	c.deliverable = c.disk.durable()
	// What replay refills the ring with is durable: an empty ring decides
	// the same.
	c.recent = recentRing{capacity: uint64(cmp.Or(c.w.cfg.RecentEntriesMax, 1<<16))}
	c.generation = c.nextGeneration()
	c.w.note("certifier-up", c.incarnation, c.disk.last(), c.generation)
}

// nextGeneration is the service's (certifier/epochs.go): above the one
// the generation file holds and every epoch in the log, and at least the
// clock, so that a certifier whose data directory is new (a new lineage)
// does not reuse an older lineage's epoch. It is synced before the
// certifier serves. The simulated clock is the tick, plus one so that a
// start at tick 0 gets generation 1.
func (c *certProcess) nextGeneration() uint64 {
	g := max(c.disk.generation+1, c.disk.topEpoch()+1, uint64(c.w.now)+1)
	c.disk.generation = g
	c.w.noteGeneration(g)
	return g
}

// crash loses the streams, everything certified but not written, and
// whatever the disk had not synced. Versions delivered early and lost
// fail.
func (c *certProcess) crash() {
	c.crashKeeping(c.w.rng.IntN(len(c.disk.entries) - c.disk.synced + 1))
}

// recreate replaces the certifier's data directory with an empty one, as
// an operator does whose certifier lost its disk: a new lineage
// (lineage.go). A running certifier crashes first; the next start
// begins an empty log, with versions from 1 again.
func (c *certProcess) recreate() {
	c.crash()
	c.w.retireLog()
	c.w.stats.CertifierRecreations++
	c.w.note("certifier-recreated", uint64(c.w.lineage()), 0, 0)
}

// crashKeeping crashes with keep of the unsynced entries surviving.
func (c *certProcess) crashKeeping(keep int) {
	if !c.up {
		return
	}
	c.up = false
	c.incarnation++
	lost := c.disk.crash(keep)
	c.w.stats.CertifierCrashes++
	c.w.note("certifier-crash", uint64(len(c.pending)), uint64(lost), c.disk.durable())
	if c.deliverable > c.disk.durable() { // written or only decided, delivered and lost
		c.w.noteFailure(c.disk.durable(), c.generation)
	}
	c.pending, c.writing, c.streams, c.state, c.inFlight = nil, false, nil, nil, 0
	c.deliverable, c.recent, c.decided, c.heldBack, c.awaiting = 0, recentRing{}, 0, nil, nil
}

func (c *certProcess) receive(m message) {
	if !c.up {
		return
	}
	if a := c.awaitingOf(m.conn); a != nil {
		a.msgs = append(a.msgs, m) // read once the stream is admitted, as gRPC would hold them
		return
	}
	st := c.stream(m.conn)
	open := m.req.Open != nil
	switch {
	case open && st != nil:
		return // a duplicate of the opening message
	case open && c.holdsUndurableTail(m.req.Open):
		c.awaiting = append(c.awaiting, &awaitingOpen{conn: m.conn, msgs: []message{m}})
		c.w.note("stream-awaits-durable", uint64(m.conn.replica), m.conn.n, m.req.Open.ReplicaVersion)
		return
	case open:
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
	c.handle(st, m.req)
}

func (c *certProcess) stream(conn connID) *certStream {
	for _, st := range c.streams {
		if st.conn == conn {
			return st
		}
	}
	return nil
}

// holdsUndurableTail is awaitDeliveredTail's test: the replica holds
// versions this process delivered early that are not durable yet. They
// are the log's tail, one sync away, not failed versions: judged now,
// the replica would be told to rewind what the log is about to hold.
func (c *certProcess) holdsUndurableTail(o *pb.OpenSession) bool {
	return min(o.ReplicaVersion, c.deliverable) > c.disk.durable()
}

func (c *certProcess) awaitingOf(conn connID) *awaitingOpen {
	for _, a := range c.awaiting {
		if a.conn == conn {
			return a
		}
	}
	return nil
}

// admitAwaiting reads, in arrival order, the messages of the streams
// whose replica's version is durable now.
func (c *certProcess) admitAwaiting() {
	for i := 0; i < len(c.awaiting); {
		a := c.awaiting[i]
		if c.holdsUndurableTail(a.msgs[0].req.Open) {
			i++
			continue
		}
		c.awaiting = slices.Delete(c.awaiting, i, i+1)
		for _, m := range a.msgs {
			c.receive(m)
		}
	}
}

// open admits a stream as certifier.Admit says, comparing the history
// the replica sent with the log's runs (stream.go, logHistory); a refused
// stream ends with the refusal (the agent halts and is rebuilt).
// judgeAdmission checks the verdict.
func (c *certProcess) open(m message) *certStream {
	o := m.req.Open
	durable := c.disk.durable()
	judged := o
	if c.w.cfg.Mutation == MutationCompareNumbersOnly {
		judged = &pb.OpenSession{Replica: o.Replica, ReplicaVersion: o.ReplicaVersion, Push: o.Push}
	}
	err := certifier.Admit(judged, certifier.LogHistory{Runs: c.disk.runs(durable), Durable: durable, StartsAfter: c.disk.startsAfter()})
	c.w.judgeAdmission(m.conn.replica, o, m.storeEpochs, err)
	if err != nil {
		c.w.stats.Refusals++
		c.w.note("stream-refused", uint64(m.conn.replica), m.conn.n, o.ReplicaVersion)
		refusal := message{reset: true, refused: true}
		if rw, ok := pb.RewindOf(err); ok {
			refusal.rewind, refusal.commonVersion = true, rw.CommonVersion
		}
		c.send(&certStream{conn: m.conn}, refusal)
		return nil
	}
	// A newer stream of the same replica replaces the old one.
	c.streams = slices.DeleteFunc(c.streams, func(s *certStream) bool {
		if s.conn.replica == m.conn.replica {
			c.inFlight -= unanswered(s.waiting)
			return true
		}
		return false
	})
	st := &certStream{conn: m.conn, push: o.Push, early: o.EarlyDelivery, delivered: o.ReplicaVersion, durableSent: o.ReplicaVersion, recvNext: 1}
	c.streams = append(c.streams, st)
	c.w.note("stream-open", uint64(m.conn.replica), m.conn.n, o.ReplicaVersion)
	return st
}

// admitted is true when the certifier serves r's current stream.
func (c *certProcess) admitted(r *replica) bool {
	return r.client != nil && r.client.connected && c.stream(r.client.conn) != nil
}

func (c *certProcess) close(st *certStream) {
	c.streams = slices.DeleteFunc(c.streams, func(s *certStream) bool { return s == st })
	c.inFlight -= unanswered(st.waiting)
	c.send(st, message{reset: true})
}

// handle certifies a message's requests (certifier.CertifyMessage) and
// queues their answers and its catch-up on the stream. In mode ed what
// they commit is deliverable at once (deliverDecided), which wakes every
// stream, as the real deliverable watermark does.
func (c *certProcess) handle(st *certStream, req *pb.CertifyStreamRequestEncoded) {
	decided := false
	if len(req.Requests) > 0 {
		overloaded := make([]bool, len(req.Requests))
		for i := range overloaded {
			c.inFlight++
			overloaded[i] = c.inFlight > c.w.cfg.InFlightRequestsMax
		}
		var answers []certifier.Answer
		before := len(c.pending)
		answers, c.pending = certifier.CertifyMessage(c.state, c.generation, c.limits(), req.Requests, overloaded, c.pending)
		for i, a := range answers {
			c.count(a, overloaded[i])
			st.waiting = append(st.waiting, a)
		}
		decided = c.deliverDecided(c.pending[before:])
	}
	if req.CatchUp {
		st.waiting = append(st.waiting, certifier.Answer{})
	}
	c.kickWriter()
	if decided {
		c.flushAll()
		return
	}
	c.flush(st)
}

func (c *certProcess) limits() certifier.Limits {
	l := certifier.DefaultLimits
	l.InFlightRequestsMax = c.w.cfg.InFlightRequestsMax
	return l
}

// count adds an answer to the stats and the trace.
func (c *certProcess) count(a certifier.Answer, overloaded bool) {
	r := a.Reply
	switch {
	case overloaded:
		c.w.stats.Overloaded++
	case a.Outcome.Duplicate:
		c.w.stats.DuplicateOutcomes++
	case r.AbortReason == pb.AbortReason_ABORT_REASON_TOO_OLD:
		c.w.stats.TooOld++
	}
	c.w.note("certify", r.Txn.GetSeq(), r.CommitVersion, uint64(r.AbortReason))
}

// kickWriter starts a group commit of everything pending, if none is in
// flight. In mode ed its entries were deliverable since they were
// decided (deliverDecided).
func (c *certProcess) kickWriter() {
	if c.writing || len(c.pending) == 0 {
		return
	}
	c.writing = true
	c.disk.write(c.pending)
	c.pending = nil
	if c.w.cfg.Mutation == MutationAckBeforeSync {
		c.flushAll()
	}
	upTo, inc := len(c.disk.entries), c.incarnation
	c.w.after(c.w.between(1, c.w.cfg.DiskSyncTicksMax), "fsync", func() {
		if c.incarnation != inc {
			return // crashed meanwhile
		}
		c.disk.sync(upTo)
		c.writing = false
		c.w.note("durable", c.disk.durable(), 0, 0)
		c.deliverPassed()
		c.flushAll()
		c.admitAwaiting()
		c.kickWriter()
	})
}

// flush is one round of the stream's sendLoop: the answers whose versions
// are durable go out, after every durable entry the stream has not carried
// yet; with none, a stream that asked for pushes is sent those entries.
// A stream that takes entries early is sent them, and its replies, up to
// the deliverable version, and a message that names the durable version
// once that passes what it holds (delivery.durableNewsDue).
func (c *certProcess) flush(st *certStream) {
	durable := c.disk.durable()
	if c.w.cfg.Mutation == MutationAckBeforeSync {
		durable = c.disk.last()
	}
	through := durable
	if st.early {
		through = max(durable, c.deliverable)
	}
	var ready []certifier.Answer
	ready, st.waiting = certifier.TakeSendable(st.waiting, through, waitForOf, nil)
	durableNews := st.early && durable > st.durableSent && st.delivered > st.durableSent
	if len(ready) == 0 && !certifier.PushDue(st.push, 0, st.delivered, through) && !durableNews {
		return
	}
	var replies []*pb.CertifyReply
	for _, a := range ready {
		if a.Reply != nil {
			replies = append(replies, a.Reply)
		}
	}
	c.inFlight -= len(replies)
	st.delivered, _ = certifier.SendReplies(c.read, st.delivered, through, durable, replies, func(m *pb.CertifyStreamReply) error {
		c.send(st, message{rep: m})
		return nil
	})
	st.durableSent = durable
}

// flushAll is a send round on every stream, in opening order.
func (c *certProcess) flushAll() {
	for _, st := range c.streams {
		c.flush(st)
	}
}

func waitForOf(a certifier.Answer) uint64 { return a.WaitFor }

func (c *certProcess) send(st *certStream, m message) {
	m.conn, m.seq, m.toCert, m.lineage = st.conn, st.sendNext, false, c.w.lineage()
	st.sendNext++
	c.w.net.send(m)
}

func unanswered(waiting []certifier.Answer) int {
	n := 0
	for _, a := range waiting {
		if a.Reply != nil {
			n++
		}
	}
	return n
}
