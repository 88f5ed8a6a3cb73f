package certifier

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// streamQueueMax bounds the replies a stream may have waiting for
// durability before its receiver stops reading (backpressure).
const streamQueueMax = 4096

// queued is a reply waiting until durable reaches waitFor. A nil reply is a
// catch-up: it only asks for the entries.
type queued struct {
	reply    *pb.CertifyReply
	waitFor  uint64
	received time.Time
	decided  time.Time // stage log only
	// In a group: an abort waits until the group confirmed ticket; tenure
	// is the leadership it was decided in (group.go, maySend).
	ticket uint64
	tenure uint64
}

// streamState is what one Certify stream counts against the service.
type streamState struct {
	s        *Service
	inFlight atomic.Int64    // this stream's share of Service.inFlight
	session  *replicaSession // the replica's progress (replicas.go)
	tenure   uint64          // the tenure it was admitted in (orderer.mayDeliver)
	// epoch and epochFirst name the epoch the stream's decisions are
	// taken in, in its first message (CertifyStreamReply.epoch); the
	// sender's goroutine clears epochToSend once sent.
	epoch, epochFirst uint64
	epochToSend       bool
}

func (st *streamState) acquire() bool {
	st.inFlight.Add(1)
	return st.s.inFlight.Add(1) <= int64(st.s.cfg.Limits.InFlightRequestsMax)
}

func (st *streamState) release(n int64) {
	st.inFlight.Add(-n)
	st.s.inFlight.Add(-n)
}

// Certify serves one replica's session. See package documentation.
func (s *Service) Certify(stream pb.Certifier_CertifyServer) error {
	s.streams.Add(1)
	defer s.streams.Add(-1)
	first, err := recvEncoded(stream)
	if err != nil {
		return err
	}
	lifetime, tenure, err := s.order.admit(stream, first.Open)
	if err != nil {
		return err
	}
	if err := s.awaitDeliveredTail(stream.Context(), lifetime, first.Open.GetReplicaVersion()); err != nil {
		return err
	}
	if err := s.checkOpen(first.Open); err != nil {
		return err
	}
	epoch, epochFirst, err := s.order.certifyingEpoch(lifetime)
	if err != nil {
		return err
	}
	session := s.replicas.opened(first.Open.Replica, sessionStatusAddr(stream.Context(), first.Open.StatusAddr), first.Open.ReplicaVersion)
	defer session.close()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stopFollowing := context.AfterFunc(lifetime, cancel)
	defer stopFollowing()
	st := &streamState{s: s, session: session, tenure: tenure, epoch: epoch, epochFirst: epochFirst, epochToSend: true}
	queue := make(chan queued, streamQueueMax)
	var wg sync.WaitGroup
	sendErr := make(chan error, 1)
	recvErr := make(chan error, 1)
	wg.Add(2)
	d := s.deliveryOf(first.Open)
	if d.earlyEntries { // before the first request is decided
		s.earlyStreams.Add(1)
		s.warnOneThread(d)
	}
	go func() {
		defer wg.Done()
		if d.earlyEntries {
			defer s.earlyStreams.Add(-1)
		}
		sendErr <- s.sendLoop(ctx, stream, st, queue, first.Open.ReplicaVersion, d)
	}()
	go func() {
		defer wg.Done()
		recvErr <- s.receiveLoop(ctx, stream, st, first, queue, &wg)
	}()
	// Whatever is still queued when every goroutine of the stream is done
	// was never answered; and the stream no longer asks for a pause (its
	// reader could still set one until then).
	go func() {
		wg.Wait()
		st.release(st.inFlight.Load())
		s.flow.set(st, false)
	}()
	select {
	case err := <-sendErr:
		return err // returning ends the stream, which unblocks Recv
	case err := <-recvErr:
		close(queue)
		if serr := <-sendErr; serr != nil {
			return serr
		}
		return err
	}
}

func (s *Service) checkOpen(open *pb.OpenSession) error {
	return Admit(open, s.logHistory())
}

// logHistory is what admission compares a replica's history with. The
// durable version is read first: the runs cover it (the writer notes an
// entry's epoch before the durable version passes it).
func (s *Service) logHistory() LogHistory {
	durable := s.DurableVersion()
	startsAfter := s.log.StartsAfter()
	h := LogHistory{Runs: s.runs.view(startsAfter+1, durable), Durable: durable, StartsAfter: startsAfter}
	if startsAfter > 0 {
		h.StartEpoch = s.runs.epochAt(startsAfter)
	}
	return h
}

// recvEncoded reads the next message with its writesets left encoded
// (CertifyStreamRequestEncoded is CertifyStreamRequest on the wire),
// through the fast decoder (requestdecode.go) when the server's codec is
// grpcbuf.Codec.
func recvEncoded(stream pb.Certifier_CertifyServer) (*pb.CertifyStreamRequestEncoded, error) {
	r := &streamRequest{&pb.CertifyStreamRequestEncoded{}}
	if err := stream.RecvMsg(r); err != nil {
		return nil, err
	}
	return r.CertifyStreamRequestEncoded, nil
}

// receiveAheadMax bounds the messages a stream's reader reads ahead of
// their certification.
const receiveAheadMax = 16

// received is a message and when it was read.
type received struct {
	msg *pb.CertifyStreamRequestEncoded
	at  time.Time
}

// receiveLoop certifies the stream's messages in order. A reader reads
// them ahead, so that a message's pause flag takes effect at once, also
// while an earlier message of the stream is held by flow control (the
// replica may have fallen behind meanwhile, with its transactions' row
// locks in the way of its apply). The reader joins wg: it may outlive
// the loop until the stream ends.
func (s *Service) receiveLoop(ctx context.Context, stream pb.Certifier_CertifyServer, st *streamState, first *pb.CertifyStreamRequestEncoded, queue chan<- queued, wg *sync.WaitGroup) error {
	msgs := make(chan received, receiveAheadMax)
	readErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(msgs)
		readErr <- s.readAhead(ctx, stream, st, first, msgs)
	}()
	for r := range msgs {
		if err := s.enqueue(ctx, st, r, queue); err != nil {
			return err
		}
	}
	return <-readErr
}

func (s *Service) readAhead(ctx context.Context, stream pb.Certifier_CertifyServer, st *streamState, msg *pb.CertifyStreamRequestEncoded, msgs chan<- received) error {
	for {
		s.flow.set(st, msg.Pause)
		now := time.Now()
		st.session.report(msg.AppliedVersion, now)
		select {
		case msgs <- received{msg, now}:
		case <-ctx.Done():
			return ctx.Err()
		}
		var err error
		msg, err = recvEncoded(stream)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if msg.Open != nil {
			return status.Error(codes.InvalidArgument, "a Certify stream opens its session once, in its first message")
		}
	}
}

func (s *Service) enqueue(ctx context.Context, st *streamState, r received, queue chan<- queued) error {
	msg, now := r.msg, r.at // a reply's latency includes a flow-control hold
	if len(msg.Requests) > 0 {
		if err := s.flow.hold(ctx, st); err != nil {
			return err
		}
	}
	if err := s.certifyMessage(ctx, st, msg.Requests, now, queue); err != nil {
		return err
	}
	if msg.CatchUp {
		return put(ctx, queue, queued{received: now})
	}
	return nil
}

// certifyMessage certifies a message's requests with one entry into the
// critical section (service.go: prepare, the orderer's decide, answer). An
// error from decide ends the stream after the requests decided before it
// are queued.
func (s *Service) certifyMessage(ctx context.Context, st *streamState, reqs []*pb.CertifyRequestEncoded, now time.Time, queue chan<- queued) error {
	batch := make([]certifying, len(reqs))
	for i, req := range reqs {
		batch[i] = s.prepare(req, !st.acquire())
	}
	n, err := s.order.decide(ctx, batch)
	s.settleStages(batch, n)
	var decided time.Time
	if s.stages != nil {
		decided = time.Now()
	}
	for i := range batch[:n] {
		c := &batch[i]
		q := queued{received: now, decided: decided, ticket: c.ticket, tenure: c.tenure}
		q.reply, q.waitFor = s.answer(c)
		if e := put(ctx, queue, q); e != nil {
			return e
		}
	}
	return err
}

func put(ctx context.Context, queue chan<- queued, q queued) error {
	select {
	case queue <- q:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendLoop sends each queued reply once what it depends on is durable
// (TakeSendable), preceded by every durable entry the replica has not been
// sent. Replies that are ready together share one message. A stream that
// takes entries early is sent them, and its replies if it takes those
// too, up to the deliverable version instead (early.go).
//
// Pushes (OpenSession.push): a stream that asked for them is sent every
// entry as soon as it is durable, not only with the replica's own replies.
// Tashkent §6.1 sends a replica the remote writesets with its
// certification replies (and, here, when it asks: certclient.RequestCatchUp,
// every --staleness), so a replica that commits little heard of other
// replicas' commits up to --staleness late. (A busy replica hears of them
// with its replies anyway; what keeps it behind under load is applying
// them, see BENCHMARKS.md.)
func (s *Service) sendLoop(ctx context.Context, stream pb.Certifier_CertifyServer, st *streamState, queue <-chan queued, delivered uint64, d delivery) error {
	var waiting, ready []queued
	// durableSent is the durable version the stream's last message named;
	// what the replica held at the start was durable (awaitDeliveredTail).
	durableSent := delivered
	for {
		// What is queued already joins this round, before a push is made
		// up: otherwise, while flushes elsewhere keep the durable version
		// ahead of delivered, push follows push and the replica's own
		// replies are never read (TestQueuedRepliesAreNotStarvedByPushes).
		if queue != nil && len(waiting) < streamQueueMax {
			var open bool
			if waiting, open = takeQueued(queue, waiting); !open {
				queue = nil
			}
		}
		durable, failed, changed := s.durable.watch()
		if failed != nil {
			return status.Error(codes.Unavailable, failed.Error())
		}
		through, deliverable := s.deliveryBound(d, durable)
		ready, waiting = TakeSendable(waiting, d.repliesBound(durable, through), queued.dependency, ready[:0])
		if PushDue(d.push, len(ready), delivered, through) || d.durableNewsDue(len(ready), delivered, durable, durableSent) {
			ready = append(ready, queued{received: time.Now()}) // a push: a catch-up of our own
		}
		if len(ready) > 0 {
			var err error
			if delivered, err = s.sendReady(ctx, stream, st, ready, delivered, through, durable, d); err != nil {
				return err
			}
			durableSent = durable
			continue
		}
		if queue == nil && len(waiting) == 0 {
			return nil // the replica closed its side and every reply went out
		}
		var more <-chan queued
		if len(waiting) < streamQueueMax {
			more = queue
		}
		var flushed, decided <-chan struct{}
		if len(waiting) > 0 || d.push || (d.earlyEntries && delivered > durableSent) {
			flushed = changed
		}
		if d.push || (d.earlyReplies && len(waiting) > 0) {
			decided = deliverable
		}
		select {
		case q, ok := <-more:
			if !ok {
				queue = nil
				continue
			}
			waiting = append(waiting, q) // the rest of the queue joins at the top of the loop
		case <-flushed:
		case <-decided:
		case <-ctx.Done():
			return status.Error(codes.Unavailable, ctx.Err().Error())
		}
	}
}

// deliveryBound is how far entries may be sent on a stream when the
// durable version is durable: beyond it, to the deliverable version, if
// the stream takes entries early (early.go); then deliverable is closed
// when that version advances (nil otherwise).
func (s *Service) deliveryBound(d delivery, durable uint64) (through uint64, deliverable <-chan struct{}) {
	if !d.earlyEntries {
		return durable, nil
	}
	v, _, changed := s.deliverable.watch()
	return max(durable, v), changed
}

// dependency is the version that must be durable (delivered, for a
// stream that takes replies early) before q is sent.
func (q queued) dependency() uint64 { return q.waitFor }

// sendReady sends replies whose dependencies are durable, once the orderer
// lets them go (in a group, after their aborts are confirmed), with the
// entries up to through the replica has not been sent, and returns the
// highest version delivered.
func (s *Service) sendReady(ctx context.Context, stream pb.Certifier_CertifyServer, st *streamState, ready []queued, delivered, through, durable uint64, d delivery) (uint64, error) {
	if err := s.order.maySend(ctx, ready); err != nil {
		return delivered, err
	}
	if through > durable {
		s.order.sentEarly(st.tenure, through) // SyncVersion covers what a replica may show
	}
	delivered, err := s.send(stream, st, ready, delivered, through, durable)
	st.release(answered(ready))
	if errors.Is(err, wal.ErrCompacted) { // retention removed what this replica still needed
		err = errBehindLog(st.session.name, delivered, s.log.StartsAfter())
	}
	return delivered, err
}

// takeQueued appends what is already queued to waiting, without waiting,
// up to streamQueueMax; open is false once the queue is closed and empty.
func takeQueued(queue <-chan queued, waiting []queued) (_ []queued, open bool) {
	for len(waiting) < streamQueueMax {
		select {
		case q, ok := <-queue:
			if !ok {
				return waiting, false
			}
			waiting = append(waiting, q)
		default:
			return waiting, true
		}
	}
	return waiting, true
}

func answered(batch []queued) int64 {
	n := int64(0)
	for _, q := range batch {
		if q.reply != nil {
			n++
		}
	}
	return n
}

// send delivers entries (delivered, through], then the replies
// (SendReplies).
func (s *Service) send(stream pb.Certifier_CertifyServer, st *streamState, batch []queued, delivered, through, durable uint64) (uint64, error) {
	var replies []*pb.CertifyReply
	for _, q := range batch {
		if q.reply != nil {
			replies = append(replies, q.reply)
		}
	}
	var sendStart time.Time
	delivered, err := SendReplies(s.entriesUpToBytes, delivered, through, durable, replies, func(m *pb.CertifyStreamReply) error {
		if err := s.order.mayDeliver(st.tenure); err != nil {
			return err
		}
		if st.epochToSend {
			m.Epoch, m.EpochFirstVersion, st.epochToSend = st.epoch, st.epochFirst, false
		}
		sendStart = time.Now()
		return stream.Send(m)
	})
	if err != nil {
		return delivered, err
	}
	now := time.Now()
	if s.stages != nil {
		s.logStages(batch, sendStart, now)
	}
	for _, q := range batch {
		if q.reply != nil {
			s.metrics.observeReply(q.reply, now.Sub(q.received))
		}
	}
	return delivered, nil
}

// messageEntryBytesMax bounds the entries packed into one message. A single
// larger entry travels alone: the gRPC message limit is set above the
// largest writeset (grpcMessageBytesMax).
const messageEntryBytesMax = 4 << 20

// readChunkEntries and readChunkBytes bound what is read from memory or
// disk at once: a stream whose replica does not read (it cannot apply)
// keeps no more than that.
const (
	readChunkEntries = 1024
	readChunkBytes   = messageEntryBytesMax
)

// chunkEntries is ChunkEntries over the service's recent ring and log.
func (s *Service) chunkEntries(after, upTo uint64, emit func(entries [][]byte, last uint64) error) error {
	return ChunkEntries(s.entriesUpToBytes, after, upTo, emit)
}

func (s *Service) logStages(batch []queued, sendStart, sent time.Time) {
	for _, q := range batch {
		if q.reply != nil {
			s.stages.reply(replyStages{origin: q.reply.Txn.GetOrigin(), seq: q.reply.Txn.GetSeq(), version: q.reply.CommitVersion,
				received: unixNano(q.received), decided: unixNano(q.decided), sendStart: unixNano(sendStart), at: unixNano(sent)})
		}
	}
}
