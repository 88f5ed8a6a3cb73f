package certifier_test

import (
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// An abort depends on nothing durable, so it is sent at once, even when a
// commit of another session on the same stream (one stream carries all of
// a replica's sessions) is still waiting for its flush (core.go,
// TakeSendable). Held behind that flush, a doomed transaction would keep
// its row locks and its client would wait a flush longer.
// The commit's reply still comes after its entry, once durable.
func TestAnAbortIsNotHeldBehindAnotherSessionsFlush(t *testing.T) {
	const flush = time.Second // an emulated slow disk (Config.SyncDelay)
	srv := listen(t, certifier.Config{SyncDelay: flush})
	stream := rawStream(t, srv)
	// Session 1 writes row 1 and commits; session 2 wrote the same row from
	// the same snapshot: certified against session 1's entry, which is not
	// durable yet, it aborts.
	sent := time.Now()
	if err := stream.Send(&pb.CertifyStreamRequest{
		Open: &pb.OpenSession{Replica: "r1"},
		Requests: []*pb.CertifyRequest{
			{RequestId: 1, Txn: &pb.TxnID{Origin: "r1", Seq: 1}, Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}},
			{RequestId: 2, Txn: &pb.TxnID{Origin: "r1", Seq: 2}, Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}},
		},
	}); err != nil {
		t.Fatal(err)
	}

	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(sent)
	if len(first.Replies) != 1 || first.Replies[0].RequestId != 2 || first.Replies[0].Decision != pb.Decision_DECISION_ABORT {
		t.Fatalf("first message: %v; want only the abort of request 2", first)
	}
	if first.Replies[0].ConflictVersion != 1 {
		t.Fatalf("abort names conflict version %d, want 1", first.Replies[0].ConflictVersion)
	}
	if len(first.Entries) != 0 || first.DurableVersion != 0 {
		t.Fatalf("the abort came with entries %d or durable version %d before the flush", len(first.Entries), first.DurableVersion)
	}
	if waited >= flush/2 {
		t.Fatalf("the abort took %v: it waited for the other session's flush (%v)", waited, flush)
	}

	second, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Entries) != 1 || len(second.Replies) != 1 || second.Replies[0].RequestId != 1 ||
		second.Replies[0].Decision != pb.Decision_DECISION_COMMIT || second.Replies[0].CommitVersion != 1 {
		t.Fatalf("second message: %v; want entry 1 with the commit of request 1", second)
	}
	if v, err := logentry.VersionOf(second.Entries[0]); err != nil || v != 1 {
		t.Fatalf("entry: version %d, %v", v, err)
	}
	if time.Since(sent) < flush {
		t.Fatalf("the commit was answered after %v, before its flush (%v) ended", time.Since(sent), flush)
	}
}
