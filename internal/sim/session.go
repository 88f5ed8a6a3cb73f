package sim

import (
	"slices"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/sequencer"
)

// phase is where a session's transaction is.
type phase int

const (
	idle          phase = iota
	active              // running statements
	certifying          // COMMIT sent to the certifier (C2, C3)
	waitingTurn         // certified, waiting for the versions below it (C4)
	committing          // its commit is in flight in the store (C5)
	awaitingApply       // the store refused its commit; the applier applies it
)

// session is one client connection and the model's commit path for its
// transactions: labelled at BEGIN, certified at COMMIT, committed in their
// turn. A client runs one transaction after another.
type session struct {
	r     *replica
	id    int
	phase phase
	gen   uint64 // incremented when a transaction ends: voids its timers

	txn     *txnRecord
	opsLeft int
	writer  bool // the transaction may write
	started bool // the snapshot is taken
	local   *sequencer.Local
	reqID   uint64
	version uint64 // the commit version, once certified
}

// thinkTicksMax is the pause between a client's transactions.
const thinkTicksMax = 6

func (s *session) admitted() bool {
	r := s.r
	return r.up && r.dbUp && !r.recovering && !r.w.healing
}

// scheduleNext starts a new transaction after a pause, if the replica
// admits clients then.
func (s *session) scheduleNext() {
	gen, inc := s.gen, s.r.incarnation
	s.r.w.after(s.r.w.between(1, thinkTicksMax), "client", func() {
		if s.gen == gen && s.r.incarnation == inc && s.phase == idle && s.admitted() {
			s.begin()
		}
	})
}

// begin labels the transaction with the replica's version (A1, A2). The
// snapshot is taken later, at the first statement, as PostgreSQL's
// REPEATABLE READ does: the label is never newer than the snapshot.
func (s *session) begin() {
	r, w := s.r, s.r.w
	s.txn = w.hist.begin(r.nextTxnID(), r.id, r.seq.Committed())
	s.phase, s.started = active, false
	s.opsLeft = int(w.between(1, int64(w.cfg.OpsPerTxnMax)))
	s.writer = w.rng.IntN(100) >= w.cfg.ReadOnlyPercent
	s.scheduleStatement()
}

func (s *session) scheduleStatement() {
	gen, inc := s.gen, s.r.incarnation
	s.r.w.after(s.r.w.between(1, 2), "statement", func() {
		if s.gen != gen || s.r.incarnation != inc || s.phase != active {
			return
		}
		s.statement()
	})
}

// statement reads or writes one key on the snapshot (B1).
func (s *session) statement() {
	r, w := s.r, s.r.w
	if !s.started {
		s.txn.snapshot, s.started = r.seq.Committed(), true
	}
	key := w.rng.IntN(w.cfg.Keys)
	if s.writer && w.rng.IntN(2) == 0 {
		w.hist.newValue(s.txn, key, w.rng.IntN(100) < w.cfg.KeepingPercent)
	} else {
		s.txn.reads = append(s.txn.reads, s.read(key))
		if s.writer && w.rng.IntN(100) < w.cfg.ReferencePercent && !slices.Contains(s.txn.references, key) {
			// The read is of a parent row the transaction's writes point
			// to (a foreign-key check): certified as a reference.
			s.txn.references = append(s.txn.references, key)
		}
	}
	s.opsLeft--
	if s.opsLeft > 0 {
		s.scheduleStatement()
		return
	}
	s.commit()
}

func (s *session) read(key int) observation {
	for _, wr := range s.txn.writes {
		if wr.key == key {
			return observation{key: key, value: wr.value, own: true}
		}
	}
	snapshot := s.txn.snapshot
	if s.r.w.cfg.Mutation == MutationReadAboveSnapshot {
		snapshot++
	}
	return observation{key: key, value: s.r.db.read(key, snapshot)}
}

// commit is C1–C3: a read-only transaction commits locally; an update
// transaction registers with the sequencer and asks the certifier.
func (s *session) commit() {
	r, w := s.r, s.r.w
	if len(s.txn.writes) == 0 {
		w.hist.end(s.txn, readOnly)
		s.finish()
		return
	}
	req := request{txn: s.txn.id, startVersion: s.txn.label, writes: slices.Clone(s.txn.writes)}
	for _, wr := range req.writes {
		if wr.keeps || w.cfg.Mutation == MutationAllWritesKeeping {
			req.keys = append(req.keys, keepingKeyOf(wr.key))
		} else {
			req.keys = append(req.keys, keyOf(wr.key))
		}
	}
	if w.cfg.Mutation != MutationIgnoreReferences {
		for _, key := range s.txn.referencedOnly() {
			req.keys = append(req.keys, referenceKeyOf(key))
		}
	}
	s.local = r.seq.Register(s.txn.id.Seq)
	s.phase = certifying
	s.reqID = r.client.certify(req, s)
	gen, inc := s.gen, r.incarnation
	w.after(w.cfg.CertifyTimeoutTicks, "certify-timeout", func() {
		if s.gen == gen && r.incarnation == inc && s.phase == certifying {
			s.timeout()
		}
	})
}

// timeout is the certify timeout: the outcome is unknown to the client; if
// the transaction committed, its version is applied as a remote one.
func (s *session) timeout() {
	s.r.client.forget(s.reqID)
	s.r.seq.Abandon(s.local)
	s.r.w.hist.end(s.txn, unknown)
	s.finish()
}

// onReply handles the certifier's answer to the session's request.
func (s *session) onReply(rep reply) {
	r, w := s.r, s.r.w
	if s.phase != certifying || rep.txn != s.txn.id {
		w.violate("replica %d session %d got a reply for %v in phase %d", r.id, s.id, rep.txn, s.phase)
		return
	}
	if !rep.commit {
		r.seq.Abandon(s.local)
		w.hist.end(s.txn, aborted)
		s.finish()
		return
	}
	if s.local.Version() != rep.commitVersion {
		// The certifier delivers a version before the reply that depends
		// on it, so this is a bug. The version falls back to being applied
		// as a remote one, as the agent does (internal/agent/certify.go).
		w.violate("replica %d: %v certified at version %d but version %d was delivered to it (the reply came before its entry)",
			r.id, s.txn.id, rep.commitVersion, s.local.Version())
		r.seq.Abandon(s.local)
		w.hist.end(s.txn, unknown)
		s.finish()
		return
	}
	s.phase, s.version = waitingTurn, rep.commitVersion
	r.progress()
}

// lost is the session's connection closing under it (crash, recovery).
func (s *session) lost() {
	switch s.phase {
	case idle:
		return
	case certifying:
		if s.r.client != nil {
			s.r.client.forget(s.reqID)
		}
		s.r.w.hist.end(s.txn, unknown)
	case waitingTurn, committing, awaitingApply:
		s.r.w.hist.end(s.txn, unknown) // certified, not acknowledged
	default:
		s.r.w.hist.end(s.txn, aborted)
	}
	s.phase = idle
	s.gen++
	s.txn, s.local, s.version = nil, nil, 0
}

func (s *session) finish() {
	s.phase = idle
	s.gen++
	s.txn, s.local, s.version = nil, nil, 0
	if s.admitted() {
		s.scheduleNext()
	}
}

// keyOf is a key's certification key: one row of one table.
func keyOf(key int) certification.Key { return rowKeys[key] }

// referenceKeyOf is a key's certification key as a foreign-key parent.
func referenceKeyOf(key int) certification.Key { return referenceKeys[key] }

// keepingKeyOf is a key's certification key for a keeping update.
func keepingKeyOf(key int) certification.Key { return keepingKeys[key] }

// rowKeys, referenceKeys and keepingKeys are computed once: hashing is
// the costliest part of a request.
var rowKeys, referenceKeys, keepingKeys = func() ([]certification.Key, []certification.Key, []certification.Key) {
	keys, refs, keeps := make([]certification.Key, keysMax), make([]certification.Key, keysMax), make([]certification.Key, keysMax)
	for i := range keys {
		keys[i] = certification.RowKey("kv", []byte{byte(i)})
		refs[i] = certification.ReferenceKey("kv", []byte{byte(i)})
		keeps[i] = certification.KeepingRowKey("kv", []byte{byte(i)})
	}
	return keys, refs, keeps
}()

// keysMax bounds Config.Keys (the keys are one byte).
const keysMax = 256
