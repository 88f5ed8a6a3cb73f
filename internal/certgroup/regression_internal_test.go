package certgroup

// Regression tests for three ways a member could lose or misread its
// state: a crash between an installed snapshot and its entries, the address
// book of a member restarted from a snapshot, and a member restarted empty
// under its old id.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// A follower installs the leader's snapshot at index 10 in a batch whose
// hard state already commits index 12 (Raft stepped the MsgSnap and the
// leader's next MsgApp before the driver took the Ready: the transport
// reports the snapshot sent as soon as it is queued, so the append follows
// right behind it). Node.processReady calls DiskLog.InstallSnapshot, which
// rolls a new segment whose first record is that hard state (commit 12),
// and only then DiskLog.Save writes entries 11 and 12. A crash (kill -9 is
// enough: two separate writes) between the two leaves snapshot 10, no
// entries, commit 12: NewCore panics in Raft ("state.commit 12 is out of
// range [10, 10]") at every start, and the member can never restart.
func TestInstalledSnapshotSurvivesACrashBeforeItsEntries(t *testing.T) {
	dir := OSDir{Path: t.TempDir()}
	d, _, _, err := OpenDiskLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	state := certification.New(certification.Config{}, 7)
	snap := &raftpb.Snapshot{
		Data: encodeCoreSnapshot(coreSnapshot{version: 7, addrs: map[uint64]string{1: "a", 2: "b", 3: "c"}, state: state.Marshal()}),
		Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(10), Term: proto.Uint64(2),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}},
	}
	hs := &raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(0), Commit: proto.Uint64(12)}
	if err := d.InstallSnapshot(snap, hs); err != nil {
		t.Fatal(err)
	}
	// crash here: the batch's entries 11 and 12 were never written
	d.Close()

	_, p, _, err := OpenDiskLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("the member cannot restart: %v", r)
		}
	}()
	if _, err := NewCore(Config{ID: 2, Peers: []uint64{1, 2, 3}, Decode: regressionDecode}, p); err != nil {
		t.Fatalf("the member cannot restart: %v", err)
	}
}

// regressionDecode reads a transaction's keys as the tests write them:
// one row of table t per transaction, or, for a span head, the tables its
// certified writeset changed, whole.
func regressionDecode(b []byte) (certification.TxnID, []certification.Key, error) {
	h, err := logentry.HeaderOf(b)
	if err != nil {
		return certification.TxnID{}, nil, err
	}
	txn := certification.TxnID{Origin: h.Origin, Seq: h.Seq}
	if h.SpanLast != 0 {
		e, err := logentry.Decode(b)
		if err != nil {
			return certification.TxnID{}, nil, err
		}
		var keys []certification.Key
		for _, ch := range e.GetCertified().GetChanges() {
			keys = append(keys, certification.TableKey(ch.GetTable()))
		}
		return txn, keys, nil
	}
	return txn, []certification.Key{certification.RowKey("t", []byte(fmt.Sprint(h.Seq)))}, nil
}

func regressionOpen(t *testing.T, dir string) *Node {
	n, err := OpenNode(NodeConfig{Core: Config{ID: 1, Decode: regressionDecode, SnapshotEntries: 3, CatchUpEntries: 1, ElectionTicks: 10, HeartbeatTicks: 1},
		DataDir: dir, Members: map[uint64]string{1: "127.0.0.1:1"}, TickInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(Callbacks{})
	return n
}

// certifyRows certifies one row per transaction r/from..r/to on n,
// retrying while n is not ready.
func certifyRows(ctx context.Context, n *Node, from, to uint64) {
	for i := from; i <= to; i++ {
		txn := &pb.TxnID{Origin: "r", Seq: i}
		ws := &pb.Writeset{Changes: []*pb.Change{{Table: "t", Op: pb.Op_OP_UPSERT, Key: []byte(fmt.Sprint(i)), Row: []byte("x")}}}
		req := certification.Request{Txn: certification.TxnID{Origin: "r", Seq: i}, Keys: []certification.Key{certification.RowKey("t", []byte(fmt.Sprint(i)))}}
		for {
			if _, _, err := n.Certify(ctx, req, logentry.EncodePrefix(txn, ws)); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// A member added online (here a learner, 4) is known to the group's
// configuration and to the Core's address book (from the snapshot), but a
// member restarted from a snapshot that covers the addition keeps, as its
// Node's address book, only what --peers says: OpenNode never calls
// syncMembers. The restarted member cannot dial member 4 (its transport asks
// Node.AddrOf), status lists the wrong members, and a member removed online
// but still in --peers is listed again.
func TestAddressBookAfterRestartFromSnapshot(t *testing.T) {
	dir := t.TempDir()
	n := regressionOpen(t, dir)
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n.mu.Lock()
		_, _, leading := n.core.Leader()
		n.mu.Unlock()
		if leading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := n.changeMember(ctx, raftpb.ConfChangeType_ConfChangeAddLearnerNode, 4, "127.0.0.1:4"); err != nil {
		t.Fatal(err)
	}
	certifyRows(ctx, n, 1, 10)
	time.Sleep(200 * time.Millisecond)
	before, st := n.Members(), n.Status()
	n.Close()
	if before[4] == "" || st.SnapshotIndex == 0 {
		t.Fatalf("set-up: members %v, snapshot index %d", before, st.SnapshotIndex)
	}
	n = regressionOpen(t, dir)
	defer n.Close()
	after, st := n.Members(), n.Status()
	if after[4] == "" {
		t.Errorf("restarted from the snapshot at index %d with learners %v: the node's address book is %v, without member 4 (the core knows %v)",
			st.SnapshotIndex, st.Learners, after, n.core.Addrs())
	}
}
