package certclient

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// leaderTrailer is certifier.LeaderTrailer (not imported: the client does
// not depend on the server).
const leaderTrailer = "tashkent-leader"

// members are the certifier addresses the client knows, with one
// connection each, and the one it uses now.
type members struct {
	dial []grpc.DialOption

	mu    sync.Mutex
	addrs []string
	conns map[string]*grpc.ClientConn
	cur   int
	// failed is the member the last stream failed on without naming a
	// leader (likely dead): a stale hint naming it is not followed.
	failed string
}

// groupReconnectDelayMax caps the pause between attempts when there are
// several members: one of them leads soon after an election, and each
// attempt is one cheap refused stream.
const groupReconnectDelayMax = 100 * time.Millisecond

func (m *members) reconnectDelayMax() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.addrs) > 1 {
		return groupReconnectDelayMax
	}
	return time.Second
}

func newMembers(target string, dial []grpc.DialOption) (*members, error) {
	m := &members{dial: dial, conns: map[string]*grpc.ClientConn{}}
	for _, a := range strings.Split(target, ",") {
		if a = strings.TrimSpace(a); a != "" {
			m.addrs = append(m.addrs, a)
		}
	}
	if len(m.addrs) == 0 {
		return nil, fmt.Errorf("certifier client: no certifier address in %q", target)
	}
	for _, a := range m.addrs {
		if _, err := m.conn(a); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *members) conn(addr string) (*grpc.ClientConn, error) {
	if c := m.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, m.dial...)
	if err != nil {
		return nil, fmt.Errorf("certifier client for %s: %w", addr, err)
	}
	m.conns[addr] = c
	return c, nil
}

// several reports whether the client knows more than one member.
func (m *members) several() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.addrs) > 1
}

func (m *members) current() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addrs[m.cur]
}

func (m *members) api() pb.CertifierClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	return pb.NewCertifierClient(m.conns[m.addrs[m.cur]])
}

// follow moves to the leader a member named, and reports whether it did.
// With no name it moves to the next member (the current one may be dead)
// and reports false.
func (m *members) follow(leader string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.followLocked(leader)
}

func (m *members) followLocked(leader string) bool {
	if leader == "" || leader == m.addrs[m.cur] || leader == m.failed {
		if leader == "" {
			m.failed = m.addrs[m.cur]
		}
		m.cur = (m.cur + 1) % len(m.addrs)
		return false
	}
	m.failed = ""
	for i, a := range m.addrs {
		if a == leader {
			m.cur = i
			return true
		}
	}
	if _, err := m.conn(leader); err != nil {
		m.cur = (m.cur + 1) % len(m.addrs)
		return false
	}
	m.addrs = append(m.addrs, leader) // a member added to the group
	m.cur = len(m.addrs) - 1
	return true
}

// followFrom is follow for a call that was refused at from: if the
// current member is no longer from (the session moved on meanwhile), the
// call goes to the current one, and followFrom reports true.
func (m *members) followFrom(from, leader string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.addrs[m.cur] != from {
		return true
	}
	return m.followLocked(leader)
}

func (m *members) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first error
	for _, c := range m.conns {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// leaderHint is the leader's address a member named when it refused or
// ended the stream.
func leaderHint(stream grpc.ClientStream) string {
	if v := stream.Trailer().Get(leaderTrailer); len(v) > 0 {
		return v[0]
	}
	return ""
}

// currentAPI sends each unary or Fetch call to the current member.
type currentAPI struct{ m *members }

func (a currentAPI) Certify(ctx context.Context, opts ...grpc.CallOption) (pb.Certifier_CertifyClient, error) {
	return a.m.api().Certify(ctx, opts...)
}

func (a currentAPI) Stage(ctx context.Context, opts ...grpc.CallOption) (pb.Certifier_StageClient, error) {
	return a.m.api().Stage(ctx, opts...)
}

// StageCopy and StageDiscard are a member's calls to another
// (certifier/group_stage.go); the client never sends them, but forwards
// them to the current member like the other calls.
func (a currentAPI) StageCopy(ctx context.Context, opts ...grpc.CallOption) (pb.Certifier_StageCopyClient, error) {
	return a.m.api().StageCopy(ctx, opts...)
}

func (a currentAPI) StageDiscard(ctx context.Context, in *pb.StageDiscardRequest, opts ...grpc.CallOption) (*pb.StageDiscardReply, error) {
	return a.m.api().StageDiscard(ctx, in, opts...)
}

func (a currentAPI) Fetch(ctx context.Context, in *pb.FetchRequest, opts ...grpc.CallOption) (pb.Certifier_FetchClient, error) {
	s, err := a.m.api().Fetch(ctx, in, opts...)
	if err != nil || !a.m.several() {
		return s, err
	}
	return &fallbackFetch{Certifier_FetchClient: s, m: a.m, ctx: ctx, in: in, opts: opts}, nil
}

// fallbackFetch is a Fetch that, refused with FailedPrecondition before it
// delivered anything (the member caught up by snapshot, or its retention
// removed the versions: certifier/group_snapshot.go), asks the other
// members in turn. The current member is left as it is: it may well be
// the leader, which Certify keeps using.
type fallbackFetch struct {
	pb.Certifier_FetchClient
	m        *members
	ctx      context.Context
	in       *pb.FetchRequest
	opts     []grpc.CallOption
	received bool
	tried    int // other members asked so far
}

func (f *fallbackFetch) Recv() (*pb.FetchReply, error) {
	for {
		r, err := f.Certifier_FetchClient.Recv()
		if err == nil {
			f.received = true
			return r, nil
		}
		if f.received || status.Code(err) != codes.FailedPrecondition || f.tried+1 >= f.m.count() {
			return r, err
		}
		f.tried++
		next, nerr := f.m.apiAfter(f.tried).Fetch(f.ctx, f.in, f.opts...)
		if nerr != nil {
			return nil, err
		}
		f.Certifier_FetchClient = next
	}
}

func (m *members) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.addrs)
}

// apiAfter is the member k places after the current one.
func (m *members) apiAfter(k int) pb.CertifierClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	return pb.NewCertifierClient(m.conns[m.addrs[(m.cur+k)%len(m.addrs)]])
}

func (a currentAPI) Status(ctx context.Context, in *pb.StatusRequest, opts ...grpc.CallOption) (*pb.StatusReply, error) {
	return a.m.api().Status(ctx, in, opts...)
}

// apiFor is the member at addr, connected to if it was not known yet (a
// leader's address from a trailer).
func (m *members) apiFor(addr string) (pb.CertifierClient, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewCertifierClient(c), nil
}

func (a currentAPI) SyncVersion(ctx context.Context, in *pb.SyncVersionRequest, opts ...grpc.CallOption) (*pb.SyncVersionReply, error) {
	return a.m.api().SyncVersion(ctx, in, opts...)
}

func (a currentAPI) ForgetReplica(ctx context.Context, in *pb.ForgetReplicaRequest, opts ...grpc.CallOption) (*pb.ForgetReplicaReply, error) {
	return a.m.api().ForgetReplica(ctx, in, opts...)
}
