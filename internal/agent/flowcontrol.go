package agent

import (
	"context"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/order"
)

// flowControlInterval is how often the agent looks at its backlog. At a
// few thousand commits a second a backlog grows by tens of versions in
// it: well inside the default limit.
const flowControlInterval = 10 * time.Millisecond

// flowControlStuckAfter: an apply that made no progress for this long is
// stuck (a lock the lock watch has not freed yet, a long DDL, one batch of
// large transactions), not slow; holding the other replicas' commits would
// not let it catch up sooner, so the pause is released.
const flowControlStuckAfter = time.Second

// applyProgress measures how long the apply has gone without progress
// while remote versions wait for it.
type applyProgress struct {
	lastApplied  uint64
	lastProgress time.Time
	lastBacklog  uint64
}

// observe takes one sample and returns how long versions have waited
// without the apply making progress (0 while none waits).
func (p *applyProgress) observe(now time.Time, applied, backlog uint64) time.Duration {
	if applied != p.lastApplied || p.lastBacklog == 0 {
		// progress, or a backlog that has just begun: not stalled
		p.lastApplied, p.lastProgress = applied, now
	}
	p.lastBacklog = backlog
	if backlog == 0 {
		return 0
	}
	return now.Sub(p.lastProgress)
}

// watchApply samples the apply's progress every flowControlInterval for
// tashkent_agent_apply_stalled_seconds and, unless they are turned off,
// runs flow control and the write refusal (refusal.go) on it.
func (r *run) watchApply() {
	tick := time.NewTicker(flowControlInterval)
	defer tick.Stop()
	progress := applyProgress{lastApplied: get(r.a.seq, (*order.Order).Applied), lastProgress: time.Now()}
	defer r.a.applyStalledSince.Store(0)
	var fc *flowControl
	if !r.a.cfg.NoFlowControl {
		fc = r.startFlowControl()
		defer fc.stop()
	}
	var refusal *writeRefusal
	if r.a.cfg.RefuseWritesAfter > 0 {
		refusal = &writeRefusal{r: r, after: r.a.cfg.RefuseWritesAfter}
		defer refusal.stop()
	}
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		// A span's fragments are progress before its commit is.
		applied, backlog := r.a.seq.committed(), uint64(r.a.seq.remoteWaiting())
		now := time.Now()
		stalled := progress.observe(now, get(r.a.seq, (*order.Order).Applied), backlog)
		if stalled > 0 {
			r.a.applyStalledSince.Store(now.Add(-stalled).UnixNano())
		} else {
			r.a.applyStalledSince.Store(0)
		}
		if fc != nil {
			fc.step(backlog, stalled > flowControlStuckAfter)
		}
		if refusal != nil {
			refusal.step(stalled, backlog, applied)
		}
	}
}

// flowControl asks the certifier to hold the other replicas' requests
// while this replica has fallen behind (CertifyStreamRequest.pause): more
// than FlowControlLimit remote versions delivered and not yet applied, a
// span (a streamed transaction) counting as one. It
// asks until the backlog is down to half the limit (so that the pause
// does not flap at every batch), only while the replica serves clients (a
// replica catching up after a restart does not stop the cluster), and not
// while its apply is stuck. Galera's flow control (gcs.fc_limit) is the
// model: the cluster commits at the pace of its slowest replica, instead
// of the slowest replica's own transactions all conflicting with the
// versions it has not applied yet.
type flowControl struct {
	r       *run
	limit   uint64
	pausing bool
}

func (r *run) startFlowControl() *flowControl {
	fc := &flowControl{r: r, limit: r.a.cfg.FlowControlLimit}
	r.setCatchUpTarget(false, fc.limit) // an earlier agent may have left one
	return fc
}

// stop ends the pause: the next run starts without one.
func (fc *flowControl) stop() {
	fc.r.a.metrics.flowControlPausing.Set(0)
	fc.r.setCatchUpTarget(false, fc.limit)
}

// step decides on one sample of the backlog.
func (fc *flowControl) step(backlog uint64, stuck bool) {
	r, limit := fc.r, fc.limit
	state, _ := r.a.State()
	want := state == StateServing && !stuck &&
		(backlog > limit || (fc.pausing && backlog > limit/2))
	if want == fc.pausing {
		return
	}
	fc.pausing = want
	r.cert.SetPause(want)
	r.setCatchUpTarget(want, limit)
	r.a.metrics.flowControlPausing.Set(boolGauge(want))
	if want {
		r.a.metrics.flowControlPauses.Inc()
		r.a.flowControlPauses.Add(1)
		r.a.log.Info("flow control: this replica fell behind; the certifier holds the other replicas' commits",
			"backlog", backlog, "limit", limit)
	} else {
		r.a.log.Info("flow control: pause released", "backlog", backlog, "stuck", stuck)
	}
}

// setCatchUpTarget makes the replica's own clients wait, at their first
// write, until the backlog is down to half the limit (extension
// causal.c, tashkent.catch_up_wait), while the replica asks for the pause;
// 0 when it no longer does. The other replicas' commits are held by the
// certifier meanwhile; this one's would conflict with the versions it has
// not applied, and hold the row locks their apply needs while they do.
func (r *run) setCatchUpTarget(pausing bool, limit uint64) {
	target := uint64(0)
	if pausing {
		if delivered := r.a.seq.delivered(); delivered > limit/2 {
			target = delivered - limit/2
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if err := r.control.exec(ctx, `SELECT tashkent.set_catch_up_target($1)`, int64(target)); err != nil && r.ctx.Err() == nil {
		r.a.log.Warn("flow control: could not set the replica's catch-up target", "target", target, "err", err)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
