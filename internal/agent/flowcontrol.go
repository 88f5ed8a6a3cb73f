package agent

import (
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

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
