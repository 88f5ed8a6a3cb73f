package certifier

import (
	"context"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

type countingStream struct {
	pb.Certifier_CertifyServer
	replies chan int
}

func (c *countingStream) Send(m *pb.CertifyStreamReply) error {
	if len(m.Replies) > 0 {
		c.replies <- len(m.Replies)
	}
	return nil
}

// BenchmarkSendLoopReplies is the send loop's own cost per reply: replies
// that depend on nothing (aborts) queued one at a time, as sessions send
// them, through a stream whose Send costs nothing.
func BenchmarkSendLoopReplies(b *testing.B) {
	s, err := Open(Config{DataDir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	stream := &countingStream{replies: make(chan int, 1024)}
	queue := make(chan queued, streamQueueMax)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.sendLoop(ctx, stream, &streamState{s: s}, queue, 0, delivery{}) }()
	reply := &pb.CertifyReply{RequestId: 1, Decision: pb.Decision_DECISION_ABORT}
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			queue <- queued{reply: reply, received: time.Now()}
		}
	}()
	for got := 0; got < b.N; {
		got += <-stream.replies
	}
	b.StopTimer()
	cancel()
	<-done
}
