package certifier

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certification"
)

// The orderer of one member of a certifier group (Tashkent §7.3; the
// group itself is internal/certgroup).
//
//   - Only the leader serves Certify streams. Other members refuse a stream
//     with Unavailable, "not the leader", and the leader's address in the
//     trailer (LeaderTrailer), which certclient follows.
//   - The leader certifies in the group's state (certgroup.Node.Certify);
//     a commit reply waits, as in a single certifier, until the durable
//     version covers it. Durable here means committed by Raft and applied
//     by this member: every member applies committed versions to its
//     versioned log (committed), so any member serves Fetch.
//   - An abort reply waits until the group confirmed this member still
//     leads (a ReadIndex after the decision): see certgroup.Core.
//   - When the member loses its leadership, every Certify stream ends, with
//     every reply not yet sent: a version it certified may never commit
//     (a failed version), and a later leader may give that version to
//     another transaction. The agents re-send to the new leader, which
//     answers from its log (Duplicate), or they settle from the entries
//     delivered to them.

// groupCatchUpWaitMax bounds how long a stream waits for this member to
// apply the versions its replica already holds.
const groupCatchUpWaitMax = 5 * time.Second

// LeaderTrailer is the trailer key of the leader's address on a refused
// Certify stream.
const LeaderTrailer = "tashkent-leader"

// leadership is a context per leadership of this member: cancelled when
// the leadership is lost, which ends the streams opened in it.
type leadership struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	tenure atomic.Uint64 // counts leaderships lost
}

// current is the context of the current leadership and its tenure. The
// tenure is read first: with a leadership lost meanwhile (lost moves the
// tenure first) it is the lost one's, whatever the context, and
// mayDeliver refuses every message of the stream.
func (l *leadership) current() (context.Context, uint64) {
	tenure := l.tenure.Load()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	return l.ctx, tenure
}

// lost ends the current leadership. The tenure moves first: a reply of
// an older tenure is never sent, whatever the durable version says then.
func (l *leadership) lost() {
	l.tenure.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
}

// groupMember is the orderer of one member of a certifier group.
type groupMember struct {
	s          *Service
	node       *certgroup.Node
	leadership leadership
	confirmed  *watermark // abort tickets confirmed by the group
	proposer   retentionProposer

	writer  *logWriter   // the versioned log's (group_writer.go)
	missing missingSpan  // the span the writer waits for, if any
	peers   *memberConns // to the other members (group_stage.go)
	stageMu sync.Mutex   // streamed requests' claims and decisions (decide)
	early   groupEarly   // delivery at the commit point (group_early.go)
	// stopped ends with the service: a fetch from another member.
	stopped     context.Context
	stopStopped context.CancelFunc
}

// newGroupMember fills the recent ring from the versioned log; the
// certification state is the group's, which the node recovers from its
// Raft log.
func newGroupMember(s *Service, node *certgroup.Node) (*groupMember, int, error) {
	g := &groupMember{s: s, node: node, confirmed: newWatermark(0), writer: newLogWriter(), peers: newMemberConns(node, s.cfg.Limits)}
	g.stopped, g.stopStopped = context.WithCancel(context.Background())
	restored, err := s.replay(s.windowBase(), nil)
	g.early.ringCommitted = s.log.LastVersion()
	return g, restored, err
}

func (g *groupMember) start() {
	s := g.s
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		g.writer.run(s.stop)
	}()
	go func() {
		<-s.stop
		g.stopStopped()
	}()
	g.node.Start(certgroup.Callbacks{
		Committed:      g.committed,
		LostLeadership: g.lostLeadership,
		Confirmed:      g.confirmed.advance,
		Failed:         s.fail,
		Restored:       g.restored,
		BeforeCompact:  g.beforeCompact,
		Retention:      g.retentionApplied,
	})
}

func (g *groupMember) close() {
	if err := g.node.Close(); err != nil {
		g.s.cfg.Logger.Error("close the certifier group's raft log", "err", err)
	}
	g.leadership.lost()
	g.peers.close()
}

// lostLeadership is Callbacks.LostLeadership: the replies not yet sent are
// dropped (leadership.lost), and the stages claimed here are given back,
// since their decisions may not stand; those that did are written by the
// writer all the same, the others expire.
func (g *groupMember) lostLeadership() {
	g.leadership.lost()
	g.dropSpeculation()
	g.s.staging.releaseAll(time.Now())
}

// beforeCompact is Callbacks.BeforeCompact: every version the Raft log is
// about to forget must be in the versioned log, synced. While the writer
// still has versions to write (a span being copied or fetched, seconds
// per GiB), the compaction waits for a later snapshot rather than the
// Raft loop for the writer: a stopped loop sends no heartbeats.
func (g *groupMember) beforeCompact() error {
	if !g.writer.idle() {
		return certgroup.ErrCompactLater
	}
	return g.s.log.SyncAll()
}

func (g *groupMember) versions() (version, lowWaterMark uint64) { return g.node.Versions() }

// missingSpanVersions is how many versions the span the writer waits for
// holds (0: none).
func (g *groupMember) missingSpanVersions() uint64 {
	if first, last := g.missing.get(); last != 0 {
		return last - first + 1
	}
	return 0
}

// admit refuses a stream at once on a member that does not lead, naming
// the leader for the client to follow. On the leader the stream lives as
// long as its leadership: replies certified in it are dropped, never
// sent, once it is lost. A replica that takes entries only once durable
// holds versions the group committed, so a new leader still applying its
// log reaches them soon; one that takes them early may hold failed
// versions too, and is waited for only up to what the leader applied
// (admitEarly).
func (g *groupMember) admit(stream grpc.ServerStream, open *pb.OpenSession) (context.Context, uint64, error) {
	if err := g.checkLeader(stream); err != nil {
		return nil, 0, err
	}
	lifetime, tenure := g.leadership.current()
	if open.GetReplica() != "" {
		ctx, cancel := context.WithTimeout(stream.Context(), groupCatchUpWaitMax)
		defer cancel()
		holds := open.ReplicaVersion
		if g.s.takesEarly(open) {
			applied, err := g.admitEarly(ctx)
			if err != nil {
				return nil, 0, err
			}
			holds = min(holds, applied)
		}
		_, err := g.s.durable.wait(ctx, holds)
		if err != nil {
			return nil, 0, status.Errorf(codes.Unavailable, "replica %q is at version %d, this certifier member has applied %d so far; retry",
				open.Replica, open.ReplicaVersion, g.s.DurableVersion())
		}
	}
	return lifetime, tenure, nil
}

// mayDeliver: see orderer.mayDeliver. leadership.lost moves the tenure
// before the versions committed in the same batch reach the ring and the
// durable version, so a message made from them finds it moved.
func (g *groupMember) mayDeliver(tenure uint64) error {
	if g.leadership.tenure.Load() != tenure {
		return status.Error(codes.Unavailable, "certifier leadership lost: this stream ends; re-send to the new leader")
	}
	return nil
}

// checkLeader refuses a stream on a member that does not lead, naming the
// leader for the client to follow.
func (g *groupMember) checkLeader(stream grpc.ServerStream) error {
	st := g.node.Status()
	if st.Role == "leader" {
		return nil
	}
	err := &certgroup.NotLeaderError{Leader: st.Leader}
	addr := ""
	if err.Leader != 0 {
		addr = g.node.AddrOf(err.Leader)
		stream.SetTrailer(metadata.Pairs(LeaderTrailer, addr))
	}
	return status.Errorf(codes.Unavailable, "certifier member %d: %v (leader address %q); the client retries there", g.node.ID(), err, addr)
}

// decide is singleLog's decide with the decisions taken by the group
// (certgroup.Node.CertifyAll: one entry into its lock per message). A
// request carries the leadership tenure it was decided in and, for an
// abort, the ticket its confirmation waits for (maySend). Streamed
// requests claim their stages as a single certifier's do (claimStages),
// under stageMu with their decisions, so that a request re-sent on
// another stream finds the stage or the decision; one whose stage is
// missing is looked up with its ticket (lookUp).
func (g *groupMember) decide(ctx context.Context, batch []certifying) (int, error) {
	if hasStreamed(batch) {
		g.stageMu.Lock()
		defer g.stageMu.Unlock()
		claimStages(batch, g.s.staging.claim)
	}
	tenure := g.leadership.tenure.Load()
	var toDecide []certgroup.Request
	var decided []int // batch index of each request in toDecide
	for i := range batch {
		c := &batch[i]
		c.tenure = tenure
		if c.reply == nil {
			toDecide = append(toDecide, groupRequest(c))
			decided = append(decided, i)
		}
	}
	if len(toDecide) == 0 {
		return len(batch), nil
	}
	results, err := g.node.CertifyAll(ctx, toDecide, func(results []certgroup.Result) {
		g.deliverDecided(batch, decided, results)
	})
	for k, r := range results {
		c := &batch[decided[k]]
		if c.lookedUp() {
			lookUp(c, func(certification.TxnID) (uint64, uint64, bool) { return r.FirstVersion, r.Version, r.Version != 0 })
		}
	}
	n := len(batch)
	if len(results) < len(decided) { // the requests from the first undecided one on
		n = decided[len(results)]
	}
	if err != nil {
		return n, g.streamError(ctx, err)
	}
	return n, nil
}

// groupRequest is a prepared request as the group decides it: looked up,
// certified as a span (its head: the transaction and the writeset it is
// certified on), or certified.
func groupRequest(c *certifying) certgroup.Request {
	r := certgroup.Request{Certify: c.request, Prefix: c.prefix}
	switch {
	case c.lookedUp():
		r.Lookup = true
		r.Certify.Txn = txnOf(c.req.Txn)
	case c.req.Streamed != nil:
		r.Span = &certgroup.SpanHead{Txn: c.req.Txn, Certified: c.req.Writeset, Bytes: c.staged.Bytes, Checksum: c.staged.Checksum}
	}
	return r
}

func hasStreamed(batch []certifying) bool {
	for i := range batch {
		if batch[i].req.Streamed != nil {
			return true
		}
	}
	return false
}

// streamError ends the stream: not the leader (with the leader's address),
// or a leader not ready in time. The client re-sends elsewhere or later.
func (g *groupMember) streamError(ctx context.Context, err error) error {
	var nl *certgroup.NotLeaderError
	if errors.As(err, &nl) {
		if stream := grpc.ServerTransportStreamFromContext(ctx); stream != nil {
			addr := g.node.AddrOf(nl.Leader)
			if addr != "" {
				_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, addr))
			}
		}
		return status.Errorf(codes.Unavailable, "certifier member %d: %v; the client retries at the leader", g.node.ID(), nl)
	}
	return status.Errorf(codes.Unavailable, "certifier member %d: %v", g.node.ID(), err)
}

// maySend holds a batch of replies until its aborts are confirmed, and
// drops it if the leadership it was decided in is gone.
func (g *groupMember) maySend(ctx context.Context, batch []queued) error {
	ticket := uint64(0)
	for _, q := range batch {
		ticket = max(ticket, q.ticket)
	}
	if ticket > 0 {
		if _, err := g.confirmed.wait(ctx, ticket); err != nil {
			return status.Error(codes.Unavailable, "certifier leadership lost before the abort was confirmed; re-send")
		}
	}
	tenure := g.leadership.tenure.Load()
	for _, q := range batch {
		if q.reply != nil && q.tenure != tenure {
			return status.Error(codes.Unavailable, "certifier leadership lost: replies not yet sent are dropped; re-send to the new leader")
		}
	}
	return nil
}

// syncVersion answers on the leader, once a ReadIndex issued after the
// call confirmed that it still leads in the term it read the version in
// (certgroup.Core.ReadVersion).
func (g *groupMember) syncVersion(ctx context.Context) (uint64, error) {
	v, ticket, term, err := g.node.ReadVersion(ctx)
	var notLeader *certgroup.NotLeaderError
	switch {
	case errors.As(err, &notLeader):
		if notLeader.Leader != 0 {
			grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, g.node.AddrOf(notLeader.Leader)))
		}
		return 0, status.Error(codes.Unavailable, "not the certifier group's leader")
	case err != nil:
		return 0, status.Errorf(codes.Unavailable, "the certifier group's leader is not ready: %v", err)
	}
	if _, err := g.confirmed.wait(ctx, ticket); err != nil {
		return 0, status.Errorf(codes.Unavailable, "the certifier's leadership was not confirmed: %v", err)
	}
	if _, now, leading := g.node.Leader(); !leading || now != term {
		return 0, status.Error(codes.Unavailable, "certifier leadership lost before it was confirmed; ask the new leader")
	}
	return max(v, g.early.sentVersion()), nil
}

// describe adds the member's view of the group to a status reply.
func (g *groupMember) describe(r *pb.StatusReply) {
	st := g.node.Status()
	r.MemberId, r.Role, r.Term, r.LeaderId = st.ID, st.Role, st.Term, st.Leader
	r.RaftIndex, r.AppliedIndex = st.LastIndex, st.AppliedIndex
	r.MissingSpanFirst, r.MissingSpanLast = g.missing.get()
	members := g.node.Members()
	r.LeaderAddr = members[st.Leader]
	ids := make([]uint64, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		r.Members = append(r.Members, &pb.Member{Id: id, Addr: members[id]})
	}
}

// certifies reports whether this member leads, and the group's term as
// it knows it.
func (g *groupMember) certifies() (bool, uint64) {
	_, term, leading := g.node.Leader()
	return leading, term
}
