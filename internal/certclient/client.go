// Package certclient is the agent's side of the certifier API: one Certify
// stream per replica, shared by all of the replica's sessions.
//
// Calls to Certify from many goroutines are pipelined on the stream and
// coalesced into as few messages as the sender can: while one message is on
// the wire, the next one collects everything that arrived meanwhile. Entries
// (committed versions) arrive in version order and are handed to the
// OnEntries callback before the reply that depends on them, which is what the
// agent's commit order (internal/agent/order) needs.
//
// When the stream breaks (certifier restarted, leader changed), the client
// reopens it from the highest version it was delivered and sends again every
// request still unanswered, with the same transaction id. The certifier
// answers a transaction it already committed with its original version
// (certification.Outcome.Duplicate), so a request is never committed twice
// and never silently dropped; its caller only sees a delay. A pending call
// whose transaction shows up in the delivered entries is answered from them,
// so the outcome holds even if the certifier has forgotten the transaction
// id. Certify returns an error (ErrOutcomeUnknown) only when its context
// ends first or the client is closed.
//
// # Certifier groups
//
// Target may name every member of a certifier group, comma-separated. The
// client keeps its stream on the leader: a member that does not lead
// refuses the stream and names the leader in the trailer
// (certifier.LeaderTrailer), which the client dials next, at once; with no
// name it tries the next member. When the leader dies or loses its
// leadership mid-flight, the pending requests are re-sent to the next
// leader as after any reconnection: the new leader has applied its whole
// log before it certifies, so a transaction the old leader committed is
// answered with its version (Duplicate), and one it never got committed is
// certified anew. The outcome is never guessed: 40001 reaches a client only
// for a transaction that certainly did not commit.
package certclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/grpcbuf"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// ErrOutcomeUnknown means the caller gave up waiting: the transaction may or
// may not have committed. Its version, if any, will still be delivered as an
// entry.
var ErrOutcomeUnknown = errors.New("certification outcome unknown: the certifier did not answer in time")

// Options configures a Client.
type Options struct {
	// Target is the certifier's address, host:port, or the addresses of
	// every member of a certifier group, comma-separated.
	Target         string
	Replica        string // this replica's name
	ReplicaVersion uint64 // versions up to here are not delivered again
	// AppliedVersion, when set, is the replica's durable version to report
	// from the first message on (SetAppliedVersion).
	AppliedVersion *uint64
	// Push asks the certifier to send every entry as soon as it is
	// durable (OpenSession.push), not only with replies and catch-ups.
	Push bool
	// EarlyDelivery takes the commit point (OpenSession.early_delivery):
	// entries and commit replies come once decided, before they are
	// durable, and a pending call is settled from its entry at once.
	EarlyDelivery bool
	// StatusAddr is host:port of the replica's HTTP listener, for the
	// certifier to list (OpenSession.status_addr); empty: none.
	StatusAddr string
	// OnEntries receives committed entries in version order, contiguous,
	// still encoded (Entry.Decode parses one), from one goroutine, before
	// the replies that depend on them. It must not call back into the
	// Client. It is also called with no entries when only the certifier's
	// durable version is news. An error ends the stream with the entries
	// not delivered: the next stream delivers them again.
	OnEntries func(entries []logentry.Entry, durableVersion uint64) error
	// OnRefused is told when the certifier refuses the replica's session
	// (FailedPrecondition) because the replica cannot catch up from it: its
	// log no longer holds the versions the replica needs (log retention,
	// pb.NeedsStateTransfer), or the replica holds versions the log does
	// not (pb.NeedsRewind). The client keeps trying meanwhile. Called from the client's
	// goroutine; it must not call back into the Client.
	OnRefused func(err error)
	// OnEpoch, if set, is told the epoch the certifier certifies in and
	// the first version it may certify in it, as an admitted stream's
	// messages carry them (CertifyStreamReply.epoch).
	OnEpoch func(epoch, firstVersion uint64)
	// History, when set, returns the replica's history (its runs) up to
	// the version the session opens at, everything OnEntries was given
	// included; the client sends it with every session it opens
	// (OpenSession.history), and the certifier admits the session only if
	// it is a prefix of its log. Nil: none is sent.
	History func() []*pb.EpochRun
	Logger  *slog.Logger
	// MessageBytesMax is the largest gRPC message accepted.
	MessageBytesMax int
	// ReconnectDelay is the first pause between attempts to reopen the
	// stream; it doubles up to a second.
	ReconnectDelay time.Duration
	DialOptions    []grpc.DialOption
}

type txnKey struct {
	origin string
	seq    uint64
}

type call struct {
	req    *pb.CertifyRequestEncoded
	reply  chan *pb.CertifyReply
	queued time.Time
}

// Client is safe for concurrent use.
type Client struct {
	opts  Options
	peers *members

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call  // sent or to be sent, not answered
	byTxn   map[txnKey]uint64 // pending request ids by transaction id
	// undurable are pending calls found in entries delivered before they
	// were durable (settleFromLog), settled once the stream's durable
	// version passes them, forgotten when the stream ends.
	undurable []settlement
	outbox    []*pb.CertifyRequestEncoded
	catchUp   bool
	pause     bool // flow control: this replica asks the others to wait
	paused    bool // the pause state the certifier was last told
	// applied is the replica's durable version
	// (CertifyStreamRequest.applied_version), sent when it changes and at
	// the start of every session, not with every message: a certifier
	// older than the field decodes a message with it on its slow path.
	// nil until SetAppliedVersion.
	applied     *uint64
	appliedSent bool // the certifier was told the current applied
	delivered   uint64
	connected   bool
	received    bool      // something arrived on the current stream
	heardAt     time.Time // when the current stream opened or last brought something
	// handing: OnEntries runs (it may wait for room): the stream is not
	// read meanwhile, which is no stall of the certifier's.
	handing bool
	wake    chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// New connects lazily: it returns at once and keeps trying to open the
// stream in the background until Close.
func New(opts Options) (*Client, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MessageBytesMax == 0 {
		opts.MessageBytesMax = DefaultMessageBytesMax
	}
	if opts.ReconnectDelay == 0 {
		opts.ReconnectDelay = 20 * time.Millisecond
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MessageBytesMax), grpc.MaxCallSendMsgSize(opts.MessageBytesMax),
			grpc.ForceCodecV2(grpcbuf.Codec{})),
		// Entries flow to every replica: see the server's window sizes.
		grpc.WithInitialWindowSize(8 << 20), grpc.WithInitialConnWindowSize(32 << 20),
		experimental.WithBufferPool(grpcbuf.Shared), // buffers not zeroed: see grpcbuf
	}, opts.DialOptions...)
	peers, err := newMembers(opts.Target, dial)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		opts: opts, peers: peers,
		pending: make(map[uint64]*call), byTxn: make(map[txnKey]uint64), delivered: opts.ReplicaVersion, applied: opts.AppliedVersion,
		wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// API gives direct access to the unary and Fetch calls, on the member the
// stream is on (the leader, as far as the client knows).
func (c *Client) API() pb.CertifierClient { return currentAPI{c.peers} }

// Close ends the stream; calls still waiting return ErrOutcomeUnknown.
func (c *Client) Close() error {
	c.cancel()
	<-c.done
	return c.peers.close()
}

// Certify sends a request and waits for its reply. RequestId is assigned
// here. The writeset is encoded here, in the caller's goroutine (the
// certifier reads it encoded: CertifyRequestEncoded).
func (c *Client) Certify(ctx context.Context, req *pb.CertifyRequest) (*pb.CertifyReply, error) {
	writeset, err := proto.Marshal(req.Writeset)
	if err != nil {
		return &pb.CertifyReply{Txn: req.Txn, Decision: pb.Decision_DECISION_ABORT, AbortReason: pb.AbortReason_ABORT_REASON_INVALID,
			Detail: fmt.Sprintf("the writeset cannot be encoded: %v", err)}, nil
	}
	enc := &pb.CertifyRequestEncoded{Txn: req.Txn, StartVersion: req.StartVersion, Writeset: writeset, Streamed: req.Streamed}
	if r := c.oversized(enc, len(req.GetWriteset().GetChanges())); r != nil {
		return r, nil
	}
	reply, err := c.certify(ctx, nil, enc)
	req.RequestId = enc.RequestId
	return reply, err
}

// CertifyEncoded is Certify for a request whose writeset is already
// encoded (an encoded Writeset): what a caller that builds writesets as
// bytes uses, the load generator among them. RequestId is assigned here. The
// request is not copied: do not change it afterwards.
func (c *Client) CertifyEncoded(ctx context.Context, req *pb.CertifyRequestEncoded) (*pb.CertifyReply, error) {
	if r := c.oversized(req, -1); r != nil {
		return r, nil
	}
	return c.certify(ctx, nil, req)
}

// CertifyEncodedWithin is CertifyEncoded that also gives up, as when ctx
// ends, once expired delivers. A caller that certifies one request after
// another passes the channel of one timer it resets for each: a context
// with a deadline would cost every request a context, a timer and a place
// among its parent's children.
func (c *Client) CertifyEncodedWithin(ctx context.Context, expired <-chan time.Time, req *pb.CertifyRequestEncoded) (*pb.CertifyReply, error) {
	if r := c.oversized(req, -1); r != nil {
		return r, nil
	}
	return c.certify(ctx, expired, req)
}

// certify sends req and waits for its reply, until ctx ends or expired
// delivers (nil: never).
func (c *Client) certify(ctx context.Context, expired <-chan time.Time, req *pb.CertifyRequestEncoded) (*pb.CertifyReply, error) {
	cl := &call{req: req, reply: make(chan *pb.CertifyReply, 1), queued: time.Now()}
	c.mu.Lock()
	c.nextID++
	req.RequestId = c.nextID
	c.pending[req.RequestId] = cl
	c.byTxn[txnKey{req.Txn.GetOrigin(), req.Txn.GetSeq()}] = req.RequestId
	c.outbox = append(c.outbox, req)
	c.mu.Unlock()
	c.signal()
	select {
	case r := <-cl.reply:
		return r, nil
	case <-ctx.Done():
		c.forget(req.RequestId)
		return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, ctx.Err())
	case <-expired:
		c.forget(req.RequestId)
		return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, context.DeadlineExceeded)
	case <-c.ctx.Done():
		return nil, fmt.Errorf("%w: client closed", ErrOutcomeUnknown)
	}
}

// RequestCatchUp asks the certifier for every durable entry not yet
// delivered (bounded staleness for an idle replica). It does not wait.
func (c *Client) RequestCatchUp() {
	c.mu.Lock()
	c.catchUp = true
	c.mu.Unlock()
	c.signal()
}

// SetPause says whether this replica has fallen behind and asks the
// certifier to hold the other replicas' requests (flow control,
// CertifyStreamRequest.pause). A change is sent at once; every later
// message repeats it. It does not wait.
func (c *Client) SetPause(pause bool) {
	c.mu.Lock()
	c.pause = pause
	changed := c.pause != c.paused
	c.mu.Unlock()
	if changed {
		c.signal()
	}
}

// SetAppliedVersion records the replica's durable version (every version
// up to it committed and safe from a crash of its database), which the
// certifier's log retention waits for. A change is sent with the next
// message, at the latest with the next catch-up request, and every
// session opens with it.
func (c *Client) SetAppliedVersion(v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applied == nil || *c.applied != v {
		c.applied, c.appliedSent = &v, false
	}
}

// Delivered is the highest version handed to OnEntries.
func (c *Client) Delivered() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.delivered
}

// Connected reports whether the stream is open now.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	c.takeLocked(id)
	c.mu.Unlock()
}

// takeLocked removes and returns a pending call.
func (c *Client) takeLocked(id uint64) *call {
	cl := c.pending[id]
	if cl != nil {
		delete(c.pending, id)
		delete(c.byTxn, txnKey{cl.req.Txn.GetOrigin(), cl.req.Txn.GetSeq()})
	}
	return cl
}

func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run keeps one stream open at a time until Close.
func (c *Client) run() {
	defer close(c.done)
	delay := c.opts.ReconnectDelay
	for c.ctx.Err() == nil {
		target := c.peers.current()
		received, leader, err := c.session()
		if c.ctx.Err() != nil {
			return
		}
		if received {
			delay = c.opts.ReconnectDelay
		}
		if status.Code(err) == codes.FailedPrecondition && c.opts.OnRefused != nil {
			c.opts.OnRefused(err)
		}
		if c.peers.follow(leader) {
			// Redirected to the leader by a member: go there at once.
			c.opts.Logger.Info("certifier stream: following the leader", "from", target, "to", leader)
			continue
		}
		c.opts.Logger.Warn("certifier stream ended; reopening", "target", target, "next", c.peers.current(), "err", err, "retry_in", delay)
		select {
		case <-time.After(delay):
		case <-c.ctx.Done():
			return
		}
		delay = min(2*delay, c.peers.reconnectDelayMax())
	}
}

// session opens a stream, re-sends every unanswered request, and pumps
// messages until the stream fails. It reports whether anything was
// received (a stream that fails at once is not progress: the reconnect
// delay keeps growing). It returns only after its receiving goroutine has
// stopped, so OnEntries is never called by two streams at once.
func (c *Client) session() (bool, string, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	stream, err := c.peers.api().Certify(ctx)
	if err != nil {
		return false, "", err
	}
	c.mu.Lock()
	open := &pb.CertifyStreamRequestEncoded{Open: &pb.OpenSession{Replica: c.opts.Replica, ReplicaVersion: c.delivered, Push: c.opts.Push,
		StatusAddr: c.opts.StatusAddr, EarlyDelivery: c.opts.EarlyDelivery},
		CatchUp: true, Pause: c.pause, AppliedVersion: c.applied}
	if c.opts.History != nil {
		open.Open.History = c.opts.History()
	}
	c.paused, c.appliedSent = c.pause, true
	c.outbox = c.outbox[:0]
	for _, cl := range c.pending {
		c.outbox = append(c.outbox, cl.req)
	}
	sortByRequestID(c.outbox)
	c.undurable = c.undurable[:0] // the versions may have failed with the stream
	c.received = false
	c.heardAt = time.Now()
	c.mu.Unlock()
	if err := stream.SendMsg(open); err != nil {
		return false, "", err
	}
	recvErr := make(chan error, 1)
	go func() { recvErr <- c.receive(stream) }()
	err, receiverDone := c.pump(ctx, stream, recvErr)
	cancel()
	if !receiverDone {
		<-recvErr
	}
	c.mu.Lock()
	c.connected = false
	received := c.received
	c.mu.Unlock()
	return received, leaderHint(stream), err
}

// pump sends what callers queue until the stream or the client ends. It
// reports whether the receiving goroutine has already ended.
func (c *Client) pump(ctx context.Context, stream pb.Certifier_CertifyClient, recvErr <-chan error) (error, bool) {
	c.signal()
	var stallCheck <-chan time.Time
	if c.peers.several() {
		t := time.NewTicker(stallCheckInterval)
		defer t.Stop()
		stallCheck = t.C
	}
	for {
		select {
		case err := <-recvErr:
			return err, true
		case <-c.wake:
		case now := <-stallCheck:
			if c.stalled(now) {
				return errStalled, false
			}
			continue
		case <-ctx.Done():
			return ctx.Err(), false
		}
		if msg := c.takeOutbox(); msg != nil {
			// CertifyStreamRequestEncoded is CertifyStreamRequest on the wire.
			if err := stream.SendMsg(msg); err != nil {
				return err, false
			}
		}
	}
}

func (c *Client) takeOutbox() *pb.CertifyStreamRequestEncoded {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.outbox) == 0 && !c.catchUp && c.pause == c.paused && c.appliedSent {
		return nil
	}
	msg := &pb.CertifyStreamRequestEncoded{Requests: c.outbox, CatchUp: c.catchUp, Pause: c.pause}
	if !c.appliedSent {
		msg.AppliedVersion = c.applied
	}
	c.outbox = nil
	c.catchUp = false
	c.paused, c.appliedSent = c.pause, true
	return msg
}

func (c *Client) receive(stream pb.Certifier_CertifyClient) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.connected, c.received, c.heardAt, c.handing = true, true, time.Now(), true
		c.mu.Unlock()
		if msg.Epoch != 0 && c.opts.OnEpoch != nil {
			c.opts.OnEpoch(msg.Epoch, msg.EpochFirstVersion)
		}
		err = c.deliver(msg.Entries, msg.DurableVersion)
		c.mu.Lock()
		c.heardAt, c.handing = time.Now(), false
		c.mu.Unlock()
		if err != nil {
			return err
		}
		c.answer(msg.Replies)
	}
}

// answer hands replies to their callers, under one lock for the batch.
func (c *Client) answer(replies []*pb.CertifyReply) {
	if len(replies) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range replies {
		if cl := c.takeLocked(r.RequestId); cl != nil {
			cl.reply <- r // buffered, and taken once: never blocks
		}
	}
}

// deliver checks that entries continue the delivered sequence and hands them
// on (Continuing).
func (c *Client) deliver(raw [][]byte, durable uint64) error {
	c.mu.Lock()
	delivered := c.delivered
	c.mu.Unlock()
	entries, err := Continuing(raw, delivered)
	if err != nil {
		return err
	}
	if c.opts.OnEntries != nil {
		if err := c.opts.OnEntries(entries, durable); err != nil {
			return err
		}
	}
	if len(entries) > 0 {
		c.mu.Lock()
		c.delivered = entries[len(entries)-1].Version
		c.mu.Unlock()
	}
	c.settleFromLog(entries, durable)
	return nil
}

// Continuing reads the versions of encoded entries that must continue a
// delivered sequence ending at delivered. A gap or a repeat is the
// certifier's bug or a lost history: the caller drops the stream (and
// reopens it from what was delivered) rather than applying it.
func Continuing(raw [][]byte, delivered uint64) ([]logentry.Entry, error) {
	entries := make([]logentry.Entry, len(raw))
	for i, b := range raw {
		v, err := logentry.VersionOf(b)
		if err != nil {
			return nil, err
		}
		if want := delivered + 1 + uint64(i); v != want {
			return nil, fmt.Errorf("certifier delivered version %d where %d was expected", v, want)
		}
		entries[i] = logentry.Entry{Version: v, Bytes: b}
	}
	return entries, nil
}

// settleFromLog answers pending calls whose transaction is in the delivered
// entries: it committed, at that version. This is how a call re-sent after
// a reconnection learns its outcome even when the certifier no longer
// remembers the transaction id (it slid out of the window) and would answer
// the re-sent request with an abort. A streamed transaction (a span of
// entries) is settled at its last entry, with its first version.
//
// An entry above the durable version (delivered early) settles its call
// only once durable reaches it, unless the client takes the commit point
// (Options.EarlyDelivery): the entry may still fail, and otherwise a
// reply says committed only for what is durable.
func (c *Client) settleFromLog(entries []logentry.Entry, durable uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		c.undurable = c.undurable[:0]
		return
	}
	c.settleDurable(durable)
	for _, e := range entries {
		h, err := logentry.RawHeaderOf(e.Bytes) // allocates nothing: every entry is looked at
		if err != nil || (h.InSpan() && h.Version != h.SpanLast) {
			continue
		}
		id, ok := c.byTxn[txnKey{string(h.Origin), h.Seq}]
		if !ok {
			continue
		}
		st := settlement{id: id, version: e.Version, first: h.SpanFirst}
		if e.Version > durable && !c.opts.EarlyDelivery {
			c.undurable = append(c.undurable, st)
			continue
		}
		c.settleLocked(st)
	}
}

// settlement is a pending call's commit found in the log.
type settlement struct {
	id, version, first uint64
}

// settleDurable settles the calls in undurable that durable has reached.
func (c *Client) settleDurable(durable uint64) {
	kept := c.undurable[:0]
	for _, st := range c.undurable {
		if st.version > durable {
			kept = append(kept, st)
			continue
		}
		c.settleLocked(st)
	}
	c.undurable = kept
}

// settleLocked answers a pending call, if it is still pending, as
// committed at its settlement's version.
func (c *Client) settleLocked(st settlement) {
	cl := c.takeLocked(st.id)
	if cl == nil {
		return // answered meanwhile
	}
	cl.reply <- &pb.CertifyReply{RequestId: st.id, Txn: cl.req.Txn, Decision: pb.Decision_DECISION_COMMIT, CommitVersion: st.version,
		FirstVersion: st.first}
}

func sortByRequestID(reqs []*pb.CertifyRequestEncoded) {
	slices.SortFunc(reqs, func(a, b *pb.CertifyRequestEncoded) int { return cmp.Compare(a.RequestId, b.RequestId) })
}
