package certclient_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certclient/fakecert"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/netutil"
)

func listen(t *testing.T, dir, addr string) *certifier.Server {
	t.Helper()
	var srv *certifier.Server
	var err error
	for range 50 { // the port may linger for a moment after a restart
		if srv, err = certifier.Listen(certifier.Config{DataDir: dir}, addr, ""); err == nil {
			return srv
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// A certifier restart with calls in flight: every call gets exactly one
// answer, each commit's version holds that very transaction, and OnEntries
// sees every version once, in order, never from two streams at once.
func TestRestartWithCallsInFlightAnswersEachOnceAndDeliversInOrder(t *testing.T) {
	dir := t.TempDir()
	port, _ := netutil.FreePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv := listen(t, dir, addr)

	var mu sync.Mutex
	var seen []uint64
	owner := map[uint64]string{}
	inside := 0
	client, err := certclient.New(certclient.Options{Target: addr, Replica: "r1", ReconnectDelay: 10 * time.Millisecond,
		OnEntries: func(entries []logentry.Entry, _ uint64) error {
			mu.Lock()
			inside++
			if inside > 1 {
				t.Error("OnEntries called concurrently")
			}
			for _, e := range entries {
				h, err := logentry.HeaderOf(e.Bytes)
				if err != nil {
					t.Error(err)
				}
				seen = append(seen, e.Version)
				owner[e.Version] = h.Origin + "/" + strconv.FormatUint(h.Seq, 10)
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a replica applying writesets
			mu.Lock()
			inside--
			mu.Unlock()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	const calls = 400
	replies := make([]*pb.CertifyReply, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			time.Sleep(time.Duration(i) * 250 * time.Microsecond) // spread over the restart
			r, err := client.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: uint64(i + 1)}, StartVersion: 0,
				Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(strconv.Itoa(i)), Row: []byte("x")}}}})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			replies[i] = r
		}()
	}
	time.Sleep(40 * time.Millisecond)
	srv.Close()
	time.Sleep(50 * time.Millisecond)
	srv = listen(t, dir, addr)
	defer srv.Close()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for i, r := range replies {
		if r == nil {
			continue
		}
		if r.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("call %d: %v (disjoint keys never conflict)", i, r)
		}
		if got, want := owner[r.CommitVersion], "r1/"+strconv.Itoa(i+1); got != want {
			t.Fatalf("call %d answered version %d, which holds %q", i, r.CommitVersion, got)
		}
	}
	for i, v := range seen {
		if v != uint64(i+1) {
			t.Fatalf("OnEntries position %d got version %d: %v", i, v, seen[:i+1])
		}
	}
	if len(seen) != calls || srv.Service.DurableVersion() != calls {
		t.Fatalf("%d versions delivered, %d durable; want %d", len(seen), srv.Service.DurableVersion(), calls)
	}
}

// CertifyEncodedWithin gives up when its timer fires, with the outcome
// unknown, and a certification after it, on the same timer reset, is
// answered.
func TestCertifyEncodedWithinGivesUpWhenItsTimerFires(t *testing.T) {
	f := fakecert.Start(t)
	c := fakeClient(t, f.Addr(), certclient.Options{})
	late := make(chan struct{})
	f.SetDecide(func(req *pb.CertifyRequestEncoded) *pb.CertifyReply {
		if req.Txn.Seq == 1 {
			<-late // the certifier answers the first request after the caller gave up
		}
		return &pb.CertifyReply{Decision: pb.Decision_DECISION_COMMIT}
	})
	timer := time.NewTimer(50 * time.Millisecond)
	req := func(seq uint64) *pb.CertifyRequestEncoded {
		return &pb.CertifyRequestEncoded{Txn: &pb.TxnID{Origin: "r1#x", Seq: seq}, Writeset: fragment(int(seq))}
	}
	_, err := c.CertifyEncodedWithin(context.Background(), timer.C, req(1))
	close(late)
	if !errors.Is(err, certclient.ErrOutcomeUnknown) || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		t.Fatalf("err %v, want %v with %v", err, certclient.ErrOutcomeUnknown, context.DeadlineExceeded)
	}
	timer.Reset(30 * time.Second)
	r, err := c.CertifyEncodedWithin(context.Background(), timer.C, req(2))
	timer.Stop()
	if err != nil || r.Decision != pb.Decision_DECISION_COMMIT || r.CommitVersion != 2 {
		t.Fatalf("second certification: %v %v, want a commit at version 2", r, err)
	}
}
