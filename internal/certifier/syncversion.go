package certifier

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// SyncVersion answers a replica that must hold every commit that happened
// before it asked (tashkent.sync_wait): see the proto. A single certifier
// answers with its durable version, since it acknowledges and delivers a
// version only once it is durable; a group's leader answers after a
// ReadIndex (groupSyncVersion).
func (s *Service) SyncVersion(ctx context.Context, _ *pb.SyncVersionRequest) (*pb.SyncVersionReply, error) {
	if s.group != nil {
		return s.groupSyncVersion(ctx)
	}
	if err := s.Err(); err != nil {
		return nil, status.Errorf(codes.Unavailable, "the certifier stopped serving: %v", err)
	}
	return &pb.SyncVersionReply{DurableVersion: s.DurableVersion()}, nil
}
