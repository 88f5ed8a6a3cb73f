package certifier

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// Fetch streams durable entries after req.AfterVersion; with Follow it keeps
// streaming as new versions become durable.
func (s *Service) Fetch(req *pb.FetchRequest, stream pb.Certifier_FetchServer) error {
	ctx := stream.Context()
	after := req.AfterVersion
	if err := s.order.checkFetch(after); err != nil {
		return err
	}
	if first := s.log.FirstVersion(); first > 0 && after+1 < first {
		return status.Errorf(codes.FailedPrecondition,
			"versions up to %d were removed from the log; a replica at version %d must be rebuilt from a peer", first-1, after)
	}
	for {
		durable := s.DurableVersion()
		err := s.chunkEntries(after, durable, func(entries [][]byte, last uint64) error {
			after = last
			return stream.Send(&pb.FetchReply{Entries: entries})
		})
		if errors.Is(err, wal.ErrCompacted) {
			return status.Errorf(codes.FailedPrecondition, "version %d was removed from the log meanwhile", after+1)
		}
		if err != nil {
			return status.Errorf(codes.Internal, "%v", err)
		}
		if !req.Follow {
			return nil
		}
		if _, err := s.durable.next(ctx, after); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return status.Error(codes.Unavailable, err.Error())
		}
	}
}
