package certifier_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// earlyFlush is an emulated slow disk (Config.SyncDelay) long enough that
// what is sent before it ends was sent before durability.
const earlyFlush = time.Second

// With delivery before durability (Eventual Durability §3.7, early
// visibility), a replica is sent an entry as soon as the certifier
// decides it, before its flush; the commit's reply still waits for
// the flush, and the message with the entry names the durable version
// as it is, below the entry.
func TestEarlyDeliverySendsAnEntryBeforeItIsDurableAndItsReplyAfter(t *testing.T) {
	_, stream, sent := certifyEarly(t, upsert("public.t", 1))
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(sent); waited >= earlyFlush/2 {
		t.Fatalf("the entry came after %v: it waited for its flush (%v)", waited, earlyFlush)
	}
	if versionsOf(t, first.Entries) != "1" || len(first.Replies) != 0 || first.DurableVersion != 0 {
		t.Fatalf("first message: entries %s, %d replies, durable %d; want entry 1 alone, durable 0",
			versionsOf(t, first.Entries), len(first.Replies), first.DurableVersion)
	}
	second, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(sent) < earlyFlush {
		t.Fatalf("the commit was answered after %v, before its flush (%v) ended", time.Since(sent), earlyFlush)
	}
	if len(second.Entries) != 0 || len(second.Replies) != 1 || second.Replies[0].CommitVersion != 1 || second.DurableVersion != 1 {
		t.Fatalf("second message: %v; want the commit of version 1 alone, durable 1", second)
	}
}

// TRUNCATE and DDL are barriers: their entries, and every entry after
// them, are delivered only once durable, so that a replica's versions
// that fail are only row changes (early.go).
func TestEarlyDeliveryHoldsABarrierAndWhatFollowsUntilDurable(t *testing.T) {
	_, stream, sent := certifyEarly(t, upsert("public.a", 1), &pb.Change{Op: pb.Op_OP_TRUNCATE, Table: "public.b"}, upsert("public.c", 1))
	var early []string
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(sent) >= earlyFlush {
			if got := versionsOf(t, m.Entries); len(early) == 0 || got != "2,3" {
				t.Fatalf("before the flush: entries %v; after it: %s; want 1 before, 2,3 after", early, got)
			}
			break
		}
		if len(m.Replies) > 0 {
			t.Fatalf("a reply before the flush: %v", m.Replies)
		}
		early = append(early, versionsOf(t, m.Entries))
	}
	if len(early) != 1 || early[0] != "1" {
		t.Fatalf("before the flush the stream got entries %v; want version 1 only (2 is a TRUNCATE)", early)
	}
}

// A certifier client settles a pending call from an entry it was
// delivered (a re-sent request learns its outcome that way) only once the
// entry is durable: an entry delivered early may still fail.
func TestCertclientSettlesFromAnEarlyEntryOnlyOnceDurable(t *testing.T) {
	srv := listen(t, certifier.Config{SyncDelay: earlyFlush, UnsafeDeliverBeforeDurable: true})
	entryAt := make(chan time.Duration, 1)
	sent := time.Now()
	c, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "r1", Push: true,
		OnEntries: func(entries []logentry.Entry, durable uint64) error {
			if len(entries) > 0 && durable < entries[len(entries)-1].Version {
				select {
				case entryAt <- time.Since(sent):
				default:
				}
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reply, err := c.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: 1},
		Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}})
	if err != nil {
		t.Fatal(err)
	}
	answered := time.Since(sent)
	if reply.Decision != pb.Decision_DECISION_COMMIT || reply.CommitVersion != 1 {
		t.Fatalf("reply: %v", reply)
	}
	select {
	case at := <-entryAt:
		if at >= earlyFlush/2 {
			t.Fatalf("the entry came after %v, not before its flush", at)
		}
	default:
		t.Fatal("no entry came before it was durable")
	}
	if answered < earlyFlush {
		t.Fatalf("the call was answered after %v, before the flush (%v): settled from an entry not yet durable", answered, earlyFlush)
	}
}

// A stream that takes the commit point (OpenSession.early_delivery) gets
// its commit's entry and reply before the flush, and SyncVersion covers
// the version acknowledged; a stream that does not gets the entry only
// once durable. A TRUNCATE's reply waits for its flush on either.
func TestAStreamThatTakesTheCommitPointIsAnsweredBeforeTheFlush(t *testing.T) {
	srv := listen(t, certifier.Config{SyncDelay: earlyFlush})
	plain := rawStream(t, srv)
	if err := plain.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r2", Push: true}}); err != nil {
		t.Fatal(err)
	}
	early := rawStream(t, srv)
	sent := time.Now()
	if err := early.Send(&pb.CertifyStreamRequest{
		Open: &pb.OpenSession{Replica: "r1", EarlyDelivery: true},
		Requests: []*pb.CertifyRequest{{RequestId: 1, Txn: &pb.TxnID{Origin: "r1", Seq: 1},
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}}},
	}); err != nil {
		t.Fatal(err)
	}
	m, err := early.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(sent); waited >= earlyFlush/2 {
		t.Fatalf("the commit was answered after %v: it waited for its flush (%v)", waited, earlyFlush)
	}
	if versionsOf(t, m.Entries) != "1" || len(m.Replies) != 1 || m.Replies[0].CommitVersion != 1 || m.DurableVersion != 0 {
		t.Fatalf("first message: entries %s, replies %v, durable %d; want entry 1 with its commit, durable 0",
			versionsOf(t, m.Entries), m.Replies, m.DurableVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.SyncVersion(ctx); err != nil || v < 1 {
		t.Fatalf("SyncVersion = %d, %v before the flush: want at least the version acknowledged, 1", v, err)
	}
	if p, err := plain.Recv(); err != nil || versionsOf(t, p.Entries) != "1" || time.Since(sent) < earlyFlush {
		t.Fatalf("the other stream got entries %s after %v (%v): want entry 1 once durable, after %v", versionsOf(t, p.GetEntries()), time.Since(sent), err, earlyFlush)
	}

	sent = time.Now()
	if err := early.Send(&pb.CertifyStreamRequest{Requests: []*pb.CertifyRequest{{RequestId: 2, Txn: &pb.TxnID{Origin: "r1", Seq: 2}, StartVersion: 1,
		Writeset: &pb.Writeset{Changes: []*pb.Change{{Op: pb.Op_OP_TRUNCATE, Table: "public.t"}}}}}}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := early.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Replies) == 0 {
			continue // the durable version of entry 1, pushed
		}
		if m.Replies[0].CommitVersion != 2 || time.Since(sent) < earlyFlush {
			t.Fatalf("the TRUNCATE was answered %v after it was sent (%v): want version 2 once durable", time.Since(sent), m.Replies)
		}
		break
	}
}

// A replica that reopens its stream (a dropped connection, a new agent
// run) holding an entry this process delivered early is admitted once the
// entry is durable: it holds the log's tail, not a failed version.
func TestAReplicaReopeningItsStreamWithAnEarlyEntryIsAdmitted(t *testing.T) {
	srv, stream, sent := certifyEarly(t, upsert("public.t", 1))
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	e, err := logentry.Decode(m.Entries[0])
	if err != nil || m.DurableVersion != 0 {
		t.Fatalf("entry %v (%v), durable %d: want entry 1 before it is durable", e, err, m.DurableVersion)
	}
	if err := openWith(t, srv, 1, historyOf([]*pb.LogEntry{e})); err != nil {
		t.Fatalf("a replica holding the version this process delivered and is making durable was refused: %v", status.Convert(err).Message())
	}
	if time.Since(sent) < earlyFlush {
		t.Fatalf("admitted after %v, before the flush of the version it holds (%v)", time.Since(sent), earlyFlush)
	}
}

// A stream that holds entries sent early hears when they become durable,
// in a message of its own if nothing else goes out: its replica's safe
// commits and settlements wait for that.
func TestAStreamHoldingEarlyEntriesHearsWhenTheyAreDurable(t *testing.T) {
	srv := listen(t, certifier.Config{SyncDelay: earlyFlush, UnsafeDeliverBeforeDurable: true})
	observer := rawStream(t, srv) // another replica's: no reply of its own waits
	if err := observer.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r2", Push: true}}); err != nil {
		t.Fatal(err)
	}
	writer := rawStream(t, srv)
	sent := time.Now()
	if err := writer.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r1"},
		Requests: []*pb.CertifyRequest{{RequestId: 1, Txn: &pb.TxnID{Origin: "r1", Seq: 1},
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}}}}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := observer.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.DurableVersion >= 1 {
			if time.Since(sent) < earlyFlush || time.Since(sent) > 3*earlyFlush {
				t.Fatalf("durable version 1 named after %v, want once the flush of %v ended", time.Since(sent), earlyFlush)
			}
			return
		}
	}
}

// SyncVersion covers every version sent to a replica, also an entry sent
// before it is durable, which that replica may show to its clients.
func TestSyncVersionCoversEntriesSentEarly(t *testing.T) {
	srv, stream, _ := certifyEarly(t, upsert("public.t", 1))
	if m, err := stream.Recv(); err != nil || versionsOf(t, m.Entries) != "1" || m.DurableVersion != 0 {
		t.Fatalf("first message %v, %v: want entry 1 before it is durable", m, err)
	}
	c, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := c.SyncVersion(ctx); err != nil || v < 1 {
		t.Fatalf("SyncVersion = %d, %v with version 1 sent early: want at least 1", v, err)
	}
}

// An entry decided while the write of an earlier one is in flight is
// delivered at once: it waits for no write, not even the one it cannot
// join.
func TestAnEntryIsDeliveredWhileTheWriteBeforeItIsInFlight(t *testing.T) {
	_, stream, _ := certifyEarly(t, upsert("public.t", 1))
	if m, err := stream.Recv(); err != nil || versionsOf(t, m.Entries) != "1" || m.DurableVersion != 0 {
		t.Fatalf("first message %v, %v: want entry 1 before it is durable", m, err)
	}
	sent := time.Now()
	if err := stream.Send(&pb.CertifyStreamRequest{Requests: []*pb.CertifyRequest{{RequestId: 2, Txn: &pb.TxnID{Origin: "r1", Seq: 2}, StartVersion: 1,
		Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 2)}}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(sent); waited >= earlyFlush/2 || versionsOf(t, m.Entries) != "2" || m.DurableVersion != 0 {
		t.Fatalf("after %v: entries %s, durable %d; want entry 2 at once, while the flush of 1 (%v) runs",
			waited, versionsOf(t, m.Entries), m.DurableVersion, earlyFlush)
	}
}

// The entries the recent ring cannot hold without dropping one not yet
// durable are not sent early (the log does not hold them yet): they go
// out once durable, after those it holds went out early.
func TestEntriesBeyondTheRingAreSentOnceDurable(t *testing.T) {
	srv := listen(t, certifier.Config{SyncDelay: earlyFlush, UnsafeDeliverBeforeDurable: true, RecentEntriesMax: 2})
	stream := rawStream(t, srv)
	msg := &pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r1", Push: true}}
	for i := 1; i <= 5; i++ {
		msg.Requests = append(msg.Requests, &pb.CertifyRequest{RequestId: uint64(i), Txn: &pb.TxnID{Origin: "r1", Seq: uint64(i)},
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", i)}}})
	}
	sent := time.Now()
	if err := stream.Send(msg); err != nil {
		t.Fatal(err)
	}
	var early, late []string
	for replies := 0; replies < 5; {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Entries) > 0 && time.Since(sent) < earlyFlush {
			early = append(early, versionsOf(t, m.Entries))
		} else if len(m.Entries) > 0 {
			late = append(late, versionsOf(t, m.Entries))
		}
		replies += len(m.Replies)
	}
	if e, l := strings.Join(early, ","), strings.Join(late, ","); e != "1,2" || l != "3,4,5" {
		t.Fatalf("entries %q before the flush and %q after; want 1,2 (the ring holds 2) and then 3,4,5", e, l)
	}
}

// Log retention counts a replica's reported version only up to the
// durable version: a replica that took entries early may hold versions
// that fail.
func TestRetentionCountsAReplicaOnlyUpToTheDurableVersion(t *testing.T) {
	srv := listen(t, certifier.Config{Retention: certifier.RetentionPolicy{Bytes: -1, ReplicaTimeout: time.Hour, Interval: 20 * time.Millisecond}})
	stream := rawStream(t, srv)
	claimed := uint64(1000)
	if err := stream.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r1"}, AppliedVersion: &claimed,
		Requests: []*pb.CertifyRequest{{RequestId: 1, Txn: &pb.TxnID{Origin: "r1", Seq: 1},
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}}}}); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, srv, "the retention decision counts r1 at the durable version, 1", func(st *pb.StatusReply) bool {
		for _, r := range st.Retention.GetReplicas() {
			if r.Name == "r1" {
				return r.AppliedVersion == 1
			}
		}
		return false
	})
}

// certifyEarly opens a pushed stream to a certifier that delivers before
// durability, with a flush of earlyFlush, and sends one single-change
// transaction per change in one message, request ids and sequence
// numbers from 1; it returns the stream and when the message was sent.
func certifyEarly(t *testing.T, changes ...*pb.Change) (*certifier.Server, pb.Certifier_CertifyClient, time.Time) {
	t.Helper()
	srv := listen(t, certifier.Config{SyncDelay: earlyFlush, UnsafeDeliverBeforeDurable: true})
	stream := rawStream(t, srv)
	msg := &pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r1", Push: true}}
	for i, c := range changes {
		n := uint64(i + 1)
		msg.Requests = append(msg.Requests, &pb.CertifyRequest{RequestId: n, Txn: &pb.TxnID{Origin: "r1", Seq: n},
			Writeset: &pb.Writeset{Changes: []*pb.Change{c}}})
	}
	sent := time.Now()
	if err := stream.Send(msg); err != nil {
		t.Fatal(err)
	}
	return srv, stream, sent
}

// versionsOf lists encoded entries' versions, comma-separated.
func versionsOf(t *testing.T, entries [][]byte) string {
	t.Helper()
	s := ""
	for i, b := range entries {
		v, err := logentry.VersionOf(b)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			s += ","
		}
		s += strconv.FormatUint(v, 10)
	}
	return s
}
