package certifier_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// earlyReplica is a replica's stream to a group member that takes the
// commit point (mode ed), with everything it was delivered.
type earlyReplica struct {
	t       *testing.T
	name    string
	stream  pb.Certifier_CertifyClient
	entries map[uint64]*pb.LogEntry
	raw     map[uint64][]byte
	durable uint64 // the last durable version named
	// epoch and epochFirst: the epoch the certifier certifies in, and its
	// first version, as the stream's first message named them
	epoch, epochFirst uint64
}

func openEarly(t *testing.T, srv *certifier.Server, name string) *earlyReplica {
	t.Helper()
	r := &earlyReplica{t: t, name: name, stream: rawStream(t, srv), entries: map[uint64]*pb.LogEntry{}, raw: map[uint64][]byte{}}
	if err := r.stream.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: name, Push: true, EarlyDelivery: true}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// certify sends transaction seq, writing one row, and returns its reply.
func (r *earlyReplica) certify(seq uint64, row int) *pb.CertifyReply {
	r.t.Helper()
	if err := r.stream.Send(&pb.CertifyStreamRequest{Requests: []*pb.CertifyRequest{{RequestId: seq, Txn: &pb.TxnID{Origin: r.name, Seq: seq},
		Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", row)}}}}}); err != nil {
		r.t.Fatal(err)
	}
	for {
		m := r.receive()
		for _, reply := range m.Replies {
			if reply.RequestId == seq {
				return reply
			}
		}
	}
}

// receive takes the next message and records what it delivers.
func (r *earlyReplica) receive() *pb.CertifyStreamReply {
	r.t.Helper()
	m, err := r.stream.Recv()
	if err != nil {
		r.t.Fatalf("replica %s: %v", r.name, err)
	}
	for _, b := range m.Entries {
		e, err := logentry.Decode(b)
		if err != nil {
			r.t.Fatal(err)
		}
		r.entries[e.Version], r.raw[e.Version] = e, b
	}
	r.durable = max(r.durable, m.DurableVersion)
	if m.Epoch != 0 { // the stream's first message names it
		r.epoch, r.epochFirst = m.Epoch, m.EpochFirstVersion
	}
	return m
}

// A group's leader answers a stream that takes the commit point, and
// delivers the entry, as it decides: with both followers stopped nothing
// can commit, and the commit is still answered at once. The stream hears
// that the version is durable once a follower is back.
func TestAGroupLeaderDeliversAtTheCommitPoint(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{ElectionTicks: 200}) // 2-4 s: no election while the followers are away
	leader := leaderOf(t, g.servers)
	r := openEarly(t, g.servers[leader], "r1")
	if reply := r.certify(1, 1); reply.CommitVersion != 1 {
		t.Fatalf("first commit: %v", reply)
	}
	g.waitDurable(1)
	for i := range g.servers {
		if i != leader {
			g.stop(i)
		}
	}
	reply := r.certify(2, 2)
	if reply.Decision != pb.Decision_DECISION_COMMIT || reply.CommitVersion != 2 || r.entries[2] == nil {
		t.Fatalf("with no follower: reply %v, entry 2 delivered %v; want the commit at 2 answered and delivered", reply, r.entries[2] != nil)
	}
	if d := g.servers[leader].Service.DurableVersion(); d != 1 || r.durable != 1 {
		t.Fatalf("durable version %d, named to the stream %d: want 1, version 2 has no majority", d, r.durable)
	}
	g.start((leader + 1) % 3)
	for r.durable < 2 {
		r.receive()
	}
}

// When the leader loses its leadership with a version it delivered early
// and Raft never committed, that version fails: the new leader tells a
// replica holding it to rewind to the version before, gives the number
// to another transaction, and the old leader, healed, serves that one.
func TestAGroupLeadersUncommittedVersionFailsAndIsRewound(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{ElectionTicks: 100})
	old := leaderOf(t, g.servers)
	r1 := openEarly(t, g.servers[old], "r1")
	if reply := r1.certify(1, 1); reply.CommitVersion != 1 {
		t.Fatalf("first commit: %v", reply)
	}
	g.waitDurable(1)
	g.isolate(old)
	time.Sleep(200 * time.Millisecond) // members reread their partition files every 50 ms
	if reply := r1.certify(2, 2); reply.CommitVersion != 2 || r1.entries[2] == nil {
		t.Fatalf("the isolated leader's commit: %v, entry delivered %v; want version 2 answered and delivered at its commit point", reply, r1.entries[2] != nil)
	}
	next := newLeaderBesides(t, g, old)

	err := openEarlyAt(t, g.servers[next], "r1", 2, historyOf([]*pb.LogEntry{r1.entries[1], r1.entries[2]}))
	var rewind *pb.RewindRequired
	for _, d := range status.Convert(err).Details() {
		if rr, ok := d.(*pb.RewindRequired); ok {
			rewind = rr
		}
	}
	if status.Code(err) != codes.FailedPrecondition || rewind == nil || rewind.CommonVersion != 1 {
		t.Fatalf("the new leader admitted a replica holding the failed version 2 with %v (rewind %v); want a rewind to 1", err, rewind)
	}

	r2 := openEarly(t, g.servers[next], "r2")
	if reply := r2.certify(1, 3); reply.CommitVersion != 2 {
		t.Fatalf("the new leader's first commit: %v; want version 2, the failed one's number", reply)
	}
	if r2.epoch <= r1.entries[2].GetEpoch() || r2.epochFirst != 2 {
		t.Fatalf("the new leader's messages name epoch %d from version %d; want a later epoch than %d, from version 2: "+
			"a transaction of an earlier epoch at 2 or above has failed", r2.epoch, r2.epochFirst, r1.entries[2].GetEpoch())
	}
	if r2.entries[2].GetEpoch() <= r1.entries[2].GetEpoch() {
		t.Fatalf("the new leader's version 2 is of epoch %d, the failed one of %d: admission cannot tell them apart", r2.entries[2].GetEpoch(), r1.entries[2].GetEpoch())
	}
	g.heal()
	waitFor(t, func() bool { return g.servers[old].Service.DurableVersion() >= 2 })
	if got := fetchOne(t, g.servers[old], 2); string(got) != string(r2.raw[2]) {
		t.Fatal("the old leader serves another entry at version 2 than the one the group committed: its speculative tail was kept")
	}
}

// newLeaderBesides waits until a member other than old leads.
func newLeaderBesides(t *testing.T, g *restartableGroup, old int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, s := range g.servers {
			if i != old && s != nil && s.Service.StatusNow().Role == "leader" {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no member besides the isolated one took over")
	return -1
}

// openEarlyAt opens a session that takes the commit point for a replica
// at version with history, and returns how the member answered.
func openEarlyAt(t *testing.T, srv *certifier.Server, name string, version uint64, history []*pb.EpochRun) error {
	t.Helper()
	stream := rawStream(t, srv)
	if err := stream.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: name, ReplicaVersion: version, History: history, EarlyDelivery: true},
		CatchUp: true}); err != nil {
		t.Fatal(err)
	}
	_, err := stream.Recv()
	return err
}

// fetchOne is the entry a member serves at version.
func fetchOne(t *testing.T, srv *certifier.Server, version uint64) []byte {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fetch, err := pb.NewCertifierClient(conn).Fetch(ctx, &pb.FetchRequest{AfterVersion: version - 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := fetch.Recv()
	if err != nil || len(m.Entries) == 0 {
		t.Fatalf("fetch after %d: %v, %v", version-1, m, err)
	}
	return m.Entries[0]
}

// Versions a leader decided while no stream took entries early are not in
// its recent ring, and, while Raft has not committed them, in no log: a
// stream that takes entries early and opens then is delivered nothing
// beyond them until they are durable, and then everything, without a gap.
func TestAGroupLeaderHoldsEarlyDeliveryBehindVersionsItsRingLacks(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{ElectionTicks: 200})
	leader := leaderOf(t, g.servers)
	// A new leader certifies once it has applied its log, its term's first
	// entry and the group's base included, which need a follower: stopped
	// before that, they would leave it unable to decide versions 1 and 2.
	// SyncVersion answers only a leader that certifies, and decides
	// nothing.
	waitFor(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := g.servers[leader].Service.SyncVersion(ctx, &pb.SyncVersionRequest{})
		return err == nil
	})
	for i := range g.servers {
		if i != leader {
			g.stop(i)
		}
	}
	late := rawStream(t, g.servers[leader]) // takes entries once durable
	if err := late.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r0"}, Requests: []*pb.CertifyRequest{
		{RequestId: 1, Txn: &pb.TxnID{Origin: "r0", Seq: 1}, Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}},
		{RequestId: 2, Txn: &pb.TxnID{Origin: "r0", Seq: 2}, Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 2)}}}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.servers[leader].Service.StatusNow().Version == 2 })

	r := openEarly(t, g.servers[leader], "r1")
	if err := r.stream.Send(&pb.CertifyStreamRequest{Requests: []*pb.CertifyRequest{{RequestId: 3, Txn: &pb.TxnID{Origin: "r1", Seq: 3},
		Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 3)}}}}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *pb.CertifyStreamReply, 16)
	failed := make(chan error, 1)
	go func() {
		for {
			m, err := r.stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			got <- m
		}
	}()
	select {
	case m := <-got:
		if len(m.Entries) > 0 || len(m.Replies) > 0 {
			t.Fatalf("before versions 1 and 2 are durable the stream was sent %d entries and %v", len(m.Entries), m.Replies)
		}
	case err := <-failed:
		t.Fatalf("the stream failed before versions 1 and 2 were durable: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	g.start((leader + 1) % 3)
	var versions []uint64
	for {
		select {
		case m := <-got:
			for _, b := range m.Entries {
				v, err := logentry.VersionOf(b)
				if err != nil {
					t.Fatal(err)
				}
				versions = append(versions, v)
			}
			for _, reply := range m.Replies {
				if reply.RequestId == 3 {
					if reply.CommitVersion != 3 || len(versions) != 3 || versions[0] != 1 || versions[2] != 3 {
						t.Fatalf("reply %v after entries %v; want commit 3 after entries 1, 2, 3", reply, versions)
					}
					return
				}
			}
		case err := <-failed:
			t.Fatalf("the stream failed once the follower was back (entries so far %v): %v", versions, err)
		case <-time.After(15 * time.Second):
			t.Fatalf("no reply 15 s after a follower came back (entries so far %v)", versions)
		}
	}
}
