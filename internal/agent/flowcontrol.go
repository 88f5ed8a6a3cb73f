package agent

import (
	"context"
	"time"
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

// flowControl asks the certifier to hold the other replicas' requests
// while this replica has fallen behind (CertifyStreamRequest.pause): more
// than FlowControlLimit remote versions delivered and not yet applied. It
// asks until the backlog is down to half the limit (so that the pause
// does not flap at every batch), only while the replica serves clients (a
// replica catching up after a restart does not stop the cluster), and not
// while its apply is stuck. Galera's flow control (gcs.fc_limit) is the
// model: the cluster commits at the pace of its slowest replica, instead
// of the slowest replica's own transactions all conflicting with the
// versions it has not applied yet.
func (r *run) flowControl() {
	limit := r.a.cfg.FlowControlLimit
	tick := time.NewTicker(flowControlInterval)
	defer tick.Stop()
	var (
		pausing      bool
		lastApplied  = r.a.seq.committed()
		lastProgress = time.Now()
		lastBacklog  uint64
	)
	defer r.a.metrics.flowControlPausing.Set(0) // the next run starts without a pause
	defer r.setCatchUpTarget(false, limit)
	r.setCatchUpTarget(false, limit) // an earlier agent may have left one
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		applied, backlog := r.a.seq.committed(), uint64(r.a.seq.remoteWaiting())
		now := time.Now()
		if applied != lastApplied || lastBacklog == 0 {
			// progress, or a backlog that has just begun: not stuck
			lastApplied, lastProgress = applied, now
		}
		lastBacklog = backlog
		state, _ := r.a.State()
		stuck := backlog > 0 && now.Sub(lastProgress) > flowControlStuckAfter
		want := state == StateServing && !stuck &&
			(backlog > limit || (pausing && backlog > limit/2))
		if want == pausing {
			continue
		}
		pausing = want
		r.cert.SetPause(pausing)
		r.setCatchUpTarget(pausing, limit)
		r.a.metrics.flowControlPausing.Set(boolGauge(pausing))
		if pausing {
			r.a.metrics.flowControlPauses.Inc()
			r.a.flowControlPauses.Add(1)
			r.a.log.Info("flow control: this replica fell behind; the certifier holds the other replicas' commits",
				"backlog", backlog, "limit", limit)
		} else {
			r.a.log.Info("flow control: pause released", "backlog", backlog, "stuck", stuck)
		}
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
