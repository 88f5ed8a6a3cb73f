// Package fakecert is a stand-in certifier for tests of its clients
// (certclient, the agent) that must control what the certifier answers,
// or see exactly what it was sent: every certify request and every staged
// fragment is recorded. It speaks the real gRPC API on a real TCP port:
// Status, the Certify session (open, pipelined requests, catch-up) and
// Stage. It certifies nothing: each request gets what Decide says (by
// default a commit), a commit gets the next versions (one per fragment of
// a streamed request, LogEntry.span_first..span_last), and its entries
// are delivered, in version order, before its reply. Flow control, log
// retention and push are not modelled.
package fakecert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// fragmentBytesMax is the largest message the fake receives: a fragment
// of one change as large as a log entry may be.
const fragmentBytesMax = 64 << 20

// Decide answers a certify request; a reply with DECISION_COMMIT gets its
// versions from the fake. nil: commit.
type Decide func(req *pb.CertifyRequestEncoded) *pb.CertifyReply

// Stage is what a Stage call received.
type Stage struct {
	Txn       *pb.TxnID
	Fragments [][]byte
	// Err is how the call ended: nil (closed by the client and
	// answered), or the error the fake or the client's cancel ended it
	// with.
	Err error
}

// Certifier is the fake.
type Certifier struct {
	pb.UnimplementedCertifierServer
	t   testing.TB
	srv *grpc.Server
	ln  net.Listener

	mu       sync.Mutex
	decide   Decide
	refusal  error // Stage's answer after the first fragment; nil: accept
	silent   bool  // replies are not sent (DropReplies)
	log      [][]byte
	requests []*pb.CertifyRequestEncoded
	stages   []*Stage
	staged   map[string]*Stage // completed stages by transaction
	changed  chan struct{}     // closed and replaced whenever something is recorded
}

// Start serves the fake on a free port until the test ends.
func Start(t testing.TB) *Certifier {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Certifier{t: t, srv: grpc.NewServer(grpc.MaxRecvMsgSize(fragmentBytesMax)), ln: ln, staged: map[string]*Stage{}, changed: make(chan struct{})}
	pb.RegisterCertifierServer(f.srv, f)
	go f.srv.Serve(ln)
	t.Cleanup(f.Stop)
	return f
}

// Addr is the fake's address.
func (f *Certifier) Addr() string { return f.ln.Addr().String() }

// Stop stops serving: every open stream breaks and new calls find no
// certifier.
func (f *Certifier) Stop() { f.srv.Stop() }

// SetDecide replaces the decision function.
func (f *Certifier) SetDecide(d Decide) {
	f.mu.Lock()
	f.decide = d
	f.mu.Unlock()
}

// RefuseStages makes every Stage call end with err after its first
// fragment (a status error: codes.ResourceExhausted for a limit); nil
// accepts them again.
func (f *Certifier) RefuseStages(err error) {
	f.mu.Lock()
	f.refusal = err
	f.mu.Unlock()
}

// DropReplies makes the fake deliver commits as entries without sending
// the replies, as a certifier that restarted between the two: a client
// learns the outcome from the entries.
func (f *Certifier) DropReplies(drop bool) {
	f.mu.Lock()
	f.silent = drop
	f.mu.Unlock()
}

// Requests returns the certify requests received, in order.
func (f *Certifier) Requests() []*pb.CertifyRequestEncoded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.CertifyRequestEncoded(nil), f.requests...)
}

// Stages returns the Stage calls received, in order; a call still open
// shows what it received so far.
func (f *Certifier) Stages() []Stage {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Stage, len(f.stages))
	for i, s := range f.stages {
		out[i] = Stage{Txn: s.Txn, Fragments: append([][]byte(nil), s.Fragments...), Err: s.Err}
	}
	return out
}

// Changed is closed when a request, a fragment or the end of a stage is
// recorded next.
func (f *Certifier) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *Certifier) recorded() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Status reports the fake's last version as durable.
func (f *Certifier) Status(_ context.Context, _ *pb.StatusRequest) (*pb.StatusReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := uint64(len(f.log))
	return &pb.StatusReply{Version: v, DurableVersion: v, Role: "single"}, nil
}

// Stage records the fragments of a streamed writeset. It accepts the
// stage at once (the response headers), as a certifier does.
func (f *Certifier) Stage(stream pb.Certifier_StageServer) error {
	s := &Stage{}
	f.mu.Lock()
	f.stages = append(f.stages, s)
	f.mu.Unlock()
	err := f.receiveStage(stream, s)
	f.mu.Lock()
	defer f.mu.Unlock()
	s.Err = err
	if err == nil {
		f.staged[txnKey(s.Txn)] = s
	}
	f.recorded()
	return err
}

func (f *Certifier) receiveStage(stream pb.Certifier_StageServer, s *Stage) error {
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	var total uint64
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&pb.StageReply{Fragments: uint32(len(s.Fragments)), Bytes: total})
		}
		if err != nil {
			return err
		}
		f.mu.Lock()
		if len(s.Fragments) == 0 {
			s.Txn = req.Txn
		}
		s.Fragments = append(s.Fragments, req.Fragment)
		total += uint64(len(req.Fragment))
		refusal := f.refusal
		f.recorded()
		f.mu.Unlock()
		if refusal != nil {
			return refusal
		}
	}
}

// Certify is a replica's session.
func (f *Certifier) Certify(stream pb.Certifier_CertifyServer) error {
	var delivered uint64
	for {
		var msg pb.CertifyStreamRequestEncoded
		if err := stream.RecvMsg(&msg); err != nil {
			return err
		}
		if msg.Open != nil {
			delivered = msg.Open.ReplicaVersion
		}
		reply := &pb.CertifyStreamReply{}
		f.mu.Lock()
		for _, req := range msg.Requests {
			if r := f.certifyLocked(req); !f.silent {
				reply.Replies = append(reply.Replies, r)
			}
		}
		reply.Entries = f.log[min(delivered, uint64(len(f.log))):]
		delivered = uint64(len(f.log))
		reply.DurableVersion = delivered
		f.mu.Unlock()
		if err := stream.Send(reply); err != nil {
			return err
		}
	}
}

// certifyLocked records and answers a request; a commit is appended to
// the log.
func (f *Certifier) certifyLocked(req *pb.CertifyRequestEncoded) *pb.CertifyReply {
	f.requests = append(f.requests, req)
	f.recorded()
	reply := &pb.CertifyReply{Decision: pb.Decision_DECISION_COMMIT}
	if f.decide != nil {
		reply = f.decide(req)
	}
	reply.RequestId, reply.Txn = req.RequestId, req.Txn
	if reply.Decision != pb.Decision_DECISION_COMMIT {
		return reply
	}
	if req.Streamed == nil {
		reply.CommitVersion = f.append(&pb.LogEntry{Txn: req.Txn, Writeset: f.writeset(req.Writeset)})
		return reply
	}
	s := f.staged[txnKey(req.Txn)]
	if s == nil || uint32(len(s.Fragments)) != req.Streamed.Fragments {
		return &pb.CertifyReply{RequestId: req.RequestId, Txn: req.Txn, Decision: pb.Decision_DECISION_ABORT,
			AbortReason: pb.AbortReason_ABORT_REASON_INVALID, Detail: "the streamed writeset was not staged (or not completely)"}
	}
	first := uint64(len(f.log)) + 1
	last := first + uint64(len(s.Fragments)) - 1
	for i, frag := range s.Fragments {
		e := &pb.LogEntry{Txn: req.Txn, Writeset: f.writeset(frag), SpanFirst: first, SpanLast: last}
		if i == len(s.Fragments)-1 {
			e.Certified = f.writeset(req.Writeset)
		}
		f.append(e)
	}
	reply.FirstVersion, reply.CommitVersion = first, last
	return reply
}

func (f *Certifier) writeset(b []byte) *pb.Writeset {
	ws := &pb.Writeset{}
	if err := proto.Unmarshal(b, ws); err != nil {
		f.t.Errorf("fakecert: a writeset that does not decode: %v", err)
	}
	return ws
}

// append adds e at the next version and returns it.
func (f *Certifier) append(e *pb.LogEntry) uint64 {
	e.Version = uint64(len(f.log)) + 1
	b, err := proto.Marshal(e)
	if err != nil {
		f.t.Errorf("fakecert: %v", err)
	}
	f.log = append(f.log, b)
	return e.Version
}

func txnKey(t *pb.TxnID) string { return fmt.Sprintf("%s/%d", t.GetOrigin(), t.GetSeq()) }

// Refused is the status error a certifier's limit gives, for RefuseStages.
func Refused(detail string) error { return status.Error(codes.ResourceExhausted, detail) }
