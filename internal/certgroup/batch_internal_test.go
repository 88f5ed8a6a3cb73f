package certgroup

// Batched proposals (for throughput): the leader proposes one Raft
// entry per batch of certified entries, and a member upgraded in place
// still reads the log written before batching (one entry per Raft entry).

import (
	"bytes"
	"fmt"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"google.golang.org/protobuf/proto"
)

func batchTestPrefix(seq uint64) logentry.Prefix {
	txn := &pb.TxnID{Origin: "b", Seq: seq}
	ws := &pb.Writeset{Changes: []*pb.Change{{Table: "t", Op: pb.Op_OP_UPSERT, Key: []byte(fmt.Sprint(seq)), Row: []byte("x")}}}
	return logentry.EncodePrefix(txn, ws)
}

// batchTestEntry is transaction ("b", version) committed at version.
func batchTestEntry(version uint64) logentry.Entry {
	return batchTestPrefix(version).WithVersion(version, 0)
}

func TestBatchFormatRoundTripAndOldFormat(t *testing.T) {
	batch := []logentry.Entry{batchTestEntry(7), batchTestEntry(8), batchTestEntry(9)}
	got, err := decodeEntries(encodeBatch(batch))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("decoded %d entries, want 3", len(got))
	}
	for i := range batch {
		if got[i].Version != batch[i].Version || !bytes.Equal(got[i].Bytes, batch[i].Bytes) {
			t.Errorf("entry %d: got version %d (%d bytes), want %d (%d bytes)", i, got[i].Version, len(got[i].Bytes), batch[i].Version, len(batch[i].Bytes))
		}
	}
	if first, last := versionsOfData(encodeBatch(batch)); first != 7 || last != 9 {
		t.Errorf("versions of a batch: %d..%d, want 7..9", first, last)
	}
	old := encodeCertified(batchTestEntry(5))
	got, err = decodeEntries(old)
	if err != nil || len(got) != 1 || got[0].Version != 5 || !bytes.Equal(got[0].Bytes, batchTestEntry(5).Bytes) {
		t.Fatalf("an entry of the old format must read as a batch of one: %v, %v", got, err)
	}
	if first, last := versionsOfData(old); first != 5 || last != 5 {
		t.Errorf("versions of an old entry: %d..%d, want 5..5", first, last)
	}
	good := encodeBatch(batch)
	for _, bad := range [][]byte{good[:len(good)-1], append(append([]byte(nil), good...), 0), {kindBatch, 1, 0}, {9, 1, 1}} {
		if _, err := decodeEntries(bad); err == nil {
			t.Errorf("a damaged payload (%d bytes) decoded", len(bad))
		}
	}
}

// batchTestMember is a one-member group driven by hand on a disk log.
type batchTestMember struct {
	t         *testing.T
	core      *Core
	disk      *DiskLog
	committed []logentry.Entry
	raftAdds  int // Raft entries holding certified entries, written
}

func openBatchTestMember(t *testing.T, dir string) *batchTestMember {
	disk, p, _, err := OpenDiskLog(OSDir{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	core, err := NewCore(Config{ID: 1, Peers: []uint64{1}, Decode: regressionDecode}, p)
	if err != nil {
		t.Fatal(err)
	}
	m := &batchTestMember{t: t, core: core, disk: disk}
	t.Cleanup(func() { disk.Close() })
	return m
}

func (m *batchTestMember) drive() {
	for {
		b, ok := m.core.Ready()
		if !ok {
			return
		}
		for _, e := range b.Entries {
			if certifiedCount(e) > 0 {
				m.raftAdds++
			}
		}
		if err := m.disk.Save(b.HardState, b.Entries, b.MustSync); err != nil {
			m.t.Fatal(err)
		}
		a := m.core.Advance()
		m.committed = append(m.committed, a.Committed...)
	}
}

func (m *batchTestMember) lead() {
	m.drive() // the bootstrap configuration is applied before a campaign
	if err := m.core.Campaign(); err != nil {
		m.t.Fatal(err)
	}
	m.drive()
	if err := m.core.checkCertifying(); err != nil {
		m.t.Fatalf("the only member does not certify after its election: %v", err)
	}
}

func (m *batchTestMember) certify(version uint64) {
	req := certification.Request{Txn: certification.TxnID{Origin: "b", Seq: version},
		Keys: []certification.Key{certification.RowKey("t", []byte(fmt.Sprint(version)))}}
	o, _, err := m.core.Certify(req, batchTestPrefix(version))
	if err != nil || o.Decision != certification.Commit || o.CommitVersion != version {
		m.t.Fatalf("certify version %d: %+v, %v", version, o, err)
	}
}

func (m *batchTestMember) checkCommitted(upTo uint64) {
	if len(m.committed) != int(upTo) {
		m.t.Fatalf("%d versions committed, want %d", len(m.committed), upTo)
	}
	for i, e := range m.committed {
		if want := batchTestEntry(uint64(i + 1)); e.Version != want.Version || !sameButEpoch(e.Bytes, want.Bytes) {
			m.t.Fatalf("committed entry %d: version %d, want %d (or other bytes)", i, e.Version, want.Version)
		}
	}
}

// sameButEpoch: a and b encode the same entry, but for the epoch (the term
// of the leader that certified it, checked where a test knows it).
func sameButEpoch(a, b []byte) bool {
	ea, errA := logentry.Decode(a)
	eb, errB := logentry.Decode(b)
	if errA != nil || errB != nil {
		return false
	}
	ea.Epoch, eb.Epoch = 0, 0
	return proto.Equal(ea, eb)
}

// Everything certified between two Readys goes to Raft as one entry, and
// commits in order, each entry carrying the group's base plus the leader's
// term as its epoch.
func TestLeaderProposesOneRaftEntryPerBatch(t *testing.T) {
	m := openBatchTestMember(t, t.TempDir())
	m.lead()
	for v := uint64(1); v <= 5; v++ {
		m.certify(v)
	}
	m.drive()
	for v := uint64(6); v <= 8; v++ {
		m.certify(v)
	}
	m.drive()
	m.checkCommitted(8)
	term, base := m.core.rn.BasicStatus().GetTerm(), m.core.Base()
	for _, e := range m.committed {
		if h, err := logentry.RawHeaderOf(e.Bytes); err != nil || h.Epoch != base+term || term == 0 || base == 0 {
			t.Fatalf("version %d carries epoch %d (%v), want the group's base %d plus the leader's term %d", e.Version, h.Epoch, err, base, term)
		}
	}
	if m.raftAdds != 2 {
		t.Errorf("8 versions certified in two bursts went to Raft in %d entries, want 2", m.raftAdds)
	}
	if syncs, entries := m.disk.Syncs, m.disk.SyncedEntries; entries != 8 || syncs == 0 {
		t.Errorf("fsync stats: %d syncs carried %d certified entries, want 8", syncs, entries)
	}
}

// A member upgraded in place: its log holds entries of the old format (one
// version per Raft entry), then batches. It replays both, rebuilds the same
// state from the log after a lost speculation (appliedState), and goes on
// certifying.
func TestOldFormatLogReplaysAfterUpgrade(t *testing.T) {
	dir := t.TempDir()
	m := openBatchTestMember(t, dir)
	m.lead()
	for v := uint64(1); v <= 3; v++ { // what the old leader wrote
		if err := m.core.rn.Propose(encodeCertified(batchTestEntry(v))); err != nil {
			t.Fatal(err)
		}
		m.core.state.Restore(v, certification.TxnID{Origin: "b", Seq: v},
			[]certification.Key{certification.RowKey("t", []byte(fmt.Sprint(v)))})
		m.core.spec = append(m.core.spec, batchTestEntry(v))
		m.drive()
	}
	for v := uint64(4); v <= 6; v++ {
		m.certify(v)
	}
	m.drive()
	m.checkCommitted(6)
	m.disk.Close()

	r := openBatchTestMember(t, dir)
	r.drive()
	r.lead()
	r.drive()
	r.checkCommitted(6)
	if v, _ := r.core.Versions(); v != 6 {
		t.Fatalf("replayed state at version %d, want 6", v)
	}
	if s := r.core.appliedState(); s.Version() != 6 {
		t.Fatalf("state rebuilt from the mixed log at version %d, want 6", s.Version())
	}
	for v := uint64(7); v <= 9; v++ {
		r.certify(v)
	}
	r.drive()
	r.checkCommitted(9)
	// A transaction of the old entries is known: certifying it again is a
	// duplicate with its version, decided from the replayed log.
	o, _, err := r.core.Certify(certification.Request{Txn: certification.TxnID{Origin: "b", Seq: 2},
		Keys: []certification.Key{certification.RowKey("t", []byte("2"))}}, batchTestPrefix(2))
	if err != nil || !o.Duplicate || o.CommitVersion != 2 {
		t.Errorf("re-sent transaction of an old-format entry: %+v, %v; want a duplicate at version 2", o, err)
	}
}
