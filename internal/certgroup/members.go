package certgroup

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Online membership. A member is added as a learner (it receives
// the log, by snapshot plus entries, but does not vote), promoted to voter
// once it has caught up, and removed by a plain removal; each step is one
// Raft configuration change (ConfChangeV2 with a single change: Raft's
// one-at-a-time rule, no joint consensus needed). The new member's address
// travels in the change's Context, so every member's transport learns it
// from the log (and from snapshots, which carry every known address):
// membership and addresses are as durable as the log itself.

// learnerLagEntriesMax is how far behind the leader's log a learner may
// still be when it is promoted: close enough that the new voter does not
// hold back commits for long, loose enough that a learner under a steady
// load is ever promoted.
const learnerLagEntriesMax = 1000

// ProposeMemberChange asks the group to change one member (leader only):
// raftpb.ConfChangeAddLearnerNode, ConfChangeAddNode (a new voter or the
// promotion of a learner) or ConfChangeRemoveNode. addr is the member's
// address for additions. The change is applied once Raft commits it;
// Raft drops it if another change is still pending (Config shows whether
// it took effect).
func (c *Core) ProposeMemberChange(typ raftpb.ConfChangeType, id uint64, addr string) error {
	if st := c.rn.BasicStatus(); st.RaftState != raft.StateLeader {
		return &NotLeaderError{Leader: st.Lead}
	}
	if id == 0 {
		return fmt.Errorf("certifier group: member id 0 is reserved")
	}
	cc := &raftpb.ConfChangeV2{
		Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: &id}},
		Context: []byte(addr),
	}
	return c.rn.ProposeConfChange(cc)
}

// learnAddresses records the address an applied change carries, or forgets
// a removed member's.
func (c *Core) learnAddresses(cc *raftpb.ConfChangeV2) {
	for _, ch := range cc.GetChanges() {
		switch ch.GetType() {
		case raftpb.ConfChangeType_ConfChangeAddNode, raftpb.ConfChangeType_ConfChangeAddLearnerNode:
			if len(cc.GetContext()) > 0 {
				c.addrs[ch.GetNodeId()] = string(cc.GetContext())
			}
		case raftpb.ConfChangeType_ConfChangeRemoveNode:
			delete(c.addrs, ch.GetNodeId())
		}
	}
}

// snapshotForNewMember makes the next Advance take a snapshot when a
// member is added: a new member catches up by the leader's snapshot, and
// Raft refuses to install one whose configuration does not list it (the
// last snapshot may predate its addition), so the leader would send it the
// same refused snapshot forever.
func (c *Core) snapshotForNewMember(cc *raftpb.ConfChangeV2) {
	for _, ch := range cc.GetChanges() {
		switch ch.GetType() {
		case raftpb.ConfChangeType_ConfChangeAddNode, raftpb.ConfChangeType_ConfChangeAddLearnerNode:
			c.snapshotDue = true
		}
	}
}

// Config is the applied configuration: voters and learners.
func (c *Core) Config() (voters, learners []uint64) {
	return append([]uint64(nil), c.confState.GetVoters()...), append([]uint64(nil), c.confState.GetLearners()...)
}

// Addrs are the members' addresses this member knows: those it was started
// with, updated by every applied configuration change and snapshot.
func (c *Core) Addrs() map[uint64]string {
	out := make(map[uint64]string, len(c.addrs))
	for id, a := range c.addrs {
		out[id] = a
	}
	return out
}

// CaughtUp reports, on the leader, whether member id's log is within
// learnerLagEntriesMax entries of the leader's, and the leader is sending
// it entries (not probing, not waiting for a snapshot): a learner that has
// nothing yet is never "within" a short log.
func (c *Core) CaughtUp(id uint64) bool {
	st := c.rn.Status()
	pr, ok := st.Progress[id]
	if !ok || st.RaftState != raft.StateLeader || pr.State != tracker.StateReplicate || pr.Match == 0 {
		return false
	}
	first, _ := c.mem.FirstIndex()
	last, _ := c.mem.LastIndex()
	return pr.Match+1 >= first && pr.Match+learnerLagEntriesMax >= last
}

// ReachableVotersWithout counts, on the leader, the voters other than id
// that it heard from recently (the leader included), and the voters there
// would be without id. ok is false on a member that does not lead.
func (c *Core) ReachableVotersWithout(id uint64) (reachable, voters int, ok bool) {
	st := c.rn.Status()
	if st.RaftState != raft.StateLeader {
		return 0, 0, false
	}
	for _, v := range c.confState.GetVoters() {
		if v == id {
			continue
		}
		voters++
		if pr, known := st.Progress[v]; v == c.cfg.ID || known && pr.RecentActive {
			reachable++
		}
	}
	return reachable, voters, true
}

// TransferLeadership hands the leadership to the voter with the most of
// the log among those the leader heard from recently (leader only) and
// returns it, 0 if there is none. What it certified is proposed first,
// and it certifies nothing while the transfer runs (checkCertifying).
func (c *Core) TransferLeadership() uint64 {
	st := c.rn.Status()
	if st.RaftState != raft.StateLeader {
		return 0
	}
	best, match := uint64(0), uint64(0)
	for _, id := range c.confState.GetVoters() {
		if pr, ok := st.Progress[id]; ok && pr.RecentActive && id != c.cfg.ID && (best == 0 || pr.Match > match) {
			best, match = id, pr.Match
		}
	}
	if best != 0 {
		c.proposeBatch() // Raft refuses proposals until the transfer ends
		c.rn.TransferLeader(best)
	}
	return best
}
