package certgroup

import (
	"fmt"
	"log/slog"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// memGroup is a group of Cores in memory, driven by hand: every batch is
// "persisted" at once and its messages delivered after Advance.
type memGroup struct {
	t         *testing.T
	cores     map[uint64]*Core
	lost      map[uint64]int // LostLeadership reports per member
	committed map[uint64][]logentry.Entry
}

func newMemGroup(t *testing.T) *memGroup {
	g := &memGroup{t: t, cores: map[uint64]*Core{}, lost: map[uint64]int{}, committed: map[uint64][]logentry.Entry{}}
	for id := uint64(1); id <= 3; id++ {
		c, err := NewCore(Config{ID: id, Peers: []uint64{1, 2, 3}, Decode: regressionDecode}, Persisted{})
		if err != nil {
			t.Fatal(err)
		}
		g.cores[id] = c
	}
	return g
}

func (g *memGroup) pump() {
	for round := 0; round < 1000; round++ {
		var msgs []*raftpb.Message
		for id := uint64(1); id <= 3; id++ {
			c := g.cores[id]
			b, ok := c.Ready()
			if !ok {
				continue
			}
			msgs = append(msgs, b.Messages...)
			a := c.Advance()
			if a.LostLeadership {
				g.lost[id]++
			}
			g.committed[id] = append(g.committed[id], a.Committed...)
		}
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			if err := g.cores[m.GetTo()].Step(m); err != nil {
				g.t.Fatalf("step %v: %v", m.GetType(), err)
			}
		}
	}
	g.t.Fatal("the group does not settle")
}

func (g *memGroup) certify(id, seq uint64) (certification.Outcome, error) {
	req := certification.Request{Txn: certification.TxnID{Origin: "b", Seq: seq},
		Keys: []certification.Key{certification.RowKey("t", []byte(fmt.Sprint(seq)))}}
	o, _, err := g.cores[id].Certify(req, batchTestPrefix(seq))
	return o, err
}

// A batch Raft refuses (here: the leader is handing its leadership over)
// held versions already answered as commits. They are failed versions: the
// next Advance reports a lost leadership, so the service drops every reply
// waiting for them, and the new leader assigns those versions to other
// transactions.
func TestRefusedBatchIsReportedAsALostLeadership(t *testing.T) {
	g := newMemGroup(t)
	g.pump()
	if err := g.cores[1].Campaign(); err != nil {
		t.Fatal(err)
	}
	g.pump()
	if err := g.cores[1].checkCertifying(); err != nil {
		t.Fatalf("member 1 does not certify after its election: %v", err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if o, err := g.certify(1, seq); err != nil || o.CommitVersion != seq {
			t.Fatalf("certify %d: %+v, %v", seq, o, err)
		}
	}
	g.cores[1].rn.TransferLeader(2) // Raft refuses proposals from now on
	b, ok := g.cores[1].Ready()     // proposes the batch: refused
	if !ok {
		t.Fatal("no Ready after the transfer")
	}
	a := g.cores[1].Advance()
	if _, _, leading := g.cores[1].Leader(); !leading || !a.LostLeadership {
		t.Fatalf("member 1's batch was refused while it still leads (%v): the Advance right after must report a lost leadership, got %v",
			leading, a.LostLeadership)
	}
	for _, m := range b.Messages {
		if err := g.cores[m.GetTo()].Step(m); err != nil {
			t.Fatal(err)
		}
	}
	g.pump()
	if _, _, leading := g.cores[2].Leader(); !leading {
		t.Fatal("member 2 did not take over")
	}
	for seq := uint64(11); seq <= 12; seq++ {
		if o, err := g.certify(2, seq); err != nil || o.CommitVersion != seq-10 {
			t.Fatalf("certify %d on the new leader: %+v, %v (want version %d)", seq, o, err, seq-10)
		}
	}
	g.pump()
	for id := uint64(1); id <= 3; id++ {
		got := g.committed[id]
		if len(got) != 2 {
			t.Fatalf("member %d committed %d versions, want 2 (the refused batch never commits)", id, len(got))
		}
		for i, e := range got {
			if want := batchTestPrefix(uint64(11 + i)).WithVersion(uint64(i + 1)); e.Version != want.Version || string(e.Bytes) != string(want.Bytes) {
				t.Fatalf("member %d: version %d is not transaction %d", id, e.Version, 11+i)
			}
		}
	}
}

// A batch that both ends this member's leadership and commits versions
// (the new leader's, at versions this member answered as its own) is
// reported loss first: the service must bump its leadership epoch before
// the durable version moves, or a waiting reply for a failed version is
// released.
func TestNodeReportsALostLeadershipBeforeTheVersionsCommitted(t *testing.T) {
	var order []string
	n := &Node{log: slog.New(slog.DiscardHandler), cb: Callbacks{
		Committed:      func([]logentry.Entry) { order = append(order, "committed") },
		LostLeadership: func() { order = append(order, "lost") },
	}}
	n.report(Applied{LostLeadership: true, Committed: []logentry.Entry{batchTestEntry(1)}}, Status{Role: "follower"})
	if len(order) != 2 || order[0] != "lost" {
		t.Fatalf("reported %v; the lost leadership must come first", order)
	}
}
