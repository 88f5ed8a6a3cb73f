package certgroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// The membership service (api/certifierpb/group.proto), served by every
// member; only the leader changes the configuration (members.go says how).

const (
	// memberChangeWaitMax bounds the wait for one configuration change to
	// be committed and applied.
	memberChangeWaitMax = 10 * time.Second
	// memberChangeReproposeInterval: Raft silently drops a change proposed
	// while another is pending; it is proposed again until it shows.
	memberChangeReproposeInterval = time.Second
	// learnerCatchUpWaitMax bounds the wait for a new learner to catch up
	// (snapshot plus log) before it is promoted.
	learnerCatchUpWaitMax = 2 * time.Minute
	// leaderTransferWaitMax bounds the wait for a leadership handed over.
	leaderTransferWaitMax = 5 * time.Second
)

// AdminServer is the gRPC membership service of n.
type AdminServer struct {
	pb.UnimplementedCertifierGroupServer
	n *Node
}

// AdminServer returns the membership service: register it on the member's
// gRPC server.
func (n *Node) AdminServer() *AdminServer { return &AdminServer{n: n} }

// AddMember implements pb.CertifierGroupServer.
func (a *AdminServer) AddMember(ctx context.Context, req *pb.AddMemberRequest) (*pb.MemberChangeReply, error) {
	if req.Id == 0 || req.Addr == "" {
		return nil, status.Error(codes.InvalidArgument, "add member: an id above 0 and an address host:port are required")
	}
	if err := a.n.AddMember(ctx, req.Id, req.Addr); err != nil {
		return nil, a.rpcError(err)
	}
	return a.reply(), nil
}

// RemoveMember implements pb.CertifierGroupServer.
func (a *AdminServer) RemoveMember(ctx context.Context, req *pb.RemoveMemberRequest) (*pb.MemberChangeReply, error) {
	if err := a.n.RemoveMember(ctx, req.Id); err != nil {
		return nil, a.rpcError(err)
	}
	return a.reply(), nil
}

func (a *AdminServer) reply() *pb.MemberChangeReply {
	a.n.mu.Lock()
	defer a.n.mu.Unlock()
	voters, learners := a.n.core.Config()
	lead, _, _ := a.n.core.Leader()
	return &pb.MemberChangeReply{Voters: voters, Learners: learners, LeaderId: lead}
}

func (a *AdminServer) rpcError(err error) error {
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return status.Errorf(codes.FailedPrecondition, "%v (leader address %q): ask the leader", nl, a.n.AddrOf(nl.Leader))
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

// AddMember adds id at addr as a learner, waits for it to catch up and
// promotes it to a voter. Running it again for a member already added is
// harmless: the steps done are skipped.
func (n *Node) AddMember(ctx context.Context, id uint64, addr string) error {
	voters, learners := n.config()
	if slices.Contains(voters, id) {
		return status.Errorf(codes.AlreadyExists, "member %d is already a voter of the group (at %s); a member whose data directory was "+
			"wiped must be removed and added under a new id", id, n.AddrOf(id))
	}
	if !slices.Contains(learners, id) {
		if err := n.changeMember(ctx, raftpb.ConfChangeType_ConfChangeAddLearnerNode, id, addr); err != nil {
			return err
		}
		n.log.Info("certifier group: member added as a learner; it catches up by snapshot and log", "member", id, "addr", addr)
	}
	if err := n.waitCaughtUp(ctx, id); err != nil {
		return err
	}
	if err := n.changeMember(ctx, raftpb.ConfChangeType_ConfChangeAddNode, id, addr); err != nil {
		return err
	}
	n.log.Info("certifier group: learner caught up and promoted to voter", "member", id)
	return nil
}

// RemoveMember removes id. The leader asked to remove itself first hands
// its leadership over and answers with a NotLeaderError naming the new
// leader, where the removal is to be asked.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	voters, learners := n.config()
	if !slices.Contains(voters, id) && !slices.Contains(learners, id) {
		return nil
	}
	if id == n.ID() {
		return n.handOverLeadership(ctx)
	}
	if slices.Contains(voters, id) && len(voters) <= 1 {
		return status.Error(codes.FailedPrecondition, "remove member: it is the group's last voter")
	}
	if slices.Contains(voters, id) {
		if err := n.removalKeepsAMajority(id); err != nil {
			return err
		}
	}
	if err := n.changeMember(ctx, raftpb.ConfChangeType_ConfChangeRemoveNode, id, ""); err != nil {
		return err
	}
	n.log.Info("certifier group: member removed", "member", id)
	return nil
}

func (n *Node) config() (voters, learners []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core.Config()
}

// changeMember proposes a change and waits until it is applied here.
func (n *Node) changeMember(ctx context.Context, typ raftpb.ConfChangeType, id uint64, addr string) error {
	deadline := time.Now().Add(memberChangeWaitMax)
	var proposed time.Time
	for {
		n.mu.Lock()
		voters, learners := n.core.Config()
		if done := memberChangeApplied(typ, id, voters, learners); done {
			n.mu.Unlock()
			return nil
		}
		var err error
		if time.Since(proposed) >= memberChangeReproposeInterval {
			err, proposed = n.core.ProposeMemberChange(typ, id, addr), time.Now()
		}
		changed := n.changed
		n.mu.Unlock()
		if err != nil {
			return err
		}
		n.signal()
		if time.Now().After(deadline) {
			return fmt.Errorf("certifier group: the change %v of member %d was not applied within %v; retry", typ, id, memberChangeWaitMax)
		}
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func memberChangeApplied(typ raftpb.ConfChangeType, id uint64, voters, learners []uint64) bool {
	switch typ {
	case raftpb.ConfChangeType_ConfChangeAddLearnerNode:
		return slices.Contains(learners, id) || slices.Contains(voters, id)
	case raftpb.ConfChangeType_ConfChangeAddNode:
		return slices.Contains(voters, id)
	default:
		return !slices.Contains(voters, id) && !slices.Contains(learners, id)
	}
}

func (n *Node) waitCaughtUp(ctx context.Context, id uint64) error {
	deadline := time.Now().Add(learnerCatchUpWaitMax)
	for {
		n.mu.Lock()
		ok := n.core.CaughtUp(id)
		_, _, leading := n.core.Leader()
		n.mu.Unlock()
		if ok {
			return nil
		}
		if !leading {
			return errors.New("certifier group: leadership lost while the new member caught up; run add again at the new leader")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("certifier group: member %d has not caught up within %v; it stays a learner (is it running with --join?); run add again to promote it",
				id, learnerCatchUpWaitMax)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handOverLeadership transfers the leadership to the most up-to-date
// voter and reports the new leader as a NotLeaderError.
func (n *Node) handOverLeadership(ctx context.Context) error {
	n.mu.Lock()
	to := n.core.TransferLeadership()
	n.mu.Unlock()
	if to == 0 {
		return status.Error(codes.FailedPrecondition, "remove member: this member leads and there is no other voter to hand the leadership to")
	}
	n.signal()
	n.log.Info("certifier group: asked to remove itself; handing the leadership over first", "to", to)
	deadline := time.Now().Add(leaderTransferWaitMax)
	for time.Now().Before(deadline) {
		n.mu.Lock()
		lead, _, leading := n.core.Leader()
		n.mu.Unlock()
		if !leading && lead != 0 {
			return &NotLeaderError{Leader: lead}
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.New("certifier group: the leadership was not handed over in time; retry")
}

// removalKeepsAMajority refuses to remove voter id when the voters left
// would not have a majority that the leader can reach: the group would
// stop taking updates until the unreachable ones came back (etcd's
// strict reconfiguration check does the same).
func (n *Node) removalKeepsAMajority(id uint64) error {
	n.mu.Lock()
	reachable, voters, leads := n.core.ReachableVotersWithout(id)
	n.mu.Unlock()
	if leads && reachable < voters/2+1 { // not the leader: the proposal is refused with the leader's name
		return status.Errorf(codes.FailedPrecondition,
			"remove member %d: of the %d voters left, only %d are reachable from the leader, fewer than a majority; the group would stop taking updates. Bring the others back (or remove an unreachable one) first",
			id, voters, reachable)
	}
	return nil
}
