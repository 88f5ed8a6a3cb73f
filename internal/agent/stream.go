package agent

import (
	"errors"
	"fmt"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/certclient"
)

// staging is a backend's streamed writeset on its way to the certifier:
// the backend sends it as Fragment frames, each forwarded to the
// certifier's Stage as it is read, then CertifyStreamed. One fragment is
// in memory at a time: while the certifier is slower than the backend,
// gRPC's flow control blocks the forwarding, the agent stops reading the
// backend's socket, and the backend's writes wait.
//
// A stage that fails is not retried: the fragments already forwarded are
// gone from the agent. The backend's remaining fragments are read and
// dropped (the backend sends them all before it reads an answer), and its
// CertifyStreamed is answered with why.
type staging struct {
	a     *Agent
	run   *run
	seq   uint64
	stage *certclient.Stage // nil once it failed, or if it never opened
	// failure answers the CertifyStreamed when stage is nil.
	failure   wire.Decision
	fragments uint32 // fragments read from the backend
	bytes     uint64 // their size
}

// beginStaging opens the stage of a backend's streamed writeset, at its
// first fragment; the transaction id is allocated now, since Stage
// carries it.
func (c *backendConn) beginStaging() *staging {
	s := &staging{a: c.a}
	r, refusal := c.certifyingRun()
	if r == nil {
		s.failure = refusal
		return s
	}
	s.run, s.seq = r, c.a.txnSeq.Add(1)
	stage, err := r.cert.Stage(r.ctx, c.a.txnID(s.seq))
	if err != nil {
		s.fail(err)
		return s
	}
	s.stage = stage
	return s
}

// forward sends a fragment to the certifier, or drops it once the stage
// failed.
func (s *staging) forward(f wire.Fragment) {
	s.fragments++
	s.bytes += uint64(len(f.Writeset))
	if s.stage == nil {
		return
	}
	if err := s.watched(func() error { return s.stage.Send(f.Writeset) }); err != nil {
		s.fail(err)
		return
	}
	s.a.metrics.stagedBytes.Add(float64(len(f.Writeset)))
}

// watched runs a call of the stage, cancelling the stage if the
// certifier takes longer than a certification may: a certifier that stops
// reading would otherwise hold the backend in its write for ever.
func (s *staging) watched(call func() error) error {
	t := time.AfterFunc(s.run.certifyTimeout, s.stage.Cancel)
	defer t.Stop()
	return call()
}

// fail ends the stage; the transaction is answered with why.
func (s *staging) fail(err error) {
	if s.stage != nil {
		s.stage.Cancel()
		s.stage = nil
	}
	var refused *certclient.StageRefusedError
	if errors.As(err, &refused) {
		s.failure = wire.Decision{Kind: wire.Abort, AbortReason: uint8(refused.Reason), Detail: refused.Detail}
		return
	}
	s.failure = wire.Decision{Kind: wire.Unavailable, Detail: err.Error()}
}

// cancel ends the stage of a backend whose connection closed mid-stream:
// the certifier drops what it staged. s may be nil.
func (s *staging) cancel() {
	if s != nil && s.stage != nil {
		s.stage.Cancel()
	}
}

// close ends the stage and checks that the certifier holds what the
// backend says it sent; if not, it returns the decision to answer with
// and false. A backend that miscounted has its stage cancelled, so that
// the certifier drops it at once.
func (s *staging) close(m wire.CertifyStreamed) (wire.Decision, bool) {
	if m.Fragments != s.fragments || m.Bytes != s.bytes {
		s.cancel()
		return invalid(fmt.Sprintf("the backend announced %d fragments of %d bytes and sent %d of %d",
			m.Fragments, m.Bytes, s.fragments, s.bytes)), false
	}
	if s.stage == nil {
		return s.failure, false
	}
	var reply *pb.StageReply
	err := s.watched(func() (err error) {
		reply, err = s.stage.Close()
		return err
	})
	s.stage = nil
	switch {
	case err != nil:
		s.fail(err)
		return s.failure, false
	case reply.Fragments != s.fragments || reply.Bytes != s.bytes:
		return invalid(fmt.Sprintf("the certifier staged %d fragments of %d bytes, the agent forwarded %d of %d",
			reply.Fragments, reply.Bytes, s.fragments, s.bytes)), false
	}
	return wire.Decision{}, true
}

// certifyStreamed answers a backend's CertifyStreamed: its fragments were
// staged (s; nil if it sent none), and the transaction is certified on
// its certified writeset as any other on the session stream. A commit's
// version is the last of the span.
func (c *backendConn) certifyStreamed(s *staging, m wire.CertifyStreamed) wire.Decision {
	if s == nil {
		s = &staging{a: c.a, failure: invalid("a streamed writeset came without fragments")}
	}
	if d, ok := s.close(m); !ok {
		c.a.metrics.certified(d, true)
		return d
	}
	r, refusal := c.certifyingRun()
	if r == nil {
		c.a.metrics.certified(refusal, true)
		return refusal
	}
	return c.certifyOn(r, &pb.CertifyRequestEncoded{
		Txn:          c.a.txnID(s.seq),
		StartVersion: m.StartVersion,
		Writeset:     m.Certified,
		Streamed:     &pb.Streamed{Fragments: s.fragments, Bytes: s.bytes},
	})
}

// invalid is the decision on a malformed streamed writeset: nothing was
// certified.
func invalid(detail string) wire.Decision {
	return wire.Decision{Kind: wire.Abort, AbortReason: uint8(pb.AbortReason_ABORT_REASON_INVALID), Detail: detail}
}
