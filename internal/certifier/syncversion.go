package certifier

import (
	"context"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// SyncVersion answers a replica that must hold every commit that happened
// before it asked (tashkent.sync_wait): see the proto. A single certifier
// answers with its durable version, or the highest version it sent before
// it was durable (early.go); a group's leader answers after a ReadIndex
// (orderer.syncVersion).
func (s *Service) SyncVersion(ctx context.Context, _ *pb.SyncVersionRequest) (*pb.SyncVersionReply, error) {
	v, err := s.order.syncVersion(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.SyncVersionReply{DurableVersion: v}, nil
}
