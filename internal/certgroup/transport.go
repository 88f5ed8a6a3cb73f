package certgroup

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// peerQueueMax bounds the messages waiting for one peer. Past it messages
// are dropped and the peer reported unreachable: Raft retransmits.
const peerQueueMax = 4096

// peerRedialDelay is the pause before a broken stream to a peer is reopened.
const peerRedialDelay = 50 * time.Millisecond

// peerConnectParams: a peer that was down (killed, restarted) is dialled
// again within peerReconnectDelayMax. gRPC's default backoff (1 s, growing
// by 1.6 up to 2 min) left a restarted member unreachable from its peers
// for 1.6 to 4 s after it came back: it lagged, and when the leader died
// next, the surviving follower could not get its vote, so elections took
// up to 2.4 s (docs/BENCHMARKS.md "Failover"). A dial attempt to a dead
// peer on a LAN is one refused connection every quarter second.
const peerReconnectDelayMax = 250 * time.Millisecond

var peerConnectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: peerReconnectDelayMax},
	MinConnectTimeout: 5 * time.Second,
}

// transport sends Raft messages to peers over gRPC: one Raft.Send stream
// per peer, fed by a queue, so a slow or dead peer never blocks the Ready
// loop. With NodeConfig.UnsafeFaultPeerDelay each message is stamped when
// queued and sent once that delay has passed: a link with that latency,
// still pipelined and in order.
type transport struct {
	n    *Node
	dial []grpc.DialOption

	mu    sync.Mutex
	peers map[uint64]*peer
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

type peer struct {
	id    uint64
	queue chan queued
	conn  *grpc.ClientConn
	// held is a message taken from the queue that was not yet due when a
	// batch was sent: the next batch starts with it (pump's goroutine only).
	held *queued
}

// queued is a message waiting for its peer, with the time it may be sent
// at (zero: at once; see NodeConfig.UnsafeFaultPeerDelay).
type queued struct {
	m   *raftpb.Message
	due time.Time
}

func newTransport(n *Node, dial []grpc.DialOption) *transport {
	ctx, cancel := context.WithCancel(context.Background())
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	dial = append(dial[:len(dial):len(dial)], grpc.WithConnectParams(peerConnectParams))
	return &transport{n: n, dial: dial, peers: map[uint64]*peer{}, ctx: ctx, stop: cancel}
}

func (t *transport) send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if t.n.partition.isCut(m.GetTo()) {
			t.n.snapshotSent(m, false)
			continue
		}
		p := t.peer(m.GetTo())
		if p == nil {
			t.n.snapshotSent(m, false)
			continue
		}
		q := queued{m: m}
		if t.n.cfg.UnsafeFaultPeerDelay > 0 {
			q.due = time.Now().Add(t.n.cfg.UnsafeFaultPeerDelay)
		}
		select {
		case p.queue <- q:
		default:
			t.n.reportUnreachable(p.id)
			t.n.snapshotSent(m, false)
		}
	}
}

func (t *transport) peer(id uint64) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[id]; p != nil {
		return p
	}
	addr := t.n.AddrOf(id)
	if addr == "" || t.ctx.Err() != nil {
		return nil
	}
	conn, err := grpc.NewClient(addr, t.dial...)
	if err != nil {
		t.n.log.Error("certifier group: cannot dial peer", "peer", id, "addr", addr, "err", err)
		return nil
	}
	p := &peer{id: id, queue: make(chan queued, peerQueueMax), conn: conn}
	t.peers[id] = p
	t.wg.Add(1)
	go t.pump(p)
	return p
}

// pump keeps a stream open to the peer and writes its queue to it, as many
// messages per gRPC message as are waiting.
func (t *transport) pump(p *peer) {
	defer t.wg.Done()
	defer p.conn.Close()
	client := pb.NewRaftClient(p.conn)
	for t.ctx.Err() == nil {
		err := t.stream(client, p)
		if t.ctx.Err() != nil {
			return
		}
		t.n.reportUnreachable(p.id)
		t.n.log.Debug("certifier group: stream to peer broke", "peer", p.id, "err", err)
		select {
		case <-time.After(peerRedialDelay):
		case <-t.ctx.Done():
			return
		}
	}
}

func (t *transport) stream(client pb.RaftClient, p *peer) error {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	s, err := client.Send(ctx)
	if err != nil {
		return err
	}
	batch := &pb.RaftMessages{}
	for {
		q, err := p.next(ctx)
		if err != nil {
			return err
		}
		awaitDue(q.due)
		batch.Messages = batch.Messages[:0]
		var snaps []*raftpb.Message
		for q.m != nil {
			if q.m.GetType() == raftpb.MessageType_MsgSnap {
				snaps = append(snaps, q.m)
			}
			b, err := proto.Marshal(q.m)
			if err != nil {
				return err
			}
			batch.Messages = append(batch.Messages, b)
			q = p.nextDue()
		}
		err = s.Send(batch)
		for _, m := range snaps {
			t.n.snapshotSent(m, err == nil)
		}
		if err != nil {
			return err
		}
	}
}

// next waits for the next message to the peer.
func (p *peer) next(ctx context.Context) (queued, error) {
	if q := p.held; q != nil {
		p.held = nil
		return *q, nil
	}
	select {
	case q := <-p.queue:
		return q, nil
	case <-ctx.Done():
		return queued{}, ctx.Err()
	}
}

// nextDue takes the next message if one is waiting and due (m nil: none);
// one waiting but not yet due is held for the next batch.
func (p *peer) nextDue() queued {
	select {
	case q := <-p.queue:
		if !q.due.IsZero() && time.Now().Before(q.due) {
			p.held = &q
			return queued{}
		}
		return q
	default:
		return queued{}
	}
}

// awaitDue blocks until due, in nanosleep (wal.SlowDiskSleep), not on a
// timer: it wakes within tens of microseconds, where a parked goroutine
// may wake up to a millisecond late, as much as the delay a benchmark
// emulates. Close waits for it: at most one delay.
func awaitDue(due time.Time) {
	if due.IsZero() {
		return
	}
	wal.SlowDiskSleep(time.Until(due))
}

func (t *transport) close() {
	t.stop()
	t.wg.Wait()
}

// Server is the receiving side: register it on the member's gRPC server.
type Server struct {
	pb.UnimplementedRaftServer
	n *Node
}

// RaftServer returns the gRPC service that hands peers' messages to n.
func (n *Node) RaftServer() *Server { return &Server{n: n} }

// Send receives one peer's messages.
func (s *Server) Send(stream pb.Raft_SendServer) error {
	return receive(stream, func(m *raftpb.Message) {
		if !s.n.partition.isCut(m.GetFrom()) {
			s.n.step(m)
		}
	})
}

// receive hands each message of a peer's stream to deliver, in order,
// until the peer closes it.
func receive(stream pb.Raft_SendServer, deliver func(*raftpb.Message)) error {
	for {
		batch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&pb.RaftAck{})
		}
		if err != nil {
			return err
		}
		for _, b := range batch.Messages {
			m := &raftpb.Message{}
			if err := proto.Unmarshal(b, m); err != nil {
				return err
			}
			deliver(m)
		}
	}
}
