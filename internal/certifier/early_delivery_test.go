package certifier_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
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
// visibility), a replica is sent an entry as soon as the certifier's
// writer takes it, before its flush; the commit's reply still waits for
// the flush, and the message with the entry names the durable version
// as it is, below the entry.
func TestEarlyDeliverySendsAnEntryBeforeItIsDurableAndItsReplyAfter(t *testing.T) {
	stream, sent := certifyEarly(t, upsert("public.t", 1))
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
	stream, sent := certifyEarly(t, upsert("public.a", 1), &pb.Change{Op: pb.Op_OP_TRUNCATE, Table: "public.b"}, upsert("public.c", 1))
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

// A certifier group refuses a session that asks for the commit point:
// it does not deliver before durability.
func TestAGroupRefusesEarlyDelivery(t *testing.T) {
	servers, _ := inProcessGroup(t, 3)
	leader := leaderOf(t, servers)
	stream := rawStream(t, servers[leader])
	if err := stream.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r1", EarlyDelivery: true}}); err != nil {
		t.Fatal(err)
	}
	_, err := stream.Recv()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "early_delivery") {
		t.Fatalf("a group answered a session asking for early delivery with %v; want FailedPrecondition naming it", err)
	}
}

// certifyEarly opens a pushed stream to a certifier that delivers before
// durability, with a flush of earlyFlush, and sends one single-change
// transaction per change in one message, request ids and sequence
// numbers from 1; it returns the stream and when the message was sent.
func certifyEarly(t *testing.T, changes ...*pb.Change) (pb.Certifier_CertifyClient, time.Time) {
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
	return stream, sent
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
