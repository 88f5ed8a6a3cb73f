package certclient

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// syncRetryInterval spaces the attempts of SyncVersion while no member
// answers (a certifier restarting, a group electing its leader).
const syncRetryInterval = 20 * time.Millisecond

// SyncVersion asks the certifier for a durable version at or above every
// version the cluster acknowledged before the call (the SyncVersion RPC).
// It asks the member the stream is on; a member that does not lead names
// the leader in its trailer, which is asked next, and any other failure is
// retried on the next member until ctx ends. The error is then the last
// one seen.
func (c *Client) SyncVersion(ctx context.Context) (uint64, error) {
	api := c.peers.api()
	for attempt := 1; ; attempt++ {
		var trailer metadata.MD
		reply, err := api.SyncVersion(ctx, &pb.SyncVersionRequest{}, grpc.Trailer(&trailer))
		if err == nil {
			return reply.DurableVersion, nil
		}
		if ctx.Err() != nil || status.Code(err) == codes.Unimplemented {
			return 0, err
		}
		api = c.peers.apiAfter(attempt)
		if v := trailer.Get(leaderTrailer); len(v) > 0 {
			if leader, lerr := c.peers.apiFor(v[0]); lerr == nil {
				api = leader
			}
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(syncRetryInterval):
		}
	}
}
