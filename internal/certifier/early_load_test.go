package certifier_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Under concurrent commits, barriers and spans, with a recent ring far
// smaller than what is decided between two writes, a stream that takes
// entries early is sent every version once, in order, and is never ended.
func TestEarlyDeliveryUnderLoadSendsEveryVersionInOrder(t *testing.T) {
	srv := listen(t, certifier.Config{SyncDelay: 3 * time.Millisecond, UnsafeDeliverBeforeDurable: true, RecentEntriesMax: 2})
	stream := rawStream(t, srv)
	if err := stream.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "watch", Push: true}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	total := uint64(0)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		r := connect(t, srv, fmt.Sprintf("w%d", w), 0)
		wg.Go(func() {
			for i := 0; i < 80; i++ {
				ch := upsert(fmt.Sprintf("public.t%d", w), i)
				if i%17 == 5 {
					ch = &pb.Change{Op: pb.Op_OP_TRUNCATE, Table: fmt.Sprintf("public.b%d_%d", w, i)}
				}
				if rep := r.certify(t, 0, ch); rep.Decision == pb.Decision_DECISION_COMMIT {
					mu.Lock()
					total++
					mu.Unlock()
				}
			}
		})
	}
	s := connect(t, srv, "spans", 0)
	wg.Go(func() {
		for i := 0; i < 5; i++ {
			txn := &pb.TxnID{Origin: "spans", Seq: uint64(100 + i)}
			staged, err := stage(t, srv.Addr().String(), txn, fragment(t, fmt.Sprintf("public.s%d", i), 0, 5, 10), fragment(t, fmt.Sprintf("public.s%d", i), 5, 5, 10), fragment(t, fmt.Sprintf("public.s%d", i), 10, 5, 10))
			if err != nil {
				t.Error(err)
				return
			}
			rep := s.certifyStreamed(t, uint64(100+i), 0, staged, tableWrite(fmt.Sprintf("public.s%d", i)))
			if rep.Decision == pb.Decision_DECISION_COMMIT {
				mu.Lock()
				total += rep.CommitVersion - rep.FirstVersion + 1
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	msgs, errs := make(chan *pb.CertifyStreamReply, 64), make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errs <- err
				return
			}
			msgs <- m
		}
	}()
	next := uint64(1)
	for {
		if done == nil {
			mu.Lock()
			n := total
			mu.Unlock()
			if next > n {
				return
			}
		}
		select {
		case <-done:
			done = nil
		case err := <-errs:
			t.Fatalf("stream ended after %d versions: %v", next-1, err)
		case m := <-msgs:
			for _, b := range m.Entries {
				v, err := logentry.VersionOf(b)
				if err != nil {
					t.Fatal(err)
				}
				if v != next {
					t.Fatalf("entry %d sent, want %d", v, next)
				}
				next++
			}
		}
	}
}
