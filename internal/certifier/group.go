package certifier

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// The service as one member of a certifier group (Tashkent §7.3; the
// group itself is internal/certgroup).
//
//   - Only the leader serves Certify streams. Other members refuse a stream
//     with Unavailable, "not the leader", and the leader's address in the
//     trailer (LeaderTrailer), which certclient follows.
//   - The leader certifies in the group's state (certgroup.Node.Certify);
//     a commit reply waits, as in a single certifier, until the durable
//     version covers it. Durable here means committed by Raft and applied
//     by this member: every member applies committed versions to its
//     versioned log (groupCommitted), so any member serves Fetch.
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
	epoch  atomic.Uint64
}

func (l *leadership) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	return l.ctx
}

// lost ends the current leadership. The epoch moves first: a reply whose
// epoch is older is never sent, whatever the durable version says then.
func (l *leadership) lost() {
	l.epoch.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
}

func (s *Service) startGroup() {
	s.confirmed = newWatermark(0)
	s.group.Start(certgroup.Callbacks{
		Committed:      s.groupCommitted,
		LostLeadership: s.leadership.lost,
		Confirmed:      s.confirmed.advance,
		Failed:         s.fail,
		Restored:       s.groupRestored,
		BeforeCompact:  s.log.SyncAll,
	})
}

// groupCommitted applies versions the group committed: to the recent ring
// and the versioned log (which serve delivery and Fetch), then to the
// durable watermark, which releases the replies waiting for them. After a
// restart the group replays its log after its snapshot: versions the
// versioned log already has are skipped (group_snapshot.go for a versioned
// log behind the snapshot).
func (s *Service) groupCommitted(entries []logentry.Entry) {
	last := s.log.LastVersion()
	records := make([]wal.Entry, 0, len(entries))
	s.mu.Lock()
	for _, e := range entries {
		if e.Version <= last {
			continue
		}
		s.recent.add(e)
		records = append(records, wal.Entry{Version: e.Version, Payload: e.Bytes})
	}
	s.mu.Unlock()
	if len(records) == 0 {
		return
	}
	if err := s.log.Append(records); err != nil {
		s.fail(fmt.Errorf("versioned log append of versions %d..%d: %w", records[0].Version, records[len(records)-1].Version, err))
		return
	}
	syncs, synced := s.group.FsyncStats()
	s.stats.fsyncs.Store(syncs)
	s.stats.loggedEntries.Store(synced)
	s.durable.advance(records[len(records)-1].Version)
	s.applyRetention(records[len(records)-1].Version)
}

// checkLeader refuses a stream on a member that does not lead, naming the
// leader for the client to follow.
func (s *Service) checkLeader(stream grpc.ServerStream) error {
	st := s.group.Status()
	if st.Role == "leader" {
		return nil
	}
	return s.notLeader(stream, &certgroup.NotLeaderError{Leader: st.Leader})
}

func (s *Service) notLeader(stream grpc.ServerStream, err *certgroup.NotLeaderError) error {
	addr := ""
	if err.Leader != 0 {
		addr = s.group.AddrOf(err.Leader)
		stream.SetTrailer(metadata.Pairs(LeaderTrailer, addr))
	}
	return status.Errorf(codes.Unavailable, "certifier member %d: %v (leader address %q); the client retries there", s.group.ID(), err, addr)
}

// certifyMessageInGroup is certifyMessage for a member of a group: the
// same prepare (keys read from the encoded writeset, which goes into the
// log entry as it came) and answer, with the decisions taken by the group
// (certgroup.Node.CertifyAll: one entry into its lock per message). A
// reply carries the leadership epoch it was decided in and, for an abort,
// the ticket its confirmation waits for (groupMaySend). An error ends the
// stream after the requests decided before it are queued.
func (s *Service) certifyMessageInGroup(ctx context.Context, st *streamState, reqs []*pb.CertifyRequestEncoded, now time.Time, queue chan<- queued) error {
	epoch := s.leadership.epoch.Load()
	batch := make([]certifying, len(reqs))
	var toDecide []certgroup.Request
	var decided []int // batch index of each request in toDecide
	for i, req := range reqs {
		batch[i] = s.prepare(req, !st.acquire())
		if c := &batch[i]; c.reply == nil {
			toDecide = append(toDecide, certgroup.Request{Certify: c.request, Prefix: c.prefix, Lookup: c.overloaded})
			if c.overloaded {
				toDecide[len(toDecide)-1].Certify.Txn = txnOf(req.Txn)
			}
			decided = append(decided, i)
		}
	}
	var results []certgroup.Result
	var err error
	if len(toDecide) > 0 {
		results, err = s.group.CertifyAll(ctx, toDecide)
	}
	tickets := make([]uint64, len(batch))
	for k, r := range results {
		c := &batch[decided[k]]
		c.outcome, c.lowWaterMark, c.latest, c.committedBefore = r.Outcome, r.LowWaterMark, r.Latest, r.Version
		tickets[decided[k]] = r.Ticket
	}
	stop := len(batch) // requests from stop on were not decided: the stream ends with err
	if len(results) < len(decided) {
		stop = decided[len(results)]
	}
	for i := range batch[:stop] {
		q := queued{received: now, epoch: epoch, ticket: tickets[i]}
		q.reply, q.waitFor = s.answer(&batch[i])
		if e := put(ctx, queue, q); e != nil {
			return e
		}
	}
	if err != nil {
		return s.groupError(ctx, err)
	}
	return nil
}

// groupError ends the stream: not the leader (with the leader's address),
// or a leader not ready in time. The client re-sends elsewhere or later.
func (s *Service) groupError(ctx context.Context, err error) error {
	var nl *certgroup.NotLeaderError
	if errors.As(err, &nl) {
		if stream := grpc.ServerTransportStreamFromContext(ctx); stream != nil {
			addr := s.group.AddrOf(nl.Leader)
			if addr != "" {
				_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, addr))
			}
		}
		return status.Errorf(codes.Unavailable, "certifier member %d: %v; the client retries at the leader", s.group.ID(), nl)
	}
	return status.Errorf(codes.Unavailable, "certifier member %d: %v", s.group.ID(), err)
}

// groupMaySend holds a batch of replies until its aborts are confirmed,
// and drops it if the leadership it was decided in is gone.
func (s *Service) groupMaySend(ctx context.Context, batch []queued, ticket uint64) error {
	if ticket > 0 {
		if _, err := s.confirmed.wait(ctx, ticket); err != nil {
			return status.Error(codes.Unavailable, "certifier leadership lost before the abort was confirmed; re-send")
		}
	}
	epoch := s.leadership.epoch.Load()
	for _, q := range batch {
		if q.reply != nil && q.epoch != epoch {
			return status.Error(codes.Unavailable, "certifier leadership lost: replies not yet sent are dropped; re-send to the new leader")
		}
	}
	return nil
}

// groupSyncVersion answers SyncVersion on the leader, once a ReadIndex
// issued after the call confirmed that it still leads in the term it read
// the version in (certgroup.Core.ReadVersion).
func (s *Service) groupSyncVersion(ctx context.Context) (*pb.SyncVersionReply, error) {
	v, ticket, term, err := s.group.ReadVersion(ctx)
	var notLeader *certgroup.NotLeaderError
	switch {
	case errors.As(err, &notLeader):
		if notLeader.Leader != 0 {
			grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, s.group.AddrOf(notLeader.Leader)))
		}
		return nil, status.Error(codes.Unavailable, "not the certifier group's leader")
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "the certifier group's leader is not ready: %v", err)
	}
	if _, err := s.confirmed.wait(ctx, ticket); err != nil {
		return nil, status.Errorf(codes.Unavailable, "the certifier's leadership was not confirmed: %v", err)
	}
	if _, now, leading := s.group.Leader(); !leading || now != term {
		return nil, status.Error(codes.Unavailable, "certifier leadership lost before it was confirmed; ask the new leader")
	}
	return &pb.SyncVersionReply{DurableVersion: v}, nil
}

// groupStatus adds the member's view of the group to a status reply.
func (s *Service) groupStatus(r *pb.StatusReply) {
	st := s.group.Status()
	r.MemberId, r.Role, r.Term, r.LeaderId = st.ID, st.Role, st.Term, st.Leader
	r.RaftIndex, r.AppliedIndex = st.LastIndex, st.AppliedIndex
	members := s.group.Members()
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

// leads reports whether this certifier certifies: a single certifier
// always, a group member while it leads.
func (s *Service) leads() bool {
	if s.group == nil {
		return true
	}
	_, _, leading := s.group.Leader()
	return leading
}

// term is the group's Raft term as this member knows it; 0 for a single
// certifier.
func (s *Service) term() uint64 {
	if s.group == nil {
		return 0
	}
	_, term, _ := s.group.Leader()
	return term
}
