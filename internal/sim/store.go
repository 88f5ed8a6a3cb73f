package sim

import (
	"slices"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
)

// store stands in for a replica's PostgreSQL database: a multi-version
// key-value store that commits versions strictly one after another and
// records, with each, which transaction it was and the epoch of its log
// entry (what the checkers compare with the log). Reads at a snapshot see
// the versions up to it. It also holds the replica's history, the runs
// of its versions by epoch (the table tashkent.history).
type store struct {
	w       *world
	replica int
	history [][]versioned // per key, ascending by version
	version uint64        // every version up to here is committed
	flushed uint64        // mw: versions up to here survive a crash
	applied []certification.TxnID
	epochs  []uint64 // epochs[i] is the epoch of applied[i]'s entry
	// runs is tashkent.history: written synchronously, so it survives a
	// crash; a run is recorded before any of its versions commits.
	runs []*pb.EpochRun
	// lineage is the certifier lineage (lineage.go) whose log the
	// versions came from; meaningful while version > 0.
	lineage int
}

// versioned is one committed value of a key.
type versioned struct {
	version uint64
	value   int64
}

func newStore(w *world, replica int) *store {
	return &store{w: w, replica: replica, history: make([][]versioned, w.cfg.Keys)}
}

// copyFor is a copy of the store for replica, as a rebuild's copy of a
// donor's data directory holds it: every committed version, flushed, and
// the history table.
func (s *store) copyFor(replica int) *store {
	c := &store{
		w: s.w, replica: replica, history: make([][]versioned, len(s.history)),
		version: s.version, flushed: s.version, lineage: s.lineage,
		applied: slices.Clone(s.applied), epochs: slices.Clone(s.epochs), runs: slices.Clone(s.runs),
	}
	for k, h := range s.history {
		c.history[k] = slices.Clone(h)
	}
	return c
}

// read returns the value of key at snapshot (0: never written).
func (s *store) read(key int, snapshot uint64) int64 {
	h := s.history[key]
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].version <= snapshot {
			return h[i].value
		}
	}
	return 0
}

// commit installs version v, of txn, certified in epoch. Versions must
// come in order, with no gap: this is the checker of "every replica
// applies versions in order". The checks of its history (checkCommit)
// run first.
func (s *store) commit(v uint64, txn certification.TxnID, epoch uint64, writes []write) {
	if v != s.version+1 {
		s.w.violate("replica %d committed version %d after version %d (a gap or a repeat)", s.replica, v, s.version)
		return
	}
	if s.replica >= 0 {
		s.checkCommit(v, txn, epoch)
	}
	for _, wr := range writes {
		s.history[wr.key] = append(s.history[wr.key], versioned{version: v, value: wr.value})
	}
	s.version = v
	s.applied = append(s.applied, txn)
	s.epochs = append(s.epochs, epoch)
	if s.w.cfg.Mode == ModeBase {
		s.flushed = v // synchronous_commit=on: durable at commit
	}
}

// flush is the database's WAL writer catching up (mw mode).
func (s *store) flush() { s.flushed = s.version }

// crash keeps the flushed versions: PostgreSQL with synchronous_commit=off
// recovers a consistent image that lacks only the last commits (Tashkent
// §7.1 case 2). It returns how many versions were lost.
func (s *store) crash() int {
	lost := int(s.version - s.flushed)
	for k, h := range s.history {
		n := len(h)
		for n > 0 && h[n-1].version > s.flushed {
			n--
		}
		s.history[k] = h[:n:n]
	}
	s.version = s.flushed
	s.applied = s.applied[:s.flushed:s.flushed]
	s.epochs = s.epochs[:s.flushed:s.flushed]
	return lost
}

// rewind undoes the versions above k, as the agent's rewind does from a
// pinned snapshot (replica.Rewinder), and makes the result durable (the
// rewind commits synchronously). keepRows leaves each key's last value
// written above k in place, visible from k on: the failed versions'
// rows stay (MutationKeepFailedVersion).
func (s *store) rewind(k uint64, keepRows bool) {
	for key, h := range s.history {
		n := len(h)
		for n > 0 && h[n-1].version > k {
			n--
		}
		kept := h[:n:n]
		if keepRows && n < len(h) {
			kept = append(kept, versioned{version: k, value: h[len(h)-1].value})
		}
		s.history[key] = kept
	}
	s.version, s.flushed = k, k
	s.applied = s.applied[:k:k]
	s.epochs = s.epochs[:k:k]
}

// epochAt is the epoch of the version v the store holds (0: none).
func (s *store) epochAt(v uint64) uint64 {
	if v == 0 || v > s.version {
		return 0
	}
	return s.epochs[v-1]
}

// recordRuns inserts the runs that delivered entries start, before the
// entries go to the order (internal/agent/history.go, recordRuns). The
// insert commits with synchronous_commit=on, and PostgreSQL's flush of its
// commit record flushes every commit before it as well.
func (s *store) recordRuns(started []*pb.EpochRun) {
	for _, run := range started {
		if n := len(s.runs); n > 0 && (run.FirstVersion <= s.runs[n-1].FirstVersion || run.Epoch <= s.runs[n-1].Epoch) {
			s.w.violate("replica %d recorded the run of epoch %d from version %d after the run of epoch %d from version %d (not in version order)",
				s.replica, run.Epoch, run.FirstVersion, s.runs[n-1].Epoch, s.runs[n-1].FirstVersion)
		}
		s.runs = append(s.runs, run)
	}
	s.flushed = s.version
}

// trimRuns deletes the runs above keep, as the agent does at every start
// (loadHistory): they were recorded for versions the database does not
// hold, which the log may since hold in another epoch.
func (s *store) trimRuns(keep uint64) {
	n := len(s.runs)
	for n > 0 && s.runs[n-1].FirstVersion > keep {
		n--
	}
	s.runs = s.runs[:n:n]
}

// lineageOr is the store's lineage, or current if it holds no version.
func (s *store) lineageOr(current int) int {
	if s.version == 0 {
		return current
	}
	return s.lineage
}

// checksum is a hash of the latest value of every key, for convergence.
func (s *store) checksum() uint64 {
	h := uint64(fnvOffset)
	for k := range s.history {
		h = (h ^ uint64(s.read(k, s.version))) * fnvPrime
	}
	return h
}
