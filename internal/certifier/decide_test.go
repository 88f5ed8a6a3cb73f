package certifier

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

func encodedRequest(t *testing.T, origin string, seq, start uint64, rows ...string) *pb.CertifyRequestEncoded {
	t.Helper()
	ws := &pb.Writeset{}
	for _, r := range rows {
		ws.Changes = append(ws.Changes, &pb.Change{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(r)})
	}
	b, err := proto.Marshal(ws)
	if err != nil {
		t.Fatal(err)
	}
	return &pb.CertifyRequestEncoded{RequestId: seq, Txn: &pb.TxnID{Origin: origin, Seq: seq}, StartVersion: start, Writeset: b}
}

// One message is decided under one lock, in order: a conflicting pair in
// it commits the first and aborts the second; a request refused before the
// state machine gets its reason; and an overloaded request is aborted
// unless its transaction committed, in which case it gets its version and
// must still wait for that version to be durable.
func TestMessageDecidedInOrderAndOverloadedRetryWaitsForDurability(t *testing.T) {
	s, err := Open(Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batch := []certifying{
		s.prepare(encodedRequest(t, "r1", 1, 0, "1"), false),
		s.prepare(encodedRequest(t, "r1", 2, 0, "2", "1"), false), // same snapshot, row 1 again
		s.prepare(&pb.CertifyRequestEncoded{RequestId: 3, Txn: &pb.TxnID{Origin: "r1", Seq: 3}}, false),
	}
	s.decideAll(batch)
	want := []struct {
		decision pb.Decision
		reason   pb.AbortReason
		waitFor  uint64
	}{
		{pb.Decision_DECISION_COMMIT, 0, 1},
		{pb.Decision_DECISION_ABORT, pb.AbortReason_ABORT_REASON_CONFLICT, 0},
		{pb.Decision_DECISION_ABORT, pb.AbortReason_ABORT_REASON_INVALID, 0},
	}
	for i, w := range want {
		reply, waitFor := s.answer(&batch[i])
		if reply.Decision != w.decision || reply.AbortReason != w.reason || waitFor != w.waitFor || reply.RequestId != uint64(i+1) {
			t.Fatalf("request %d: %v %v wait for %d (%s); want %v %v wait for %d", i+1,
				reply.Decision, reply.AbortReason, waitFor, reply.Detail, w.decision, w.reason, w.waitFor)
		}
	}
	overloaded := []certifying{
		s.prepare(encodedRequest(t, "r1", 1, 0, "1"), true), // committed at 1: its version
		s.prepare(encodedRequest(t, "r1", 9, 1, "9"), true), // new: refused
	}
	s.decideAll(overloaded)
	if reply, waitFor := s.answer(&overloaded[0]); reply.Decision != pb.Decision_DECISION_COMMIT || reply.CommitVersion != 1 || waitFor != 1 {
		t.Fatalf("overloaded retry of a committed transaction: %v at %d, wait for %d; want commit at 1, wait for 1", reply.Decision, reply.CommitVersion, waitFor)
	}
	if reply, waitFor := s.answer(&overloaded[1]); reply.AbortReason != pb.AbortReason_ABORT_REASON_OVERLOADED || waitFor != 0 {
		t.Fatalf("overloaded new transaction: %v %v, wait for %d", reply.Decision, reply.AbortReason, waitFor)
	}
}
