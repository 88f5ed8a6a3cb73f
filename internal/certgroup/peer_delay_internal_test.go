package certgroup

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// peerDelayTest is the emulated one-way latency the tests use: long
// enough that scheduling noise on a loaded machine cannot pass for it.
const peerDelayTest = 25 * time.Millisecond

// A burst of messages handed to the transport at once reaches the peer in
// order, each at least the delay after it was handed over, and the burst
// as a whole about one delay later, not one delay per message: the link
// stays pipelined.
func TestPeerDelayKeepsOrderAndIsNotCumulative(t *testing.T) {
	for _, delay := range []time.Duration{0, peerDelayTest} {
		t.Run(fmt.Sprint(delay), func(t *testing.T) {
			const burst = 100
			rec := &raftRecorder{}
			addr := serveRaft(t, rec)
			n, err := OpenNode(NodeConfig{Core: Config{ID: 1, Decode: regressionDecode}, DataDir: t.TempDir(), NoSync: true,
				Members: map[uint64]string{1: "127.0.0.1:1", 2: addr}, UnsafeFaultPeerDelay: delay})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			msgs := make([]*raftpb.Message, burst)
			for i := range msgs {
				msgs[i] = &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2),
					Term: proto.Uint64(1), Commit: proto.Uint64(uint64(i + 1))}
			}
			handed := time.Now()
			n.transport.send(msgs)
			arrived := rec.await(t, burst)
			for i, a := range arrived {
				if a.commit != uint64(i+1) {
					t.Fatalf("message %d arrived as the %dth: the link reordered messages", a.commit, i+1)
				}
				if early := delay - a.at.Sub(handed); early > 0 {
					t.Fatalf("message %d arrived %v after it was handed over, %v before the %v delay", a.commit, a.at.Sub(handed), early, delay)
				}
			}
			// One delay per message would be burst*delay (2.5 s).
			last := arrived[burst-1].at.Sub(handed)
			if delay > 0 && last > burst*delay/3 {
				t.Fatalf("the last of %d messages arrived %v after they were handed over at once: the delay accumulates", burst, last)
			}
			t.Logf("delay %v: the last of %d messages arrived after %v", delay, burst, last)
		})
	}
}

// A commit through a group of three waits for one round trip to a
// follower (the leader's append out, the follower's acknowledgement back):
// with the delay, at least twice the delay; without it, much less. A burst
// of commits proposed at once all commit, in the order they were
// certified, on every member.
func TestPeerDelayCommitTakesARoundTrip(t *testing.T) {
	zero := measureGroupCommits(t, 0)
	delayed := measureGroupCommits(t, peerDelayTest)
	t.Logf("commit latency: without delay min %v median %v; with %v one way: min %v median %v",
		zero.min, zero.median, peerDelayTest, delayed.min, delayed.median)
	if delayed.min < 2*peerDelayTest {
		t.Errorf("with a %v one-way delay a commit took %v, less than a round trip (%v)", peerDelayTest, delayed.min, 2*peerDelayTest)
	}
	if zero.median >= 2*peerDelayTest {
		t.Errorf("without delay the median commit took %v, no less than a delayed round trip (%v)", zero.median, 2*peerDelayTest)
	}
}

type commitLatency struct{ min, median time.Duration }

// measureGroupCommits starts a group of three with the given delay,
// times single commits on its leader, then checks a burst's order.
func measureGroupCommits(t *testing.T, delay time.Duration) commitLatency {
	t.Helper()
	nodes, seen := startDelayedGroup(t, 3, delay)
	leader := awaitGroupLeader(t, nodes)
	ctx := context.Background()
	var took []time.Duration
	seq := uint64(0)
	for range 9 {
		seq++
		start := time.Now()
		v := certifyRow(ctx, t, leader, seq)
		seen[leader.ID()].await(t, v)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)

	const burst = 100
	var want []uint64
	for range burst {
		seq++
		certifyRow(ctx, t, leader, seq)
		want = append(want, seq)
	}
	for _, n := range nodes {
		s := seen[n.ID()]
		s.await(t, seq)
		if got := s.seqs(); !slices.Equal(got[len(got)-burst:], want) {
			t.Fatalf("member %d committed the burst as %v, want %v", n.ID(), got[len(got)-burst:], want)
		}
	}
	return commitLatency{min: took[0], median: took[len(took)/2]}
}

// certifyRow certifies transaction r/seq, one row, on the leader and
// returns its version.
func certifyRow(ctx context.Context, t *testing.T, leader *Node, seq uint64) uint64 {
	t.Helper()
	txn := &pb.TxnID{Origin: "r", Seq: seq}
	ws := &pb.Writeset{Changes: []*pb.Change{{Table: "t", Op: pb.Op_OP_UPSERT, Key: []byte(fmt.Sprint(seq)), Row: []byte("x")}}}
	req := certification.Request{Txn: certification.TxnID{Origin: "r", Seq: seq}, Keys: []certification.Key{certification.RowKey("t", []byte(fmt.Sprint(seq)))}}
	o, _, err := leader.Certify(ctx, req, logentry.EncodePrefix(txn, ws))
	if err != nil || o.Decision != certification.Commit {
		t.Fatalf("certify r/%d: %+v, %v", seq, o, err)
	}
	return o.CommitVersion
}

// startDelayedGroup runs n members over real gRPC with the given peer
// delay; seen[id] records what member id reports committed.
func startDelayedGroup(t *testing.T, n int, delay time.Duration) ([]*Node, map[uint64]*committedSeen) {
	t.Helper()
	members := map[uint64]string{}
	listeners := map[uint64]net.Listener{}
	for id := uint64(1); id <= uint64(n); id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		members[id], listeners[id] = l.Addr().String(), l
	}
	var nodes []*Node
	seen := map[uint64]*committedSeen{}
	for id := uint64(1); id <= uint64(n); id++ {
		node, err := OpenNode(NodeConfig{Core: Config{ID: id, Decode: regressionDecode}, DataDir: t.TempDir(), NoSync: true,
			Members: members, UnsafeFaultPeerDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		pb.RegisterRaftServer(srv, node.RaftServer())
		go func() { _ = srv.Serve(listeners[id]) }()
		s := &committedSeen{changed: make(chan struct{})}
		seen[id] = s
		node.Start(Callbacks{Committed: s.add})
		t.Cleanup(func() {
			_ = node.Close()
			srv.Stop()
		})
		nodes = append(nodes, node)
	}
	return nodes, seen
}

// awaitGroupLeader returns the leader once it has applied its log and
// certifies.
func awaitGroupLeader(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, n := range nodes {
			if _, _, leading := n.Leader(); leading {
				if _, _, _, err := n.ReadVersion(context.Background()); err == nil {
					return n
				}
			}
		}
	}
	t.Fatal("no leader within 10 s")
	return nil
}

// committedSeen records the transactions a member reports committed, in
// version order.
type committedSeen struct {
	mu      sync.Mutex
	last    uint64
	txns    []uint64
	changed chan struct{}
}

func (s *committedSeen) add(entries []logentry.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range entries {
		h, err := logentry.HeaderOf(e.Bytes)
		if err != nil {
			panic(err)
		}
		s.last = e.Version
		s.txns = append(s.txns, h.Seq)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *committedSeen) seqs() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.txns)
}

// await waits until version v is reported committed.
func (s *committedSeen) await(t *testing.T, v uint64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		last, changed := s.last, s.changed
		s.mu.Unlock()
		if last >= v {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("version %d not committed within 10 s (last %d)", v, last)
		}
	}
}

// raftRecorder is a peer's Raft service that records what arrives.
type raftRecorder struct {
	pb.UnimplementedRaftServer
	mu      sync.Mutex
	arrived []arrival
}

type arrival struct {
	commit uint64
	at     time.Time
}

func (r *raftRecorder) Send(stream pb.Raft_SendServer) error {
	return receive(stream, func(m *raftpb.Message) {
		r.mu.Lock()
		r.arrived = append(r.arrived, arrival{commit: m.GetCommit(), at: time.Now()})
		r.mu.Unlock()
	})
}

func (r *raftRecorder) await(t *testing.T, n int) []arrival {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		got := slices.Clone(r.arrived)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages arrived within 10 s", len(got), n)
		}
	}
}

func serveRaft(t *testing.T, r *raftRecorder) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRaftServer(srv, r)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}
