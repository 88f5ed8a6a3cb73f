package certifier_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

func listen(t *testing.T, cfg certifier.Config) *certifier.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	srv, err := certifier.Listen(cfg, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// rawStream opens a Certify stream to srv without a client library, for
// tests that look at the stream's messages themselves. It ends with the test.
func rawStream(t *testing.T, srv *certifier.Server) pb.Certifier_CertifyClient {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	stream, err := pb.NewCertifierClient(conn).Certify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// replica is a test's view of one replica's stream: the entries it was
// delivered, in order.
type replica struct {
	client *certclient.Client
	mu     sync.Mutex
	got    []*pb.LogEntry
	seq    uint64
	name   string
}

func connect(t *testing.T, srv *certifier.Server, name string, from uint64) *replica {
	t.Helper()
	r := &replica{name: name}
	c, err := certclient.New(certclient.Options{
		Target: srv.Addr().String(), Replica: name, ReplicaVersion: from,
		OnEntries: func(entries []logentry.Entry, _ uint64) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, e := range entries {
				d, err := e.Decode()
				if err != nil {
					t.Errorf("decode entry %d: %v", e.Version, err)
				}
				r.got = append(r.got, d)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r.client = c
	return r
}

func (r *replica) certify(t *testing.T, start uint64, changes ...*pb.Change) *pb.CertifyReply {
	t.Helper()
	r.seq++
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := r.client.Certify(ctx, &pb.CertifyRequest{
		Txn: &pb.TxnID{Origin: r.name, Seq: r.seq}, StartVersion: start, Writeset: &pb.Writeset{Changes: changes},
	})
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func (r *replica) delivered() []*pb.LogEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pb.LogEntry(nil), r.got...)
}

func upsert(table string, pk int) *pb.Change {
	return &pb.Change{Table: table, Op: pb.Op_OP_UPSERT, Key: []byte("[" + strconv.Itoa(pk) + "]"), Row: []byte(`{"v":1}`)}
}

func TestCertifyOverGRPCCommitsAbortsAndDeliversInOrder(t *testing.T) {
	srv := listen(t, certifier.Config{})
	a, b := connect(t, srv, "a", 0), connect(t, srv, "b", 0)

	first := a.certify(t, 0, upsert("public.t", 1))
	if first.Decision != pb.Decision_DECISION_COMMIT || first.CommitVersion != 1 {
		t.Fatalf("first: %v", first)
	}
	// b has not seen version 1 and writes the same row: Tashkent's lost-update case.
	lost := b.certify(t, 0, upsert("public.t", 1))
	if lost.Decision != pb.Decision_DECISION_ABORT || lost.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || lost.ConflictVersion != 1 {
		t.Fatalf("conflicting write: %v", lost)
	}
	if lost.Detail == "" {
		t.Fatal("an abort must say why")
	}
	// The reply that depends on version 1 comes after version 1 was delivered to b.
	if got := b.delivered(); len(got) != 1 || got[0].Version != 1 || got[0].Txn.Origin != "a" {
		t.Fatalf("b was delivered %v, want version 1 from a", got)
	}
	second := b.certify(t, 1, upsert("public.t", 1), upsert("public.u", 2))
	if second.Decision != pb.Decision_DECISION_COMMIT || second.CommitVersion != 2 {
		t.Fatalf("after refresh: %v", second)
	}
	third := a.certify(t, 1, upsert("public.t", 3))
	if third.CommitVersion != 3 {
		t.Fatalf("third: %v", third)
	}
	if got := a.delivered(); len(got) != 3 || got[1].Version != 2 || len(got[1].Writeset.Changes) != 2 {
		t.Fatalf("a was delivered %v, want versions 1..3 with b's writeset at 2", got)
	}
	if st := srv.Service.StatusNow(); st.Version != 3 || st.DurableVersion != 3 || st.Aborts != 1 || st.Certifications != 4 {
		t.Fatalf("status %v", st)
	}
}

func TestLimitsAbortWithANamedLimitAndLogNothing(t *testing.T) {
	srv := listen(t, certifier.Config{Limits: certifier.Limits{WritesetBytesMax: 1000, WritesetKeysMax: 3}})
	r := connect(t, srv, "r", 0)
	big := &pb.Change{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte("[1]"), Row: make([]byte, 2000)}
	for name, changes := range map[string][]*pb.Change{
		"writeset bytes max": {big},
		"writeset keys max":  {upsert("public.t", 1), upsert("public.t", 2), upsert("public.t", 3), upsert("public.t", 4)},
	} {
		reply := r.certify(t, 0, changes...)
		if reply.Decision != pb.Decision_DECISION_ABORT || reply.AbortReason != pb.AbortReason_ABORT_REASON_LIMIT {
			t.Fatalf("%s: %v", name, reply)
		}
		if !contains(reply.Detail, name) {
			t.Fatalf("%s: detail %q does not name the limit", name, reply.Detail)
		}
	}
	if v := srv.Service.Version(); v != 0 {
		t.Fatalf("over-limit requests assigned versions: version %d", v)
	}
	if ok := r.certify(t, 0, upsert("public.t", 1)); ok.Decision != pb.Decision_DECISION_COMMIT || ok.CommitVersion != 1 {
		t.Fatalf("a request within limits after rejected ones: %v", ok)
	}
}

func TestMalformedRequestsAreRejectedClearly(t *testing.T) {
	srv := listen(t, certifier.Config{})
	r := connect(t, srv, "r", 0)
	for name, change := range map[string]*pb.Change{
		"no op":       {Table: "public.t", Key: []byte("[1]")},
		"no table":    {Op: pb.Op_OP_UPSERT, Key: []byte("[1]")},
		"no key":      {Table: "public.t", Op: pb.Op_OP_DELETE},
		"future snap": nil,
	} {
		start := uint64(0)
		changes := []*pb.Change{change}
		if change == nil {
			start, changes = 99, []*pb.Change{upsert("public.t", 1)}
		}
		reply := r.certify(t, start, changes...)
		if reply.Decision != pb.Decision_DECISION_ABORT || reply.AbortReason != pb.AbortReason_ABORT_REASON_INVALID || reply.Detail == "" {
			t.Errorf("%s: %v", name, reply)
		}
	}
	empty := r.certify(t, 0)
	if empty.AbortReason != pb.AbortReason_ABORT_REASON_INVALID || !contains(empty.Detail, "read-only") {
		t.Errorf("empty writeset: %v", empty)
	}

	// A stream that does not open a session first is refused.
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pb.NewCertifierClient(conn).Certify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&pb.CertifyStreamRequest{CatchUp: true})
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream without open: %v, want InvalidArgument", err)
	}
}

func TestReplicaAheadOfTheCertifierIsRefused(t *testing.T) {
	srv := listen(t, certifier.Config{})
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pb.NewCertifierClient(conn).Certify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "r", ReplicaVersion: 5}})
	_, err = stream.Recv()
	if status.Code(err) != codes.FailedPrecondition || !contains(err.Error(), "failed versions") {
		t.Fatalf("replica ahead: %v, want FailedPrecondition naming failed versions", err)
	}
}

func TestRestartRecoversVersionsIndexAndTransactionIDs(t *testing.T) {
	dir := t.TempDir()
	srv := listen(t, certifier.Config{DataDir: dir})
	r := connect(t, srv, "r", 0)
	for i := range 10 {
		if reply := r.certify(t, uint64(i), upsert("public.t", i)); reply.CommitVersion != uint64(i+1) {
			t.Fatalf("commit %d: %v", i, reply)
		}
	}
	r.client.Close()
	srv.Close()

	srv = listen(t, certifier.Config{DataDir: dir})
	if v := srv.Service.DurableVersion(); v != 10 {
		t.Fatalf("durable version after restart %d, want 10", v)
	}
	r2 := connect(t, srv, "r-after-restart", 10)
	// The conflict index survived: a snapshot at 4 writing row 7 (version 8) aborts.
	if reply := r2.certify(t, 4, upsert("public.t", 7)); reply.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || reply.ConflictVersion != 8 {
		t.Fatalf("after restart, conflicting write: %v", reply)
	}
	// A retry of transaction r/3 (committed at version 3) gets version 3 again.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dup, err := r2.client.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r", Seq: 3}, StartVersion: 2, Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 2)}}})
	if err != nil || dup.Decision != pb.Decision_DECISION_COMMIT || dup.CommitVersion != 3 {
		t.Fatalf("retry after restart: %v %v, want commit at version 3", dup, err)
	}
	if srv.Service.Version() != 10 {
		t.Fatalf("the retry assigned a new version: %d", srv.Service.Version())
	}
}

func TestFetchStreamsTheLogAndFollowsIt(t *testing.T) {
	srv := listen(t, certifier.Config{RecentEntriesMax: 4}) // most reads come from disk
	r := connect(t, srv, "r", 0)
	for i := range 20 {
		r.certify(t, uint64(i), upsert("public.t", i))
	}
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pb.NewCertifierClient(conn).Fetch(ctx, &pb.FetchRequest{AfterVersion: 5, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	// Version 21 is certified while the fetch is following the log.
	later := make(chan *pb.CertifyReply, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		reply, _ := r.client.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r", Seq: 1000}, StartVersion: 20,
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 100), upsert("public.t", 101)}}})
		later <- reply
	}()
	for next := uint64(6); next <= 21; {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("fetch at %d: %v", next, err)
		}
		for _, b := range msg.Entries {
			e, err := logentry.Decode(b)
			if err != nil || e.Version != next {
				t.Fatalf("fetch delivered %v (%v), want version %d", e, err, next)
			}
			next++
		}
	}
	if reply := <-later; reply.GetCommitVersion() != 21 {
		t.Fatalf("certify while following: %v", reply)
	}
	once, err := pb.NewCertifierClient(conn).Fetch(ctx, &pb.FetchRequest{AfterVersion: 19})
	if err != nil {
		t.Fatal(err)
	}
	var versions []uint64
	for {
		msg, err := once.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range msg.Entries {
			v, _ := logentry.VersionOf(b)
			versions = append(versions, v)
		}
	}
	if len(versions) != 2 || versions[0] != 20 || versions[1] != 21 {
		t.Fatalf("fetch without follow after 19: %v, want [20 21]", versions)
	}
}

func TestConcurrentStreamsNeverShareAVersion(t *testing.T) {
	srv := listen(t, certifier.Config{})
	const streams, perStream = 4, 200
	var mu sync.Mutex
	owner := map[uint64]string{}
	var wg sync.WaitGroup
	for s := range streams {
		r := connect(t, srv, "r"+strconv.Itoa(s), 0)
		for c := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perStream / 8 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					id := &pb.TxnID{Origin: r.name, Seq: uint64(c*1000 + i)}
					reply, err := r.client.Certify(ctx, &pb.CertifyRequest{Txn: id, StartVersion: 0,
						Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", s*100000+c*1000+i)}}})
					cancel()
					if err != nil || reply.Decision != pb.Decision_DECISION_COMMIT {
						t.Errorf("certify: %v %v", reply, err)
						return
					}
					mu.Lock()
					if prev, dup := owner[reply.CommitVersion]; dup {
						t.Errorf("version %d assigned to %s and %v", reply.CommitVersion, prev, id)
					}
					owner[reply.CommitVersion] = id.String()
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(owner) != streams*perStream || srv.Service.DurableVersion() != streams*perStream {
		t.Fatalf("%d versions assigned, durable %d; want %d", len(owner), srv.Service.DurableVersion(), streams*perStream)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
