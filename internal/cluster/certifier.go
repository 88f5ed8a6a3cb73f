package cluster

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// QueryCertifier asks the certifier at addr for its Status.
func QueryCertifier(ctx context.Context, addr string) (*pb.StatusReply, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("certifier %s: %w", addr, err)
	}
	defer conn.Close()
	st, err := pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return nil, fmt.Errorf("certifier %s: status: %w", addr, err)
	}
	return st, nil
}
