package agent

import (
	"errors"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent/order"
)

// maintain bounds staleness (Tashkent §6.2: the replica asks for what the
// certifier has, at least every Staleness, besides what it pushes), checks
// the database: its version (local commits advance it without the agent)
// and that it is still the one the run started on, and reports the
// replica's durable version (progress.go).
func (r *run) maintain() {
	tick := time.NewTicker(r.a.cfg.Staleness)
	defer tick.Stop()
	var reported time.Time
	for {
		var now time.Time
		select {
		case <-r.ctx.Done():
			return
		case now = <-tick.C:
		}
		if now.Sub(reported) >= progressReportInterval {
			r.reportProgress()
			reported = now
		}
		r.cert.RequestCatchUp()
		_, err := r.readCommitted()
		switch {
		case r.ctx.Err() != nil:
			return
		case errors.Is(err, errLostCommits):
			r.fail(err)
			return
		case err != nil:
			r.reconnectControl(err)
		}
	}
}

// watchInherited follows the versions backends held when the agent
// started (settle): each is committed by its backend, or, if the backend
// lets go of it without committing it (it aborted, or ended), it becomes
// remote and the applier applies it (Tashkent §8.1). The backends are read
// before the database's version, so that a version whose slot is gone and
// which is not committed after that was given up.
func (r *run) watchInherited(inherited []*order.Local) {
	tick := time.NewTicker(inheritedPollInterval)
	defer tick.Stop()
	for len(inherited) > 0 {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		held, committed, err := r.heldVersions()
		if errors.Is(err, errLostCommits) {
			r.fail(err)
			return
		}
		if err != nil {
			continue // the health check notices a lost database
		}
		kept := inherited[:0]
		for _, l := range inherited {
			switch v := l.Version(); {
			case v <= committed:
			case held[v]:
				kept = append(kept, l)
			default:
				r.a.log.Info("a backend let go of the version it held when the agent started; applying it", "version", v)
				r.a.seq.abandon(l)
			}
		}
		inherited = kept
	}
}

// heldVersions reads the versions backends hold, then the database's
// version.
func (r *run) heldVersions() (map[uint64]bool, uint64, error) {
	held := map[uint64]bool{}
	var v int64
	err := r.control.query(r.ctx, `SELECT b.version FROM tashkent.backends() AS b
		WHERE b.state OPERATOR(pg_catalog.=) ANY ('{holding,committing}'::pg_catalog.text[])`,
		nil, []any{&v}, func() { held[uint64(v)] = true })
	if err != nil {
		return nil, 0, err
	}
	committed, err := r.readCommitted()
	return held, committed, err
}
