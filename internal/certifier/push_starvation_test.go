package certifier

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// slowPushStream is a Certify stream whose every Send lasts as long as
// another replica's commit takes to become durable: what a busy cluster
// looks like to a replica that reads its stream slowly (flow control) or
// whose certifier flushes faster than one message goes out. It records
// the messages sent and stops making commits after advancesMax of them.
type slowPushStream struct {
	pb.Certifier_CertifyServer
	t           *testing.T
	s           *Service
	sent        chan *pb.CertifyStreamReply
	seq         uint64
	advancesMax uint64
}

func (f *slowPushStream) Send(m *pb.CertifyStreamReply) error {
	f.sent <- m
	if f.seq < f.advancesMax {
		f.seq++
		commitDurably(f.t, f.s, "r2", f.seq)
	}
	return nil
}

// commitDurably certifies a transaction of origin that writes its own row
// and waits until its version is durable. It runs in the stream's sender
// goroutine too, so it reports with Errorf, never Fatal.
func commitDurably(t *testing.T, s *Service, origin string, seq uint64) {
	batch := []certifying{s.prepare(encodedRequest(t, origin, seq, s.Version(), fmt.Sprintf("%s-%d", origin, seq)), false)}
	if _, err := s.order.decide(context.Background(), batch); err != nil {
		t.Errorf("decide %s/%d: %v", origin, seq, err)
		return
	}
	_, v := s.answer(&batch[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.durable.wait(ctx, v); err != nil {
		t.Errorf("version %d did not become durable: %v", v, err)
	}
}

// A stream that asked for pushes still sends the replies queued for it
// while other replicas' commits keep the durable version moving: a reply
// already queued goes out with the next message, it is not held behind
// push after push (stream.go, sendLoop). A loop that looked at its queue
// only when it had nothing to push would, under a steady stream of flushes
// elsewhere, hold a replica's own replies (its aborts, its commits whose
// entries it had been pushed already) until the cluster went quiet, up to
// the agent's certify timeout.
func TestQueuedRepliesAreNotStarvedByPushes(t *testing.T) {
	s, err := Open(Config{DataDir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commitDurably(t, s, "r2", 1000) // something to push at once
	const advancesMax = 20
	stream := &slowPushStream{t: t, s: s, sent: make(chan *pb.CertifyStreamReply, advancesMax+8), advancesMax: advancesMax}
	queue := make(chan queued, 1)
	abort := abortReply(&pb.CertifyReply{RequestId: 7, Txn: &pb.TxnID{Origin: "r1", Seq: 7}}, pb.AbortReason_ABORT_REASON_CONFLICT, "test")
	queue <- queued{reply: abort, received: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.sendLoop(ctx, stream, &streamState{s: s}, queue, 0, delivery{push: true})
	}()
	defer func() {
		cancel()
		<-done
	}()
	for i := 1; ; i++ {
		select {
		case m := <-stream.sent:
			if len(m.Replies) == 1 && m.Replies[0].RequestId == 7 {
				if i > 1 {
					t.Fatalf("the queued abort went out in message %d: %d pushes went before it", i, i-1)
				}
				return
			}
			if len(m.Replies) != 0 {
				t.Fatalf("message %d: unexpected replies %v", i, m.Replies)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the queued abort was not sent (%d messages)", i-1)
		}
	}
}
