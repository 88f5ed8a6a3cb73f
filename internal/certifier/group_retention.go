package certifier

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// Log retention in a certifier group. The leader runs the rule (it is the
// member the replicas' sessions reach, so it knows their progress) and
// proposes its decision through Raft; every member, the leader included,
// applies it when Raft commits it: it adopts the replicas' progress (so
// that a later leader waits for the replicas that are away too) and
// removes the segments of its versioned log below the decision's
// keep_from. Every member thus keeps the same versions, whichever leads
// next, without a rule that would have to run alike on data only the
// leader has. Raft snapshots carry the last decision, for a member that
// restarts from one or installs one.
//
// A member restores its certification state from Raft (snapshot plus
// log), never from the versioned log, so the rule runs here without the
// certification window as a floor.

// retentionProposer is the leader's side: the term it leads in, since
// when, and the last decision it proposed (one that changes nothing is
// not proposed again). Used by the retention goroutine only.
type retentionProposer struct {
	term     uint64
	since    time.Time
	proposed *pb.LogRetention
}

// retain proposes a decision while this member leads. A replica's silence
// counts from the start of this member's leadership: before it, the
// replicas talked to another member.
func (g *groupMember) retain(now time.Time) {
	leads, term := g.certifies()
	p := &g.proposer
	if !leads {
		p.term = 0
		return
	}
	if term != p.term {
		p.term, p.since, p.proposed = term, now, nil
	}
	d := decideRetention(g.s.retentionInput(now, p.since, 0))
	if sameProgress(d, p.proposed) {
		return
	}
	data, err := proto.Marshal(d)
	if err != nil {
		panic(fmt.Sprintf("certifier: marshal a retention decision: %v", err))
	}
	if err := g.node.ProposeRetention(data); err != nil {
		g.s.cfg.Logger.Debug("log retention: the decision was not proposed", "err", err)
		return
	}
	p.proposed = d
}

// retentionApplied is Callbacks.Retention: a decision Raft committed,
// applied in commit order with what the writer has.
func (g *groupMember) retentionApplied(data []byte) {
	d := &pb.LogRetention{}
	if err := proto.Unmarshal(data, d); err != nil {
		g.s.cfg.Logger.Error("log retention: a committed decision does not decode; ignored", "err", err)
		return
	}
	g.writer.submit(func() bool {
		g.s.replicas.adopt(d)
		g.s.applyRetention(d)
		return g.s.Err() == nil
	}, true)
}
