package sim

import "slices"

// supervisor is the cluster's supervisor (internal/cluster,
// supervisor.go): it rebuilds the replicas whose agent halted, one at a
// time, as the real one does under the cluster lock, if the replica's
// agent runs and still says it halted when its turn comes. A rebuild
// takes rebuildTicksMin..RebuildTicksMax ticks.
type supervisor struct {
	w       *world
	waiting []*replica // halted, in the order they halted
	busy    bool       // a rebuild is in progress
}

// rebuildTicksMin is the shortest rebuild: a copy and a start take a
// while even for an empty database.
const rebuildTicksMin = 10

// refused is the agent halting when the certifier refuses its session
// (agent/progress.go, refused): the replica holds versions the log does
// not, so it admits no new transaction and waits to be rebuilt. The
// client keeps trying meanwhile, as certclient does, and applies what an
// admitted stream delivers; the agent stays halted until its next run
// (an agent start or a database restart).
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
	s.w.after(s.w.between(rebuildTicksMin, s.w.cfg.RebuildTicksMax), "rebuild", func() {
		if r.up && r.halted {
			r.rebuild()
		}
		s.busy = false
		s.next()
	})
}

// rebuild is the supervisor's state transfer (cluster/replica_rebuild.go):
// the replica's database is replaced by a copy of a donor's, and the
// agent, started on the copy, catches up from the copy's version. The
// donor is the serving replica with the highest version (chooseDonor).
// With none, the real supervisor cannot rebuild and an operator must act;
// re-creating the certifier usually leaves no donor, since every replica
// holds the old log's versions. The simulation then rebuilds from an
// empty database that catches up from the log's start (the simulated log
// is never compacted, so it holds every version) and counts it apart
// (Stats.RebuildsWithoutDonor). The old database's sessions, commits in
// flight and stream end with it.
func (r *replica) rebuild() {
	donor := r.w.chooseDonor(r)
	r.w.stats.Rebuilds++
	r.incarnation++ // its commits in flight and timers are void
	r.busy, r.inFlight = false, nil
	for _, s := range r.sessions {
		s.lost()
	}
	r.client.close()
	r.client = nil
	if donor == nil {
		r.w.stats.RebuildsWithoutDonor++
		r.db = newStore(r.w, r.id)
		r.w.note("rebuilt-without-donor", uint64(r.id), 0, 0)
	} else {
		r.db = donor.db.copyFor(r.id)
		r.w.note("rebuilt", uint64(r.id), uint64(donor.id), r.db.version)
	}
	r.versionBeforeCrash = 0
	r.restart()
}

// chooseDonor is the replica a rebuild of target copies
// (cluster/replica_add.go, chooseDonor): the serving one with the
// highest version, nil if none serves. A donor serves when its agent
// runs, has caught up and has not halted, its database is up, and the
// certifier admitted its stream (donorVersion): its store holds a prefix
// of the current log.
func (w *world) chooseDonor(target *replica) *replica {
	var best *replica
	for _, d := range w.replicas {
		if d == target || !d.up || !d.dbUp || d.recovering || d.halted || !w.cert.admitted(d) {
			continue
		}
		if best == nil || d.db.version > best.db.version {
			best = d
		}
	}
	return best
}
