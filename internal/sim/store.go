package sim

import "github.com/tashkent-db/tashkent/internal/certification"

// store stands in for a replica's PostgreSQL database: a multi-version
// key-value store that commits versions strictly one after another and
// records, with each, which transaction it was (the tashkent.applied row of
// the real replica). Reads at a snapshot see the versions up to it.
type store struct {
	w       *world
	replica int
	history [][]versioned // per key, ascending by version
	version uint64        // every version up to here is committed
	flushed uint64        // mw: versions up to here survive a crash
	applied []certification.TxnID
}

// versioned is one committed value of a key.
type versioned struct {
	version uint64
	value   int64
}

func newStore(w *world, replica int) *store {
	return &store{w: w, replica: replica, history: make([][]versioned, w.cfg.Keys)}
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

// commit installs version v. Versions must come in order, with no gap:
// this is the checker of "every replica applies versions in order".
func (s *store) commit(v uint64, txn certification.TxnID, writes []write) {
	if v != s.version+1 {
		s.w.violate("replica %d committed version %d after version %d (a gap or a repeat)", s.replica, v, s.version)
		return
	}
	for _, wr := range writes {
		s.history[wr.key] = append(s.history[wr.key], versioned{version: v, value: wr.value})
	}
	s.version = v
	s.applied = append(s.applied, txn)
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
	return lost
}

// checksum is a hash of the latest value of every key, for convergence.
func (s *store) checksum() uint64 {
	h := uint64(fnvOffset)
	for k := range s.history {
		h = (h ^ uint64(s.read(k, s.version))) * fnvPrime
	}
	return h
}
