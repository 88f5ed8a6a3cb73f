package certifier

import (
	"bytes"
	"slices"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// CertifyMessage decides a message's requests in order, each against the
// ones before it, and appends a log entry only for a new commit.
func TestCertifyMessageDecidesInOrder(t *testing.T) {
	state := certification.New(certification.Config{WindowVersions: 16}, 0)
	limits := DefaultLimits
	limits.WritesetBytesMax = 64
	reqs := []*pb.CertifyRequestEncoded{
		encodedRequest(t, "r1", 1, 0, "a"),
		encodedRequest(t, "r1", 2, 0, "a"),                      // the same row, the same snapshot
		encodedRequest(t, "r1", 1, 0, "a"),                      // a retry of the first
		encodedRequest(t, "r1", 3, 0, string(make([]byte, 80))), // over the bytes limit
	}
	answers, pending := CertifyMessage(state, 0, limits, reqs, make([]bool, len(reqs)), nil)
	type want struct {
		decision  pb.Decision
		reason    pb.AbortReason
		version   uint64
		waitFor   uint64
		duplicate bool
	}
	wants := []want{
		{pb.Decision_DECISION_COMMIT, 0, 1, 1, false},
		{pb.Decision_DECISION_ABORT, pb.AbortReason_ABORT_REASON_CONFLICT, 0, 0, false},
		{pb.Decision_DECISION_COMMIT, 0, 1, 1, true},
		{pb.Decision_DECISION_ABORT, pb.AbortReason_ABORT_REASON_LIMIT, 0, 0, false},
	}
	for i, w := range wants {
		a := answers[i]
		got := want{a.Reply.Decision, a.Reply.AbortReason, a.Reply.CommitVersion, a.WaitFor, a.Outcome.Duplicate}
		if got != w || a.Reply.RequestId != reqs[i].RequestId {
			t.Errorf("request %d: got %+v (request id %d), want %+v", i, got, a.Reply.RequestId, w)
		}
	}
	if len(pending) != 1 || pending[0].Version != 1 {
		t.Fatalf("pending entries %v, want version 1 alone", pending)
	}
	e, err := pending[0].Decode()
	if err != nil || e.Version != 1 || e.Txn.GetOrigin() != "r1" || e.Txn.GetSeq() != 1 {
		t.Fatalf("entry 1 decodes to %v, %v; want r1/1 at version 1", e, err)
	}
}

// An overloaded request is not certified: a retry of a committed
// transaction gets its version back, a new one aborts as overloaded.
func TestCertifyMessageOverloaded(t *testing.T) {
	state := certification.New(certification.Config{WindowVersions: 16}, 0)
	_, pending := CertifyMessage(state, 0, DefaultLimits, []*pb.CertifyRequestEncoded{encodedRequest(t, "r1", 1, 0, "a")}, []bool{false}, nil)
	reqs := []*pb.CertifyRequestEncoded{encodedRequest(t, "r1", 1, 0, "a"), encodedRequest(t, "r1", 2, 1, "b")}
	answers, pending := CertifyMessage(state, 0, DefaultLimits, reqs, []bool{true, true}, pending)
	if r := answers[0].Reply; r.Decision != pb.Decision_DECISION_COMMIT || r.CommitVersion != 1 || answers[0].WaitFor != 1 {
		t.Errorf("overloaded retry: %v at %d, wait for %d; want commit at 1, wait for 1", r.Decision, r.CommitVersion, answers[0].WaitFor)
	}
	if r := answers[1].Reply; r.AbortReason != pb.AbortReason_ABORT_REASON_OVERLOADED || answers[1].WaitFor != 0 {
		t.Errorf("overloaded new request: %v %v, wait for %d; want an overloaded abort", r.Decision, r.AbortReason, answers[1].WaitFor)
	}
	if len(pending) != 1 || state.Version() != 1 {
		t.Fatalf("overloaded requests changed the log (%d entries) or the state (version %d)", len(pending), state.Version())
	}
}

// TakeSendable lets go what is durable, in arrival order, whatever waits
// before it.
func TestTakeSendableKeepsArrivalOrder(t *testing.T) {
	waiting := []uint64{3, 0, 5, 2, 0}
	ready, still := TakeSendable(waiting, 2, func(v uint64) uint64 { return v }, nil)
	if !slices.Equal(ready, []uint64{0, 2, 0}) || !slices.Equal(still, []uint64{3, 5}) {
		t.Fatalf("ready %v, still %v; want [0 2 0] and [3 5]", ready, still)
	}
}

func TestPushDue(t *testing.T) {
	for _, c := range []struct {
		push               bool
		sendable           int
		delivered, durable uint64
		want               bool
	}{
		{true, 0, 4, 5, true},
		{true, 0, 5, 5, false}, // nothing new
		{true, 1, 4, 5, false}, // the entries go with the reply
		{false, 0, 4, 5, false},
	} {
		if got := PushDue(c.push, c.sendable, c.delivered, c.durable); got != c.want {
			t.Errorf("PushDue(%v, %d, %d, %d) = %v, want %v", c.push, c.sendable, c.delivered, c.durable, got, c.want)
		}
	}
}

// SendReplies sends every entry the stream lacks, in chunks of at most
// messageEntryBytesMax, before the replies, which ride with the last chunk.
func TestSendRepliesSendsEntriesFirst(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, messageEntryBytesMax/2+1) // two do not fit one message
	var log [][]byte
	for v := uint64(1); v <= 4; v++ {
		log = append(log, logentry.EncodePrefix(&pb.TxnID{Origin: "r", Seq: v},
			&pb.Writeset{Changes: []*pb.Change{{Table: "t", Op: pb.Op_OP_UPSERT, Key: big}}}).WithVersion(v, 0).Bytes)
	}
	read := func(dst [][]byte, after, upTo uint64, _ int) ([][]byte, error) {
		return append(dst, log[after:upTo]...), nil
	}
	reply := &pb.CertifyReply{RequestId: 7}
	var sent []*pb.CertifyStreamReply
	delivered, err := SendReplies(read, 1, 4, 4, []*pb.CertifyReply{reply}, func(m *pb.CertifyStreamReply) error {
		sent = append(sent, m)
		return nil
	})
	if err != nil || delivered != 4 {
		t.Fatalf("delivered %d, %v; want 4", delivered, err)
	}
	if len(sent) != 3 {
		t.Fatalf("%d messages, want one per entry (2, 3, 4)", len(sent))
	}
	for i, m := range sent {
		v, _ := logentry.VersionOf(m.Entries[0])
		last := i == len(sent)-1
		if len(m.Entries) != 1 || v != uint64(i+2) || m.DurableVersion != uint64(i+2) || (len(m.Replies) > 0) != last {
			t.Errorf("message %d: %d entries from version %d, durable %d, %d replies", i, len(m.Entries), v, m.DurableVersion, len(m.Replies))
		}
	}
	// Entries sent before they are durable (early.go): no message names a
	// durable version above the durable one.
	sent = nil
	if _, err := SendReplies(read, 1, 4, 2, nil, func(m *pb.CertifyStreamReply) error {
		sent = append(sent, m)
		return nil
	}); err != nil || len(sent) != 3 {
		t.Fatalf("entries 2..4 with durable 2: %d messages, %v", len(sent), err)
	}
	for i, m := range sent {
		if m.DurableVersion != 2 {
			t.Errorf("message %d of entries sent early names durable version %d, want 2", i, m.DurableVersion)
		}
	}
	// Nothing to deliver: the replies go alone, with the durable version.
	sent = nil
	if _, err := SendReplies(read, 4, 4, 4, []*pb.CertifyReply{reply}, func(m *pb.CertifyStreamReply) error {
		sent = append(sent, m)
		return nil
	}); err != nil || len(sent) != 1 || len(sent[0].Entries) != 0 || sent[0].DurableVersion != 4 || len(sent[0].Replies) != 1 {
		t.Fatalf("replies without entries: %v, %v", sent, err)
	}
}

// A reader that returns fewer entries than asked, none, is an error: a
// stream is never sent a gap.
func TestChunkEntriesRefusesAGap(t *testing.T) {
	read := func(dst [][]byte, _, _ uint64, _ int) ([][]byte, error) { return dst, nil }
	err := ChunkEntries(read, 0, 3, func([][]byte, uint64) error {
		t.Fatal("emitted entries the reader did not return")
		return nil
	})
	if err == nil {
		t.Fatal("no error for versions the reader did not return")
	}
}

func TestWindowBase(t *testing.T) {
	for _, c := range []struct{ first, last, window, want uint64 }{
		{0, 0, 10, 0},
		{1, 5, 10, 0},
		{1, 25, 10, 15},
		{21, 25, 10, 20}, // the log starts after the window would
	} {
		if got := WindowBase(c.first, c.last, c.window); got != c.want {
			t.Errorf("WindowBase(%d, %d, %d) = %d, want %d", c.first, c.last, c.window, got, c.want)
		}
	}
}
