package certifier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

const (
	// streamQueueMax bounds the replies a stream may have waiting for
	// durability before its receiver stops reading (backpressure).
	streamQueueMax = 4096
	// replyBytesMax bounds the entries packed into one stream message, well
	// under the gRPC message limit the server is configured with.
	replyBytesMax = 4 << 20
)

// queued is a reply waiting until durable reaches waitFor. A nil reply is a
// catch-up: it only asks for the entries.
type queued struct {
	reply    *pb.CertifyReply
	waitFor  uint64
	received time.Time
}

// Certify serves one replica's session. See package documentation.
func (s *Service) Certify(stream pb.Certifier_CertifyServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.Open == nil || first.Open.Replica == "" {
		return status.Error(codes.InvalidArgument, "the first message of a Certify stream must open a session with the replica's name")
	}
	if v, durable := first.Open.ReplicaVersion, s.DurableVersion(); v > durable {
		return status.Errorf(codes.FailedPrecondition,
			"replica %q is at version %d but the certifier's durable version is %d: the replica holds versions this certifier never made durable (failed versions); rebuild it from a peer",
			first.Open.Replica, v, durable)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	queue := make(chan queued, streamQueueMax)
	sendErr := make(chan error, 1)
	go func() {
		sendErr <- s.sendLoop(ctx, stream, queue, first.Open.ReplicaVersion)
		cancel()
	}()
	recvErr := s.receiveLoop(ctx, stream, first, queue)
	close(queue)
	if err := <-sendErr; err != nil {
		return err
	}
	return recvErr
}

func (s *Service) receiveLoop(ctx context.Context, stream pb.Certifier_CertifyServer, msg *pb.CertifyStreamRequest, queue chan<- queued) error {
	for {
		if err := s.enqueue(ctx, msg, queue); err != nil {
			return err
		}
		var err error
		msg, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if msg.Open != nil {
			return status.Error(codes.InvalidArgument, "a Certify stream opens its session once, in its first message")
		}
	}
}

func (s *Service) enqueue(ctx context.Context, msg *pb.CertifyStreamRequest, queue chan<- queued) error {
	now := time.Now()
	for _, req := range msg.Requests {
		var q queued
		if n := s.inFlight.Add(1); n > int64(s.cfg.Limits.InFlightRequestsMax) {
			s.stats.aborts.Add(1)
			q = queued{reply: abortReply(&pb.CertifyReply{RequestId: req.RequestId, Txn: req.Txn}, pb.AbortReason_ABORT_REASON_LIMIT,
				fmt.Sprintf("certifier overloaded: %d requests in flight, over the limit of %d (in-flight requests max); retry", n-1, s.cfg.Limits.InFlightRequestsMax))}
		} else {
			reply, waitFor := s.certify(req)
			q = queued{reply: reply, waitFor: waitFor}
		}
		q.received = now
		if err := put(ctx, queue, q); err != nil {
			return err
		}
	}
	if msg.CatchUp {
		return put(ctx, queue, queued{received: now})
	}
	return nil
}

func put(ctx context.Context, queue chan<- queued, q queued) error {
	select {
	case queue <- q:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendLoop sends, in order, each queued reply once what it depends on is
// durable, preceded by every durable entry the replica has not been sent.
// Replies that are ready together share one message.
func (s *Service) sendLoop(ctx context.Context, stream pb.Certifier_CertifyServer, queue <-chan queued, delivered uint64) error {
	var batch []queued
	for {
		q, ok := <-queue
		if !ok {
			return nil
		}
		batch = append(batch[:0], q)
		batch = drain(queue, batch)
		waitFor := uint64(0)
		for _, q := range batch {
			waitFor = max(waitFor, q.waitFor)
		}
		durable, err := s.durable.wait(ctx, waitFor)
		if err != nil {
			s.releaseInFlight(batch)
			return status.Error(codes.Unavailable, err.Error())
		}
		delivered, err = s.send(stream, batch, delivered, durable)
		s.releaseInFlight(batch)
		if err != nil {
			return err
		}
	}
}

// drain takes what else is already queued, without waiting.
func drain(queue <-chan queued, batch []queued) []queued {
	for len(batch) < streamQueueMax {
		select {
		case q, ok := <-queue:
			if !ok {
				return batch
			}
			batch = append(batch, q)
		default:
			return batch
		}
	}
	return batch
}

func (s *Service) releaseInFlight(batch []queued) {
	for _, q := range batch {
		if q.reply != nil {
			s.inFlight.Add(-1)
		}
	}
}

// send delivers entries (delivered, durable] in chunks, then the replies.
func (s *Service) send(stream pb.Certifier_CertifyServer, batch []queued, delivered, durable uint64) (uint64, error) {
	msg := &pb.CertifyStreamReply{DurableVersion: durable}
	msgBytes := 0
	for delivered < durable {
		upTo := min(durable, delivered+1024)
		n := len(msg.Entries)
		entries, err := s.entriesBetween(msg.Entries, delivered, upTo)
		if err != nil {
			return delivered, status.Errorf(codes.Internal, "read log for delivery: %v", err)
		}
		for _, e := range entries[n:] {
			msgBytes += len(e)
		}
		msg.Entries = entries
		delivered = upTo
		if delivered < durable && msgBytes > replyBytesMax {
			if err := stream.Send(msg); err != nil {
				return delivered, err
			}
			msg = &pb.CertifyStreamReply{DurableVersion: durable}
			msgBytes = 0
		}
	}
	for _, q := range batch {
		if q.reply != nil {
			msg.Replies = append(msg.Replies, q.reply)
		}
	}
	if err := stream.Send(msg); err != nil {
		return delivered, err
	}
	now := time.Now()
	for _, q := range batch {
		if q.reply != nil {
			s.metrics.observeReply(q.reply, now.Sub(q.received))
		}
	}
	return delivered, nil
}
