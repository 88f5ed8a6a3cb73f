package sim

import "slices"

// supervisor is the cluster's supervisor (internal/cluster,
// supervisor.go): it rebuilds the replicas whose agent halted, one at a
// time, as the real one does under the cluster lock, if the replica's
// agent still says it halted when its turn comes. A rebuild takes
// 10..RebuildTicksMax ticks.
type supervisor struct {
	w       *world
	waiting []*replica // halted, in the order they halted
	busy    bool       // a rebuild is in progress
}

// refused is the agent halting when the certifier refuses its session
// (agent/progress.go, refused): the replica holds versions the log does
// not, so it admits no new transaction and waits to be rebuilt. The
// client keeps trying meanwhile, as certclient does, and applies what an
// admitted stream delivers; the agent stays halted until it restarts.
func (r *replica) refused() {
	if r.halted {
		return
	}
	r.halted = true
	r.w.note("halted", uint64(r.id), r.db.version, 0)
	s := &r.w.supervisor
	if !slices.Contains(s.waiting, r) {
		s.waiting = append(s.waiting, r)
	}
	s.next()
}

// next starts the rebuild of the replica that halted first, unless one
// is in progress.
func (s *supervisor) next() {
	if s.busy || len(s.waiting) == 0 {
		return
	}
	r := s.waiting[0]
	s.waiting = s.waiting[1:]
	s.busy = true
	s.w.after(s.w.between(10, s.w.cfg.RebuildTicksMax), "rebuild", func() {
		if r.halted {
			r.rebuild()
		}
		s.busy = false
		s.next()
	})
}

// rebuild is the supervisor's state transfer, reduced to what the
// simulation needs: the replica's database is replaced by an empty one,
// which the agent, started on it, catches up from the log's start. (The
// real supervisor copies a serving peer and catches up from the copy's
// version; the simulated log is never compacted, so it always holds every
// version.) The old database's sessions, commits in flight and stream
// end with it.
func (r *replica) rebuild() {
	r.w.stats.Rebuilds++
	if r.up {
		r.incarnation++ // its commits in flight and timers are void
		r.busy, r.inFlight = false, nil
		for _, s := range r.sessions {
			s.lost()
		}
		r.client.close()
		r.client = nil
	}
	r.db = newStore(r.w, r.id)
	r.versionBeforeCrash = 0
	r.w.note("rebuilt", uint64(r.id), 0, 0)
	r.restart()
}
