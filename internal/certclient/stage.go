package certclient

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// StageRefusedError is a certifier's refusal to stage a streamed writeset
// (Certifier.Stage). Asking again does not help: the transaction fails,
// for Reason:
//   - ABORT_REASON_LIMIT (SQLSTATE 54000): a limit it exceeds
//     (RESOURCE_EXHAUSTED: --stage-bytes-max, --writeset-bytes-max for one
//     fragment), a certifier that does not know streamed writesets
//     (UNIMPLEMENTED, or FAILED_PRECONDITION from a group member of an
//     older release);
//   - ABORT_REASON_INVALID: a fragment it cannot read (INVALID_ARGUMENT).
type StageRefusedError struct {
	Reason pb.AbortReason
	Detail string
}

func (e *StageRefusedError) Error() string { return e.Detail }

// ErrStageUnavailable wraps every other failure of a stage: no certifier
// answered, the stream broke, the caller cancelled. Nothing was
// certified; the transaction may be tried again.
var ErrStageUnavailable = errors.New("the streamed writeset could not be staged at the certifier")

// Stage is one streamed writeset on its way to the certifier: a Stage
// stream of its own, so that the session's other certifications are not
// held behind it. Send its fragments in order, then Close; Cancel ends it
// at any time. Not safe for concurrent use.
type Stage struct {
	stream pb.Certifier_StageClient
	cancel context.CancelFunc
	txn    *pb.TxnID // sent with the first fragment, then nil
}

// Stage opens a stage for transaction txn on the member the session
// stream is on, following the leader as the session does (openStage). It
// ends with ctx.
func (c *Client) Stage(ctx context.Context, txn *pb.TxnID) (*Stage, error) {
	stream, cancel, err := openStage(ctx, c.peers)
	if err != nil {
		return nil, err
	}
	return &Stage{stream: stream, cancel: cancel, txn: txn}, nil
}

// openStage opens a Stage stream on the current member. With several
// members it waits until the member accepts (the response headers, sent
// before any fragment is read): a member that does not lead refuses at
// once with Unavailable and the leader's address, which is followed, so
// that no fragment goes to a member that drops it; one that is down, or
// refuses naming no leader (an election under way), is passed for the
// next member, as the session stream does. Each member is tried once at
// most. The fragments are not kept, so the stream cannot move once one
// was sent.
func openStage(ctx context.Context, m *members) (pb.Certifier_StageClient, context.CancelFunc, error) {
	for tried := 1; ; tried++ {
		target := m.current()
		stream, cancel, leader, err := tryStage(ctx, m, target)
		if err == nil {
			return stream, cancel, nil
		}
		if status.Code(err) != codes.Unavailable || !m.several() || leader == target || tried >= m.count() || ctx.Err() != nil {
			return nil, nil, stageError(err)
		}
		m.followFrom(target, leader) // no leader named: the next member
	}
}

// tryStage opens a Stage stream on target and, with several members,
// waits for it to accept; a refusal comes with the leader target names,
// if any.
func tryStage(ctx context.Context, m *members, target string) (pb.Certifier_StageClient, context.CancelFunc, string, error) {
	client, err := m.apiFor(target)
	if err != nil {
		return nil, nil, "", err
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := client.Stage(sctx)
	if err != nil {
		cancel()
		return nil, nil, "", err
	}
	if !m.several() {
		return stream, cancel, "", nil
	}
	if header, _ := stream.Header(); header != nil {
		return stream, cancel, "", nil
	}
	_, err = stream.CloseAndRecv() // ended before it accepted: why
	cancel()
	if err == nil {
		err = status.Error(codes.Unavailable, "the certifier ended the stage before it read a fragment")
	}
	return nil, nil, leaderHint(stream), err
}

// Send sends the next fragment (an encoded Writeset). It blocks while the
// certifier is not ready for more (gRPC flow control). The fragment is
// not kept. A refusal or a broken stream is returned as Close would
// return it; the stage is then over.
func (s *Stage) Send(fragment []byte) error {
	err := s.stream.Send(&pb.StageRequest{Txn: s.txn, Fragment: fragment})
	s.txn = nil
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		// The certifier ended the stream: its status says why.
		_, err = s.stream.CloseAndRecv()
	}
	s.cancel()
	return stageError(err)
}

// Close says every fragment was sent and returns what the certifier
// holds for the transaction.
func (s *Stage) Close() (*pb.StageReply, error) {
	defer s.cancel()
	reply, err := s.stream.CloseAndRecv()
	if err != nil {
		return nil, stageError(err)
	}
	return reply, nil
}

// Cancel ends the stage; the certifier drops what it staged.
func (s *Stage) Cancel() { s.cancel() }

// stageError maps a Stage call's failure to a StageRefusedError or
// ErrStageUnavailable.
func stageError(err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.ResourceExhausted, codes.FailedPrecondition:
		return &StageRefusedError{Reason: pb.AbortReason_ABORT_REASON_LIMIT, Detail: st.Message()}
	case codes.InvalidArgument:
		return &StageRefusedError{Reason: pb.AbortReason_ABORT_REASON_INVALID, Detail: st.Message()}
	case codes.Unimplemented:
		return &StageRefusedError{Reason: pb.AbortReason_ABORT_REASON_LIMIT, Detail: "the certifier is of an older release that does not take streamed writesets: " +
			"upgrade it, or raise tashkent.stream_threshold so that the writeset is sent whole"}
	}
	return fmt.Errorf("%w: %v", ErrStageUnavailable, err)
}
