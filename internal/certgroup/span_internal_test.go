package certgroup

// Streamed transactions through the group: a span of versions commits as
// one Raft entry, its head (entry.go kindSpan), which every member applies
// as the whole span.

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// spanTestTable is the table the test spans write whole.
const spanTestTable = "s"

// spanTestRequest is the streamed transaction ("span", seq) of fragments
// fragments, certified on the whole table s, started at version start.
func spanTestRequest(seq, start uint64, fragments int) (certification.Request, SpanHead) {
	ws, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: spanTestTable, Op: pb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte("x")}}})
	if err != nil {
		panic(err)
	}
	req := certification.Request{Txn: certification.TxnID{Origin: "span", Seq: seq}, StartVersion: start,
		Keys: []certification.Key{certification.TableKey(spanTestTable)}, Versions: fragments}
	return req, SpanHead{Txn: &pb.TxnID{Origin: "span", Seq: seq}, Certified: ws, Bytes: 1000 * seq, Checksum: 0xc0ffee00 + uint32(seq)}
}

// spanTestHead is the head the group must commit for that transaction at
// versions first..last: with its fragments' size and checksum.
func spanTestHead(seq, first, last uint64) []byte {
	_, span := spanTestRequest(seq, 0, 0)
	return logentry.AppendSpanEntry(nil, logentry.SpanEntry{Version: last, Txn: span.Txn, First: first, Last: last, Certified: span.Certified,
		SpanBytes: span.Bytes, SpanChecksum: span.Checksum})
}

func (g *memGroup) certifySpan(id, seq, start uint64, fragments int) certification.Outcome {
	g.t.Helper()
	req, span := spanTestRequest(seq, start, fragments)
	o, _, err := g.cores[id].CertifySpan(req, span)
	if err != nil {
		g.t.Fatalf("certify span %d on member %d: %v", seq, id, err)
	}
	return o
}

// certifyRowOfSpanTable certifies transaction ("w", seq), a write of one
// row of the spans' table from start.
func (g *memGroup) certifyRowOfSpanTable(id, seq, start uint64) certification.Outcome {
	g.t.Helper()
	txn := &pb.TxnID{Origin: "w", Seq: seq}
	ws := &pb.Writeset{Changes: []*pb.Change{{Table: spanTestTable, Op: pb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte("y")}}}
	req := certification.Request{Txn: certification.TxnID{Origin: "w", Seq: seq}, StartVersion: start,
		Keys: []certification.Key{certification.RowKey(spanTestTable, []byte("[1]"))}}
	o, _, err := g.cores[id].Certify(req, logentry.EncodePrefix(txn, ws))
	if err != nil {
		g.t.Fatalf("certify row write %d on member %d: %v", seq, id, err)
	}
	return o
}

func (g *memGroup) mustCertify(id, seq, want uint64) {
	g.t.Helper()
	if o, err := g.certify(id, seq); err != nil || o.Decision != certification.Commit || o.CommitVersion != want {
		g.t.Fatalf("certify %d on member %d: %+v, %v; want a commit at version %d", seq, id, o, err, want)
	}
}

// raftPayloads lists the versions each certified Raft entry of a member's
// log holds, "first..last" for a batch and "span first..last" for a span.
func raftPayloads(t *testing.T, c *Core) []string {
	first, _ := c.mem.FirstIndex()
	last, _ := c.mem.LastIndex()
	ents, err := c.mem.Entries(first, last+1, ^uint64(0))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		from, to := versionsOfData(e.GetData())
		switch {
		case from == 0:
		case e.GetData()[0] == kindSpan:
			out = append(out, fmt.Sprintf("span %d..%d", from, to))
		default:
			out = append(out, fmt.Sprintf("%d..%d", from, to))
		}
	}
	return out
}

// A streamed request commits as one Raft entry of its own, after the batch
// certified before it: every member applies the span (its state knows the
// transaction's versions) and reports it as one entry, its head, at the
// span's last version right after first-1.
func TestStreamedRequestCommitsAsOneSpanEntry(t *testing.T) {
	g := newMemGroup(t)
	g.elect(1)
	g.mustCertify(1, 1, 1)
	g.mustCertify(1, 2, 2)
	if o := g.certifySpan(1, 10, 2, 4); o.Decision != certification.Commit || o.FirstVersion != 3 || o.CommitVersion != 6 {
		t.Fatalf("streamed request of 4 fragments: %+v, want versions 3..6", o)
	}
	g.mustCertify(1, 3, 7)
	g.pump()
	head := spanTestHead(10, 3, 6)
	for id := uint64(1); id <= 3; id++ {
		if got := fmt.Sprint(raftPayloads(t, g.cores[id])); got != "[1..2 span 3..6 7..7]" {
			t.Errorf("member %d's Raft log holds %s, want [1..2 span 3..6 7..7]", id, got)
		}
		var versions []uint64
		for _, e := range g.committed[id] {
			versions = append(versions, e.Version)
		}
		if fmt.Sprint(versions) != "[1 2 6 7]" {
			t.Fatalf("member %d reported versions %v committed, want [1 2 6 7]", id, versions)
		}
		got := g.committed[id][2]
		if !sameButEpoch(got.Bytes, head) {
			t.Errorf("member %d reported %x at version 6, want the span head %x", id, got.Bytes, head)
		}
		if h, err := logentry.RawHeaderOf(got.Bytes); err != nil || !h.InSpan() || h.SpanFirst != 3 || h.SpanLast != 6 {
			t.Errorf("member %d: the head reads as %+v, %v", id, h, err)
		}
		if first, last, ok := g.cores[id].CommittedSpan(certification.TxnID{Origin: "span", Seq: 10}); !ok || first != 3 || last != 6 {
			t.Errorf("member %d knows the span as %d..%d (%v), want 3..6", id, first, last, ok)
		}
		if v := g.cores[id].AppliedVersion(); v != 7 {
			t.Errorf("member %d applied version %d, want 7", id, v)
		}
	}
}

// A span conflicts with later writes of its table on the leader that
// certified it, on a new leader that applied it from the log, and on a
// member restarted from a snapshot that holds it; each of them knows the
// whole span (CommittedSpan; a leader's lookup's FirstVersion), which a
// retried streamed request is answered with.
func TestSpanConflictsAfterFailoverAndRestartFromSnapshot(t *testing.T) {
	g := newDiskGroup(t, Config{SnapshotEntries: 2, CatchUpEntries: 1})
	g.elect(1)
	g.mustCertify(1, 1, 1)
	if o := g.certifySpan(1, 10, 1, 3); o.FirstVersion != 2 || o.CommitVersion != 4 {
		t.Fatalf("streamed request of 3 fragments: %+v, want versions 2..4", o)
	}
	g.pump()
	spanTxn := certification.TxnID{Origin: "span", Seq: 10}
	checkSpan := func(id uint64, when string) {
		t.Helper()
		if first, last, ok := g.cores[id].CommittedSpan(spanTxn); !ok || first != 2 || last != 4 {
			t.Errorf("%s: member %d knows the span as %d..%d (%v), want 2..4", when, id, first, last, ok)
		}
		if _, _, leading := g.cores[id].Leader(); !leading {
			return
		}
		req, _ := spanTestRequest(10, 1, 3)
		res, err := g.cores[id].certifyAll([]Request{{Certify: req, Lookup: true}})
		if err != nil || res[0].Version != 4 || res[0].FirstVersion != 2 {
			t.Errorf("%s: member %d looks the span up as %+v, %v; want versions 2..4", when, id, res, err)
		}
	}
	checkConflict := func(id, seq uint64, when string) {
		t.Helper()
		if o := g.certifyRowOfSpanTable(id, seq, 1); o.Decision != certification.Abort || o.ConflictVersion != 4 {
			t.Errorf("%s: a write of the span's table from version 1 on member %d: %+v, want a conflict with version 4", when, id, o)
		}
	}
	checkSpan(1, "on the leader")
	checkConflict(1, 1, "on the leader")

	g.isolated[1] = true
	g.elect(2)
	checkSpan(2, "after failover")
	checkConflict(2, 2, "after failover")
	if o := g.certifyRowOfSpanTable(2, 3, 4); o.Decision != certification.Commit || o.CommitVersion != 5 {
		t.Fatalf("a write of the span's table from its last version: %+v, want a commit at version 5", o)
	}
	g.isolated[1] = false
	g.pump()

	for id := uint64(1); id <= 3; id++ {
		g.restart(id)
		v, epoch := g.cores[id].SnapshotVersion()
		if v < 4 {
			t.Fatalf("member %d restarted from a snapshot of version %d, which does not hold the span 2..4", id, v)
		}
		if base := g.cores[id].Base(); base == 0 || epoch <= base {
			t.Fatalf("member %d restarted from a snapshot of version %d in epoch %d, base %d: want an epoch above the base", id, v, epoch, base)
		}
	}
	g.elect(3)
	for id := uint64(1); id <= 3; id++ {
		checkSpan(id, "after a restart from a snapshot")
	}
	checkConflict(3, 4, "after a restart from a snapshot")
}

// A leader that loses its leadership before its span commits drops it:
// the span's versions were speculative, the member forgets them, the new
// leader certifies the next request at the span's first version, and the
// retried streamed request commits after it.
func TestLeaderLosingLeadershipDropsItsUncommittedSpan(t *testing.T) {
	g := newMemGroup(t)
	g.elect(1)
	g.mustCertify(1, 1, 1)
	g.pump()
	g.isolated[1] = true
	if o := g.certifySpan(1, 10, 1, 3); o.FirstVersion != 2 || o.CommitVersion != 4 {
		t.Fatalf("streamed request of 3 fragments: %+v, want versions 2..4", o)
	}
	g.pump()
	g.elect(2)
	g.mustCertify(2, 2, 2)
	g.pump()
	g.isolated[1] = false
	for range DefaultHeartbeatTicks {
		g.cores[2].Tick() // a heartbeat tells member 1 of the new term
	}
	g.pump()
	if g.lost[1] == 0 {
		t.Fatal("member 1 was not told it lost its leadership: the span's reply could be sent")
	}
	spanTxn := certification.TxnID{Origin: "span", Seq: 10}
	if first, last, ok := g.cores[1].CommittedSpan(spanTxn); ok {
		t.Fatalf("member 1 still knows the dropped span as %d..%d", first, last)
	}
	if v, _ := g.cores[1].Versions(); v != 2 {
		t.Fatalf("member 1's state is at version %d after dropping its span, want 2", v)
	}
	if o := g.certifySpan(2, 10, 2, 3); o.Duplicate || o.FirstVersion != 3 || o.CommitVersion != 5 {
		t.Fatalf("the retried streamed request on the new leader: %+v, want a new commit at 3..5", o)
	}
	g.pump()
	for id := uint64(1); id <= 3; id++ {
		got := g.committed[id]
		if len(got) != 3 || !sameButEpoch(got[1].Bytes, batchTestEntry(2).Bytes) || !sameButEpoch(got[2].Bytes, spanTestHead(10, 3, 5)) {
			t.Fatalf("member %d committed %d entries; want versions 1, 2 (the new leader's transaction 2), then the span 3..5", id, len(got))
		}
	}
}

// A streamed request that arrives while the leader hands its leadership
// over is not decided (Raft would refuse its head): ErrNotReady, and the
// state stays at the applied versions.
func TestSpanDuringATransferIsNotDecided(t *testing.T) {
	g := newMemGroup(t)
	g.elect(1)
	g.mustCertify(1, 1, 1)
	g.pump()
	g.cores[1].rn.TransferLeader(2)
	req, span := spanTestRequest(10, 1, 3)
	if o, _, err := g.cores[1].CertifySpan(req, span); !errors.Is(err, ErrNotReady) {
		t.Fatalf("a span during a transfer: %+v, %v; want ErrNotReady", o, err)
	}
	if v, _ := g.cores[1].Versions(); v != 1 {
		t.Fatalf("the state is at version %d after a span during a transfer, want 1", v)
	}
}

// Several versions without a span head would be one batch entry with a
// gap in its versions: refused.
func TestCertifyRefusesSeveralVersionsWithoutAHead(t *testing.T) {
	g := newMemGroup(t)
	g.elect(1)
	req, _ := spanTestRequest(10, 0, 3)
	if _, _, err := g.cores[1].Certify(req, batchTestPrefix(10)); !errors.Is(err, errSpanWithoutHead) {
		t.Fatalf("Certify of 3 versions: %v, want errSpanWithoutHead", err)
	}
	if v, _ := g.cores[1].Versions(); v != 0 {
		t.Fatalf("version %d after a refused request", v)
	}
}
