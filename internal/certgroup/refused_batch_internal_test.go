package certgroup

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// memGroup is a group of Cores in memory, driven by hand: every batch is
// "persisted" at once (on disk too for a group of newDiskGroup) and its
// messages delivered after Advance, except to and from isolated members.
// No leader lease (DisableCheckQuorum): a member elected by hand is
// voted for by members that still hear an isolated leader.
type memGroup struct {
	t         *testing.T
	cfg       Config // every member's but for its ID
	cores     map[uint64]*Core
	disks     map[uint64]*DiskLog // nil: in memory only
	dirs      map[uint64]string
	isolated  map[uint64]bool
	lost      map[uint64]int // LostLeadership reports per member
	committed map[uint64][]logentry.Entry
}

func newMemGroup(t *testing.T) *memGroup {
	g := &memGroup{t: t, cfg: Config{Peers: []uint64{1, 2, 3}, Decode: regressionDecode, DisableCheckQuorum: true}, cores: map[uint64]*Core{},
		isolated: map[uint64]bool{}, lost: map[uint64]int{}, committed: map[uint64][]logentry.Entry{}}
	for id := uint64(1); id <= 3; id++ {
		g.cores[id] = g.newCore(id, Persisted{})
	}
	return g
}

// newDiskGroup is a memGroup whose members keep their Raft logs on disk
// (DiskLog), with cfg's snapshot settings: they can be restarted.
func newDiskGroup(t *testing.T, cfg Config) *memGroup {
	cfg.Peers, cfg.Decode, cfg.DisableCheckQuorum = []uint64{1, 2, 3}, regressionDecode, true
	g := &memGroup{t: t, cfg: cfg, cores: map[uint64]*Core{}, disks: map[uint64]*DiskLog{}, dirs: map[uint64]string{},
		isolated: map[uint64]bool{}, lost: map[uint64]int{}, committed: map[uint64][]logentry.Entry{}}
	for id := uint64(1); id <= 3; id++ {
		g.dirs[id] = t.TempDir()
		g.open(id)
	}
	return g
}

func (g *memGroup) newCore(id uint64, disk Persisted) *Core {
	cfg := g.cfg
	cfg.ID = id
	c, err := NewCore(cfg, disk)
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// open starts a member of a disk group from its directory.
func (g *memGroup) open(id uint64) {
	d, p, _, err := OpenDiskLog(OSDir{Path: g.dirs[id]})
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { d.Close() })
	g.disks[id], g.cores[id], g.committed[id] = d, g.newCore(id, p), nil
}

// restart stops a member of a disk group and starts it again from what it
// wrote.
func (g *memGroup) restart(id uint64) {
	if err := g.disks[id].Close(); err != nil {
		g.t.Fatal(err)
	}
	g.open(id)
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
			g.persist(id, b)
			msgs = append(msgs, b.Messages...)
			a := c.Advance()
			g.compact(id, a.Compaction)
			if a.LostLeadership {
				g.lost[id]++
			}
			g.committed[id] = append(g.committed[id], a.Committed...)
		}
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			g.deliver(m)
		}
	}
	g.t.Fatal("the group does not settle")
}

func (g *memGroup) persist(id uint64, b Batch) {
	d := g.disks[id]
	if d == nil {
		return
	}
	if b.Snapshot != nil {
		if err := d.InstallSnapshot(b.Snapshot, b.State); err != nil {
			g.t.Fatal(err)
		}
	}
	if err := d.Save(b.HardState, b.Entries, b.MustSync); err != nil {
		g.t.Fatal(err)
	}
}

func (g *memGroup) compact(id uint64, c *Compaction) {
	d := g.disks[id]
	if d == nil || c == nil {
		return
	}
	if err := d.SaveSnapshot(c.Snapshot); err != nil {
		g.t.Fatal(err)
	}
	if err := d.Compact(c.Index, c.HardState); err != nil {
		g.t.Fatal(err)
	}
}

// deliver hands a message to its receiver, unless either end is isolated
// (a snapshot message is then reported lost, as the transport does).
func (g *memGroup) deliver(m *raftpb.Message) {
	from, to := m.GetFrom(), m.GetTo()
	snap := m.GetType() == raftpb.MessageType_MsgSnap
	if g.isolated[from] || g.isolated[to] {
		if snap {
			g.cores[from].ReportSnapshot(to, true)
		}
		return
	}
	if snap {
		g.cores[from].ReportSnapshot(to, false)
	}
	if err := g.cores[to].Step(m); err != nil {
		g.t.Fatalf("step %v: %v", m.GetType(), err)
	}
}

// elect makes member id the leader and waits until it certifies.
func (g *memGroup) elect(id uint64) {
	g.pump()
	if err := g.cores[id].Campaign(); err != nil {
		g.t.Fatal(err)
	}
	g.pump()
	if err := g.cores[id].checkCertifying(); err != nil {
		g.t.Fatalf("member %d does not certify after its election: %v", id, err)
	}
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
	g.elect(1)
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
			if want := batchTestPrefix(uint64(11+i)).WithVersion(uint64(i+1), 0); e.Version != want.Version || !sameButEpoch(e.Bytes, want.Bytes) {
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

// A leader whose proposal Raft refused certifies no more in that term,
// even if the transfer that refused it is given up and it still leads: the
// versions it answered may have been delivered at their commit point with
// this term's epoch, and giving their numbers to other transactions in
// the same term would give one (version, epoch) to two transactions. It
// hands its leadership over again instead, and the next leader certifies
// them in a later epoch.
func TestARefusedProposalEndsCertificationInItsTerm(t *testing.T) {
	g := newMemGroup(t)
	g.elect(1)
	for seq := uint64(1); seq <= 3; seq++ {
		if o, err := g.certify(1, seq); err != nil || o.CommitVersion != seq {
			t.Fatalf("certify %d: %+v, %v", seq, o, err)
		}
	}
	_, term, _ := g.cores[1].Leader()
	epoch := g.cores[1].epoch()
	g.isolated[2] = true
	g.cores[1].rn.TransferLeader(2) // Raft refuses proposals until the transfer ends
	g.pump()
	for range 2 * DefaultElectionTicks { // the transfer to an unreachable member is given up
		g.cores[1].Tick()
	}
	if _, now, leading := g.cores[1].Leader(); !leading || now != term {
		t.Fatalf("member 1 leads %v in term %d; the test needs it still leading in term %d", leading, now, term)
	}
	if _, err := g.certify(1, 11); !errors.Is(err, ErrNotReady) {
		t.Fatalf("member 1 certified again in the term its proposal was refused in: %v", err)
	}
	g.isolated[2] = false
	g.pump()
	next := uint64(0)
	for id := uint64(2); id <= 3; id++ {
		if _, _, leading := g.cores[id].Leader(); leading {
			next = id
		}
	}
	if next == 0 {
		t.Fatal("member 1 did not hand its leadership over again")
	}
	if o, err := g.certify(next, 11); err != nil || o.CommitVersion != 1 || g.cores[next].epoch() <= epoch {
		t.Fatalf("the next leader's first commit: %+v, %v, epoch %d; want version 1 in a later epoch than %d", o, err, g.cores[next].epoch(), epoch)
	}
}
