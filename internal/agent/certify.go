package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/order"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// certify asks the certifier for a backend's transaction (Tashkent §6.2
// C2, C3) and maps its reply to the decision the backend acts on. The
// writeset goes as the backend encoded it.
func (c *backendConn) certify(ctx context.Context, m wire.Certify) wire.Decision {
	r, refusal := c.certifyingRun()
	if r == nil {
		c.a.metrics.certified(refusal, false)
		return refusal
	}
	return c.certifyOn(r, &pb.CertifyRequestEncoded{
		Txn:          c.a.txnID(c.a.txnSeq.Add(1)),
		StartVersion: m.StartVersion,
		Writeset:     m.Writeset,
	})
}

// certifyingRun is the run that certifies this backend's transactions
// now, or nil and the decision that says why none does.
func (c *backendConn) certifyingRun() (*run, wire.Decision) {
	r, why := c.a.servingRun(c.run)
	if r == nil {
		return nil, wire.Decision{Kind: wire.Unavailable, Detail: why}
	}
	if why := r.writeRefusal(); why != "" {
		return nil, wire.Decision{Kind: wire.Unavailable, Detail: why}
	}
	return r, wire.Decision{}
}

// certifyOn sends req on run r's session stream. The transaction is
// registered as local before it is sent: the certifier delivers its
// version (a streamed one's versions) before the reply, and the order must
// know it is this replica's to commit.
func (c *backendConn) certifyOn(r *run, req *pb.CertifyRequestEncoded) wire.Decision {
	c.pruneDecided()
	local := c.a.seq.register(req.Txn.Seq)
	start := time.Now()
	reply, err := r.cert.CertifyEncodedWithin(r.ctx, c.startTimeout(r.certifyTimeout), req)
	c.timeout.Stop()
	c.a.metrics.certifyLatency.Observe(time.Since(start).Seconds())
	var d wire.Decision
	switch {
	case err != nil:
		c.a.seq.abandon(local)
		d = wire.Decision{Kind: wire.Unknown, Detail: err.Error()}
	case reply.Decision != pb.Decision_DECISION_COMMIT:
		c.a.seq.abandon(local)
		d = wire.Decision{Kind: wire.Abort, Version: reply.ConflictVersion, AbortReason: uint8(reply.AbortReason), Detail: reply.Detail}
	default:
		d = c.committed(local, reply.CommitVersion, r.history.epochOf(reply.CommitVersion))
	}
	c.a.metrics.certified(d, req.Streamed != nil)
	return d
}

// committed answers a commit with version v of epoch, which was delivered
// to the order as local before this reply (a streamed transaction's v is
// the last version of its span, which is the version the order gives its
// Local), its run recorded in the history first. If it was not (the replica was started again meanwhile, with a
// stream that has not delivered it), the version is the order's to apply:
// the backend hears that the outcome is unknown, rolls back, and the
// applier commits v in its place.
func (c *backendConn) committed(local *order.Local, v, epoch uint64) wire.Decision {
	if got := c.a.seq.versionOf(local); got != v {
		c.a.seq.abandon(local)
		c.a.log.Warn("a certified version was not delivered to its transaction; it is applied instead", "version", v, "delivered", got)
		return wire.Decision{Kind: wire.Unknown, Version: 0,
			Detail: fmt.Sprintf("the cluster committed it as version %d, which this replica applies from the log: the replica was restarted while it was certified", v)}
	}
	c.mu.Lock()
	c.decided = append(c.decided, local)
	c.mu.Unlock()
	return wire.Decision{Kind: wire.Commit, Version: v, Epoch: epoch, Durable: c.durableAtReply(v)}
}

// durableAtReply is the durable version a commit reply of version v tells
// the backend. Outside mode ed the certifier answers a commit only once it
// is durable, so the reply itself says v is; a safe commit then never
// waits for the feed (extension/src/safe.c).
func (c *backendConn) durableAtReply(v uint64) uint64 {
	durable, _ := c.a.durable.load() // an admitted stream's: the reply came on one
	if c.a.cfg.Mode != ModeED && v > durable {
		return v
	}
	return durable
}

// startTimeout starts the connection's timer, which its certifications
// share (one at a time), and returns its channel.
func (c *backendConn) startTimeout(d time.Duration) <-chan time.Time {
	if c.timeout == nil {
		c.timeout = time.NewTimer(d)
	} else {
		c.timeout.Reset(d)
	}
	return c.timeout.C
}

// servingRun is the run that certifies for a backend welcomed in run w,
// or nil and why not.
func (a *Agent) servingRun(w *run) (*run, string) {
	a.mu.Lock()
	r, state, why := a.run, a.state, a.why
	a.mu.Unlock()
	switch {
	case state == StateHalted:
		return nil, "the replica stopped applying the cluster's commits and must be rebuilt: " + why
	case r == nil || state != StateServing:
		return nil, fmt.Sprintf("the tashkent agent is %s: %s", state, why)
	case w != nil && w != r:
		return nil, "this backend connected to the agent before the replica's database restarted"
	}
	return r, ""
}

// abandon handles a backend's word that it will not commit version v,
// which it was told to commit (it failed after certification): the
// version becomes remote and the applier applies it (Tashkent §8.1).
func (c *backendConn) abandon(v uint64) {
	c.mu.Lock()
	var found *order.Local
	for i, l := range c.decided {
		if c.a.seq.versionOf(l) == v {
			found = l
			c.decided = append(c.decided[:i], c.decided[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if found == nil {
		c.a.log.Warn("a backend abandoned a version it was not told to commit", "pid", c.pid, "version", v)
		return
	}
	c.a.log.Info("a backend abandoned its certified version; applying it", "pid", c.pid, "version", v)
	c.a.seq.abandon(found)
}

// closed handles a closed connection: each version its backend was told
// to commit and that the database does not show committed afterwards is
// abandoned. A backend closes its socket only when it exits (after its
// transaction ended: a commit is visible by then) or when it gave up
// waiting for a decision (it rolls back), so the database's version read
// after the close settles it.
func (c *backendConn) closed() {
	c.mu.Lock()
	decided := c.decided
	c.decided = nil
	c.mu.Unlock()
	if len(decided) == 0 {
		return
	}
	r := c.a.currentRun()
	if r == nil || (c.run != nil && c.run != r) {
		return // the database restarted: the new run replays every version it lacks
	}
	committed, err := c.readCommittedUntilAnswered(r)
	if errors.Is(err, errLostCommits) {
		r.fail(err)
		return
	}
	if err != nil {
		return // the run ended: the next one replays every version the database lacks
	}
	for _, l := range decided {
		if v := c.a.seq.versionOf(l); v > committed {
			c.a.log.Info("a backend left without committing its certified version; applying it", "pid", c.pid, "version", v)
			c.a.seq.abandon(l)
		}
	}
}

// readCommittedUntilAnswered reads the replica's version, again and again
// while the control connection is lost (the maintenance loop replaces it):
// until it answers, the versions the backend left behind are neither known
// committed nor abandoned, and a version never abandoned would never be
// applied. It gives up only when the run ends.
func (c *backendConn) readCommittedUntilAnswered(r *run) (uint64, error) {
	delay := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		committed, err := r.readCommitted()
		if err == nil || errors.Is(err, errLostCommits) {
			return committed, err
		}
		if attempt == 0 {
			c.a.log.Warn("could not read the replica's version after a backend left; retrying", "pid", c.pid, "err", err)
		}
		select {
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// pruneDecided forgets the versions known committed.
func (c *backendConn) pruneDecided() {
	committed := c.a.seq.committed()
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.decided[:0]
	for _, l := range c.decided {
		if c.a.seq.versionOf(l) > committed {
			kept = append(kept, l)
		}
	}
	c.decided = kept
}

// txnID names this agent's transaction seq (Agent.origin).
func (a *Agent) txnID(seq uint64) *pb.TxnID { return &pb.TxnID{Origin: a.origin, Seq: seq} }
