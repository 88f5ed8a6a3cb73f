package certifier

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
)

// Streamed writesets in a certifier group. The fragments never travel in
// Raft (its log keeps every entry since the last snapshot in memory, on
// every member): the leader spools them as a single certifier does and
// copies each one, as it spools it, to every other voter over StageCopy,
// which spools it under the same transaction id. Stage succeeds once the
// leader's spool and the copies of enough followers for a majority are
// complete and synced (a follower replies to StageCopy after its sync);
// Raft then carries only the decision, and every member writes the span
// into its versioned log from its own copy, or fetches it from a member
// that did (group_writer.go).
//
// A copy has a queue of stageCopyQueueFragments. A follower whose queue
// is full is dropped from the stage (its StageCopy cancelled) rather than
// buffered for, and counts as not holding it: at once if the members that
// took the fragment make a majority with one to spare, else after the
// leader waited stageCopyStallMax for room. The spare is there because a
// member counts as having taken a fragment once it is queued: a follower
// that just died still takes fragments until its stream fails, and
// dropping a slow one for it would leave the stage short of a majority.
// So the agent's stage slows to the pace of the followers a majority
// needs plus one, never to a slower one's; in a group of three, a
// follower that stops reading costs a stage stageCopyStallMax.

// Request metadata of a StageCopy: the sender's member id and term.
const (
	stageCopyMemberKey = "tashkent-member"
	stageCopyTermKey   = "tashkent-term"
)

// stageCopyQueueFragments bounds the fragments waiting to be sent to one
// member: with the extension's 4 MiB fragments, 16 MiB per follower.
const stageCopyQueueFragments = 4

// stageCopyStallMax bounds how long the leader waits for room in the
// queues of the copies a majority needs: a follower that takes longer to
// take a fragment (a member that stopped reading) is dropped from the
// stage.
const stageCopyStallMax = time.Second

// stageCopyFinishMax bounds how long a copy may take once the agent sent
// its last fragment: the follower writes what is still queued and syncs.
const stageCopyFinishMax = 30 * time.Second

// admitStage: only the leader stages; another member refuses at once,
// naming the leader, as it refuses a Certify stream.
func (g *groupMember) admitStage(stream grpc.ServerStream) error { return g.checkLeader(stream) }

// copyStage starts the copies of a stage to every other voter.
func (g *groupMember) copyStage(txn *pb.TxnID) *stageCopies {
	st := g.node.Status()
	g.peers.retain(g.node.Members())
	c := &stageCopies{voters: len(st.Voters), results: make(chan *stageCopy, len(st.Voters)), g: g, txn: txn}
	md := senderMetadata(st)
	for _, id := range st.Voters {
		if id == st.ID {
			continue
		}
		client, err := g.peers.client(g.node.AddrOf(id))
		if err != nil {
			g.s.cfg.Logger.Warn("certifier group: cannot copy a stage to a member", "member", id, "err", err)
			continue
		}
		ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), md))
		cp := &stageCopy{member: id, queue: make(chan []byte, stageCopyQueueFragments), cancel: cancel, ended: make(chan struct{})}
		c.copies = append(c.copies, cp)
		go cp.run(ctx, client, txn, c.results)
	}
	return c
}

// stageCopies are the copies of one stage to the other members. nil (a
// single certifier) copies nothing. add, cancel and wait are called from
// the stage's goroutine.
type stageCopies struct {
	g       *groupMember
	txn     *pb.TxnID
	voters  int
	copies  []*stageCopy
	results chan *stageCopy // each copy once it ended
	closed  bool            // the queues
}

// stageCopy is the copy to one member.
type stageCopy struct {
	member  uint64
	queue   chan []byte  // closed when the stage ends, whatever its outcome
	end     *pb.StageEnd // set before queue closes if the stage completed
	cancel  context.CancelFunc
	ended   chan struct{} // closed when the copy ended, whatever its outcome
	dropped bool          // fell behind (the stage's goroutine's)
	// Set before the copy is sent to results.
	reply *pb.StageReply
	err   error
}

// add queues a fragment for every copy still going. A copy whose queue
// is full is dropped at once when the copies that took the fragment make
// a majority with this member's spool and one to spare without it;
// otherwise the leader waits for room, up to stageCopyStallMax from when
// it found the queues full, and drops the copies that have none by then.
func (c *stageCopies) add(fragment []byte) {
	if c == nil {
		return
	}
	var full []*stageCopy
	holding := 1 // this member's spool
	for _, cp := range c.copies {
		if cp.dropped {
			continue
		}
		select {
		case cp.queue <- fragment:
			holding++
		case <-cp.ended: // failed: wait reports why
		default:
			full = append(full, cp)
		}
	}
	if len(full) > 0 {
		c.waitForRoom(full, fragment, holding)
	}
}

// waitForRoom gives fragment to the copies whose queues were full, while
// they are needed for a majority and a spare (holding: the members that
// have it).
func (c *stageCopies) waitForRoom(full []*stageCopy, fragment []byte, holding int) {
	majorityAndSpare := c.voters/2 + 2
	started := time.Now()
	timer := time.NewTimer(stageCopyStallMax)
	defer timer.Stop()
	stalled := false
	for _, cp := range full {
		if holding >= majorityAndSpare || stalled {
			c.drop(cp, time.Since(started))
			continue
		}
		select {
		case cp.queue <- fragment:
			holding++
		case <-cp.ended:
		case <-timer.C:
			stalled = true
			c.drop(cp, time.Since(started))
		}
	}
}

// drop ends a copy that fell behind: it counts as not holding the stage.
func (c *stageCopies) drop(cp *stageCopy, waited time.Duration) {
	cp.dropped = true
	cp.cancel()
	c.g.s.cfg.Logger.Warn("certifier group: a member fell behind the copy of a streamed writeset; it is dropped from this stage",
		"member", cp.member, "origin", c.txn.GetOrigin(), "seq", c.txn.GetSeq(), "waited", waited.Round(time.Millisecond))
}

// cancel ends every copy: the stage failed here. The contexts go first,
// and the queues close without a StageEnd: a copy never ends as if the
// stage were whole.
func (c *stageCopies) cancel() {
	if c == nil {
		return
	}
	c.cancelCopies()
	c.closeQueues(nil)
}

func (c *stageCopies) cancelCopies() {
	for _, cp := range c.copies {
		cp.cancel()
	}
}

// closeQueues ends the copies' queues, each copy's StageEnd set first
// (nil: the stage did not complete).
func (c *stageCopies) closeQueues(end *pb.StageEnd) {
	if c.closed {
		return
	}
	c.closed = true
	for _, cp := range c.copies {
		cp.end = end
		close(cp.queue)
	}
}

// wait waits until enough copies hold staged, synced, for a majority of
// the voters with this member's own spool, and returns nil; or, once that
// cannot be (copies failed, or did not finish within stageCopyFinishMax),
// cancels the rest and returns Unavailable. Copies still running when a
// majority holds the stage finish on their own, within the same bound.
func (c *stageCopies) wait(staged StagedWriteset) error {
	if c == nil {
		return nil
	}
	c.closeQueues(&pb.StageEnd{Fragments: staged.Fragments, Bytes: staged.Bytes})
	late := time.AfterFunc(stageCopyFinishMax, c.cancelCopies)
	needed, holding := c.voters/2+1, 1
	for ended := 0; holding < needed && ended < len(c.copies); ended++ {
		cp := <-c.results
		if c.holds(cp, staged) {
			holding++
		}
	}
	if holding >= needed {
		return nil
	}
	late.Stop()
	c.cancel()
	members := make([]uint64, len(c.copies))
	for i, cp := range c.copies {
		members[i] = cp.member
	}
	c.g.sendDiscards(c.txn, members) // before the agent may stage it again
	return status.Errorf(codes.Unavailable,
		"the streamed writeset reached %d of the %d members a commit needs (a majority of the certifier group's %d voters); nothing was staged, retry",
		holding, needed, c.voters)
}

// holds reports whether a copy that ended holds staged.
func (c *stageCopies) holds(cp *stageCopy, staged StagedWriteset) bool {
	log := c.g.s.cfg.Logger
	switch {
	case cp.dropped:
		return false
	case cp.err != nil:
		log.Warn("certifier group: the copy of a streamed writeset to a member failed", "member", cp.member,
			"origin", c.txn.GetOrigin(), "seq", c.txn.GetSeq(), "err", cp.err)
		return false
	case cp.reply.GetFragments() != staged.Fragments || cp.reply.GetBytes() != staged.Bytes:
		log.Error("certifier group: a member staged a copy that differs from the stage", "member", cp.member,
			"fragments", cp.reply.GetFragments(), "bytes", cp.reply.GetBytes(), "want_fragments", staged.Fragments, "want_bytes", staged.Bytes)
		return false
	}
	return true
}

// run sends the copy: the transaction id, the queued fragments until the
// queue closes, the StageEnd if the stage completed, and reads the
// member's reply.
func (cp *stageCopy) run(ctx context.Context, client pb.CertifierClient, txn *pb.TxnID, results chan<- *stageCopy) {
	defer func() { results <- cp }()
	defer close(cp.ended)
	defer cp.cancel()
	cp.reply, cp.err = cp.send(ctx, client, txn)
}

// errStageIncomplete: the stage ended here without completing.
var errStageIncomplete = errors.New("the stage did not complete")

func (cp *stageCopy) send(ctx context.Context, client pb.CertifierClient, txn *pb.TxnID) (*pb.StageReply, error) {
	stream, err := client.StageCopy(ctx)
	if err != nil {
		return nil, err
	}
	msg := &pb.StageRequest{Txn: txn}
	for {
		if err := stream.Send(msg); err != nil {
			if errors.Is(err, io.EOF) { // the member ended the stream: its status says why
				_, err = stream.CloseAndRecv()
			}
			return nil, err
		}
		select {
		case f, ok := <-cp.queue:
			if !ok {
				return cp.sendEnd(ctx, stream)
			}
			msg = &pb.StageRequest{Fragment: f}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// sendEnd closes a copy whose queue closed: with its StageEnd, if the
// stage completed and the copy was not cancelled.
func (cp *stageCopy) sendEnd(ctx context.Context, stream pb.Certifier_StageCopyClient) (*pb.StageReply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cp.end == nil {
		return nil, errStageIncomplete
	}
	if err := stream.Send(&pb.StageRequest{End: cp.end}); err != nil {
		if !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	return stream.CloseAndRecv()
}

// StageCopy receives the group leader's copy of a stage: spooled, synced
// and complete (a certify request may claim it should this member lead)
// before the reply. See the comment at the top of this file.
func (s *Service) StageCopy(stream pb.Certifier_StageCopyServer) error {
	if err := s.order.admitStageCopy(stream.Context()); err != nil {
		return err
	}
	first, txn, err := recvFirst(stream)
	if err != nil {
		return err
	}
	staged, err := s.receiveStage(stream, txn, first, 2*stageIdleMax, func([]byte) {}, copyEnded)
	if err != nil {
		return err
	}
	s.staging.complete(txn, time.Now())
	return stream.SendAndClose(&pb.StageReply{Fragments: staged.Fragments, Bytes: staged.Bytes})
}

// copyEnded is a StageCopy's end check: the copy is whole only if the
// leader said so (its StageEnd), and what it said is what arrived. A
// stream that ends without it is a stage the leader gave up.
func copyEnded(end *pb.StageEnd, staged StagedWriteset) error {
	switch {
	case end == nil:
		return status.Error(codes.Aborted, "the StageCopy ended without its StageEnd: the leader's stage did not complete")
	case end.Fragments != staged.Fragments || end.Bytes != staged.Bytes:
		return status.Errorf(codes.DataLoss, "the StageCopy carried %d fragments, %d bytes; its StageEnd says %d, %d",
			staged.Fragments, staged.Bytes, end.Fragments, end.Bytes)
	}
	return nil
}

// stageDiscardMax bounds a StageDiscard: a member that does not answer
// in time keeps its copy until it expires.
const stageDiscardMax = 5 * time.Second

// discardCopies tells every other voter that txn's stage is over without
// a commit, in the background: a lost word costs disk space until the
// copy expires, never correctness (a leader certifies only from its own
// copy, and a member without a committed span fetches it).
func (g *groupMember) discardCopies(txn *pb.TxnID) {
	st := g.node.Status()
	var members []uint64
	for _, id := range st.Voters {
		if id != st.ID {
			members = append(members, id)
		}
	}
	go g.sendDiscards(txn, members)
}

// sendDiscards sends StageDiscard for txn to members, at once, and waits
// for their answers (stageDiscardMax at most).
func (g *groupMember) sendDiscards(txn *pb.TxnID, members []uint64) {
	st := g.node.Status()
	md := senderMetadata(st)
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(g.stopped, md), stageDiscardMax)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range members {
		client, err := g.peers.client(g.node.AddrOf(id))
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := client.StageDiscard(ctx, &pb.StageDiscardRequest{Txn: txn}); err != nil {
				g.s.cfg.Logger.Debug("certifier group: a member did not discard its copy of a stage; it expires there",
					"member", id, "origin", txn.GetOrigin(), "seq", txn.GetSeq(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// StageDiscard removes this member's copy of a stage at the leader's
// word (see discardCopies).
func (s *Service) StageDiscard(ctx context.Context, req *pb.StageDiscardRequest) (*pb.StageDiscardReply, error) {
	if err := s.order.admitStageCopy(ctx); err != nil {
		return nil, err
	}
	if req.Txn.GetOrigin() == "" {
		return nil, status.Error(codes.InvalidArgument, "StageDiscard names no transaction")
	}
	return &pb.StageDiscardReply{Discarded: s.staging.discardCopy(txnOf(req.Txn))}, nil
}

// admitStageCopy takes a copy (or a StageDiscard) only from the member
// this one knows as the leader, in the term it knows: a deposed leader's
// is refused.
func (g *groupMember) admitStageCopy(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	sender, senderErr := strconv.ParseUint(firstValue(md, stageCopyMemberKey), 10, 64)
	term, termErr := strconv.ParseUint(firstValue(md, stageCopyTermKey), 10, 64)
	if senderErr != nil || termErr != nil {
		return status.Errorf(codes.FailedPrecondition, "certifier member %d: a StageCopy must name its sender and term (%s, %s)",
			g.node.ID(), stageCopyMemberKey, stageCopyTermKey)
	}
	st := g.node.Status()
	if sender == st.ID || sender != st.Leader || term != st.Term {
		return status.Errorf(codes.FailedPrecondition,
			"certifier member %d: StageCopy from member %d in term %d refused: this member knows member %d as the leader in term %d",
			st.ID, sender, term, st.Leader, st.Term)
	}
	return nil
}

// senderMetadata names this member and its term in a StageCopy or a
// StageDiscard (admitStageCopy).
func senderMetadata(st certgroup.Status) metadata.MD {
	return metadata.Pairs(stageCopyMemberKey, strconv.FormatUint(st.ID, 10), stageCopyTermKey, strconv.FormatUint(st.Term, 10))
}

func firstValue(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// memberConns are a group member's connections to the other members'
// Certifier service (StageCopy, and Fetch for a span it lacks), one per
// address, dialled with the group's options (its TLS), closed with it.
type memberConns struct {
	dial  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newMemberConns(node *certgroup.Node, limits Limits) *memberConns {
	dial := node.DialOptions()
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	size := grpcMessageBytesMax(limits) // a fragment, or a fetched entry, as large as a log entry
	dial = append(dial[:len(dial):len(dial)], grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(size), grpc.MaxCallSendMsgSize(size)))
	return &memberConns{dial: dial, conns: map[string]*grpc.ClientConn{}}
}

func (m *memberConns) client(addr string) (pb.CertifierClient, error) {
	if addr == "" {
		return nil, errors.New("no address known for the member")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.conns[addr]; c != nil {
		return pb.NewCertifierClient(c), nil
	}
	c, err := grpc.NewClient(addr, m.dial...)
	if err != nil {
		return nil, err
	}
	m.conns[addr] = c
	return pb.NewCertifierClient(c), nil
}

// retain closes the connections to addresses no member has any longer
// (members removed from the group).
func (m *memberConns) retain(members map[uint64]string) {
	live := make(map[string]bool, len(members))
	for _, addr := range members {
		live[addr] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for addr, c := range m.conns {
		if !live[addr] {
			c.Close()
			delete(m.conns, addr)
		}
	}
}

func (m *memberConns) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for addr, c := range m.conns {
		c.Close()
		delete(m.conns, addr)
	}
}
