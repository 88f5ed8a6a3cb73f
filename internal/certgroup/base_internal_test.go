package certgroup

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// writeLogWithoutBase writes the Raft log of a one-member group from
// before the group's base: the bootstrap configuration, the barrier of
// term 2, and version 1 certified in term 2 with its term as its epoch.
func writeLogWithoutBase(t *testing.T, dir string) {
	t.Helper()
	disk, _, _, err := OpenDiskLog(OSDir{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	cc, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: proto.Uint64(1)})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(index, term uint64, typ raftpb.EntryType, data []byte) *raftpb.Entry {
		return &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: typ.Enum(), Data: data}
	}
	entries := []*raftpb.Entry{
		entry(1, 1, raftpb.EntryConfChange, cc),
		entry(2, 2, raftpb.EntryNormal, nil),
		entry(3, 2, raftpb.EntryNormal, encodeBatch([]logentry.Entry{batchTestPrefix(1).WithVersion(1, 2)})),
	}
	hs := &raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(1), Commit: proto.Uint64(3)}
	if err := disk.Save(hs, entries, true); err != nil {
		t.Fatal(err)
	}
}

// A group whose log was written before the group's base (its epochs are
// its terms: base 0) gets a base from its next leader, which certifies
// only once it is applied: the epochs go on from base + term, above every
// term, so they never decrease along the log. The base stays what it is
// across a restart from the log.
func TestALogWithoutABaseGetsOneAndItsEpochsGoOnUpwards(t *testing.T) {
	dir := t.TempDir()
	writeLogWithoutBase(t, dir)
	m := openBatchTestMember(t, dir)
	m.drive()
	if m.core.AppliedVersion() != 1 || m.core.Base() != 0 {
		t.Fatalf("the log without a base: applied version %d, base %d; want version 1, base 0", m.core.AppliedVersion(), m.core.Base())
	}
	m.lead()
	base := m.core.Base()
	if base == 0 {
		t.Fatal("the leader certifies without a base")
	}
	m.certify(2)
	m.drive()
	epochs := make([]uint64, 0, len(m.committed))
	for _, e := range m.committed {
		h, err := logentry.RawHeaderOf(e.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		epochs = append(epochs, h.Epoch)
	}
	term := m.core.rn.BasicStatus().GetTerm()
	if len(epochs) != 2 || epochs[0] != 2 || epochs[1] != base+term {
		t.Fatalf("epochs of versions 1 and 2: %v, want [2 %d] (the term, then base %d + term %d)", epochs, base+term, base, term)
	}
	m.disk.Close()

	again := openBatchTestMember(t, dir)
	again.drive()
	if again.core.Base() != base {
		t.Fatalf("after a restart the group's base is %d, want %d", again.core.Base(), base)
	}
}

// Two leaders may each propose a base; every member keeps the first one
// applied.
func TestTheFirstBaseAppliedStays(t *testing.T) {
	m := openBatchTestMember(t, t.TempDir())
	var out Applied
	m.core.apply(&raftpb.Entry{Index: proto.Uint64(1), Term: proto.Uint64(1), Data: encodeBase(500)}, &out)
	m.core.apply(&raftpb.Entry{Index: proto.Uint64(2), Term: proto.Uint64(2), Data: encodeBase(700)}, &out)
	if m.core.Base() != 500 {
		t.Fatalf("base %d after bases 500 and 700 were applied, want 500", m.core.Base())
	}
	for _, bad := range [][]byte{{kindBase}, {kindBase, 0}, append(encodeBase(5), 0)} {
		if _, ok, err := baseOf(bad); !ok || err == nil {
			t.Errorf("a damaged base entry %v: ok %v, err %v", bad, ok, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a committed base entry that does not read was applied")
		}
	}()
	m.core.apply(&raftpb.Entry{Index: proto.Uint64(3), Term: proto.Uint64(2), Data: []byte{kindBase, 0}}, &out)
}
