package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/grpctls"
)

// QueryCertifier asks the certifier at addr for its Status. addr may list
// every member of a certifier group, comma-separated: the leader's reply is
// returned (versions and rates are the leader's), else the first member
// that answers. dial replaces the plaintext default (certifier TLS:
// State.QueryCertifier).
func QueryCertifier(ctx context.Context, addr string, dial ...grpc.DialOption) (*pb.StatusReply, error) {
	addrs := strings.Split(addr, ",")
	if len(addrs) == 1 {
		return queryMember(ctx, addr, dial...)
	}
	var first *pb.StatusReply
	var errs []error
	for _, a := range addrs {
		st, err := queryMember(ctx, a, dial...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Role == "leader" {
			return st, nil
		}
		if first == nil {
			first = st
		}
	}
	if first != nil {
		return first, nil
	}
	return nil, errors.Join(errs...)
}

// dialCertifier connects to one certifier (member) at addr: plaintext, or
// what dial says.
func dialCertifier(addr string, dial ...grpc.DialOption) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		return nil, fmt.Errorf("certifier %s: %w", addr, err)
	}
	return conn, nil
}

func queryMember(ctx context.Context, addr string, dial ...grpc.DialOption) (*pb.StatusReply, error) {
	conn, err := dialCertifier(addr, dial...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	st, err := pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return nil, fmt.Errorf("certifier %s: status: %w", addr, grpctls.HintPlaintext(err))
	}
	return st, nil
}
