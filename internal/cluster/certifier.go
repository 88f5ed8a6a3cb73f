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
	q := NewStatusQuerier(addr, dial...)
	defer q.Close()
	return q.Query(ctx)
}

// StatusQuerier asks a certifier, or every member of a group, for its
// Status over connections it keeps: for a caller that asks again and
// again (the bench's samples), which would otherwise cost the certifier
// a connection per question. A member found unreachable is connected to
// again after gRPC's backoff, not at the next question.
type StatusQuerier struct {
	addrs    []string
	conns    []*grpc.ClientConn // nil where dialErrs holds why not
	dialErrs []error
}

// NewStatusQuerier connects lazily to addr, as QueryCertifier takes it.
func NewStatusQuerier(addr string, dial ...grpc.DialOption) *StatusQuerier {
	q := &StatusQuerier{addrs: strings.Split(addr, ",")}
	for _, a := range q.addrs {
		conn, err := dialCertifier(a, dial...)
		q.conns, q.dialErrs = append(q.conns, conn), append(q.dialErrs, err)
	}
	return q
}

// Query is QueryCertifier's answer.
func (q *StatusQuerier) Query(ctx context.Context) (*pb.StatusReply, error) {
	var first *pb.StatusReply
	var errs []error
	for i, conn := range q.conns {
		if conn == nil {
			errs = append(errs, q.dialErrs[i])
			continue
		}
		st, err := pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
		if err != nil {
			errs = append(errs, fmt.Errorf("certifier %s: status: %w", q.addrs[i], grpctls.HintPlaintext(err)))
			continue
		}
		if len(q.conns) == 1 || st.Role == "leader" {
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

// Close closes the connections.
func (q *StatusQuerier) Close() {
	for _, c := range q.conns {
		if c != nil {
			c.Close()
		}
	}
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
