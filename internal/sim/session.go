package sim

import (
	"encoding/binary"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/order"
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
	// awaitingDurable: mode ed, a safe transaction waits for durability:
	// a writing one committed (visible) at version, a read-only one for
	// the bound version (ed.go).
	awaitingDurable
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
	local   *order.Local
	reqID   uint64
	version uint64 // the commit version, once certified
	// decidedIn is the lineage of the certifier that decided it.
	decidedIn int
}

// thinkTicksMax is the pause between a client's transactions.
const thinkTicksMax = 6

func (s *session) admitted() bool {
	r := s.r
	return r.up && r.dbUp && !r.recovering && !r.halted && !r.w.healing
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

// begin labels the transaction with the database's version (A1, A2). The
// snapshot is taken later, at the first statement, as PostgreSQL's
// REPEATABLE READ does: the label is never newer than the snapshot.
func (s *session) begin() {
	r, w := s.r, s.r.w
	s.txn = w.hist.begin(r.nextTxnID(), r.id, r.db.version)
	s.phase, s.started = active, false
	s.opsLeft = int(w.between(1, int64(w.cfg.OpsPerTxnMax)))
	s.writer = w.rng.IntN(100) >= w.cfg.ReadOnlyPercent
	if w.cfg.Mode == ModeED {
		s.txn.fast = w.rng.IntN(100) < w.cfg.FastPercent
	}
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
		s.txn.snapshot, s.started = r.db.version, true
		s.txn.snapshotEpoch = r.db.epochAt(r.db.version)
		s.txn.lineage = r.db.lineageOr(w.lineage())
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

// commit is C1–C3: a read-only transaction commits locally (in mode ed,
// a safe one once the replica's version at COMMIT is durable, ED
// Postgres §3.8); an update transaction registers with the order and asks
// the certifier.
func (s *session) commit() {
	r, w := s.r, s.r.w
	if len(s.txn.writes) == 0 {
		if s.waitsForDurability() && r.db.version > r.durableHeard {
			s.phase, s.version = awaitingDurable, r.db.version
			return
		}
		w.hist.end(s.txn, readOnly)
		s.finish()
		return
	}
	req := s.request()
	s.local = r.ord.Register(s.txn.id.Seq)
	s.phase = certifying
	s.reqID = r.client.certify(req, s)
	gen, inc := s.gen, r.incarnation
	w.after(w.cfg.CertifyTimeoutTicks, "certify-timeout", func() {
		if s.gen == gen && r.incarnation == inc && s.phase == certifying {
			s.timeout()
		}
	})
}

// request is the transaction's certification request, its writeset
// encoded as the extension sends it: an upsert of each row it wrote (the
// value in the row) and a reference to each foreign-key parent it read
// and did not write.
func (s *session) request() *pb.CertifyRequestEncoded {
	mutation := s.r.w.cfg.Mutation
	ws := &pb.Writeset{Changes: make([]*pb.Change, 0, len(s.txn.writes)+len(s.txn.references))}
	for _, wr := range s.txn.writes {
		ws.Changes = append(ws.Changes, &pb.Change{Table: kvTable, Op: pb.Op_OP_UPSERT, Key: keyBytes(wr.key),
			Row: binary.AppendVarint(nil, wr.value), KeepsRow: wr.keeps || mutation == MutationAllWritesKeeping})
	}
	if mutation != MutationIgnoreReferences {
		for _, key := range s.txn.referencedOnly() {
			ws.Changes = append(ws.Changes, &pb.Change{Table: kvTable, Op: pb.Op_OP_REFERENCE, Key: keyBytes(key)})
		}
	}
	b, err := proto.Marshal(ws)
	if err != nil {
		panic("sim: encode a writeset: " + err.Error())
	}
	id := s.txn.id
	return &pb.CertifyRequestEncoded{Txn: &pb.TxnID{Origin: id.Origin, Seq: id.Seq}, StartVersion: s.txn.label, Writeset: b}
}

// timeout is the certify timeout: the outcome is unknown to the client; if
// the transaction committed, its version is applied as a remote one.
func (s *session) timeout() {
	s.r.client.forget(s.reqID)
	s.r.ord.Abandon(s.local)
	s.r.w.hist.end(s.txn, unknown)
	s.finish()
}

// onReply handles the answer to the session's request that a certifier
// of lineage sent.
func (s *session) onReply(rep *pb.CertifyReply, lineage int) {
	r, w := s.r, s.r.w
	if s.phase != certifying || txnOf(rep.Txn) != s.txn.id {
		w.violate("replica %d session %d got a reply for %v in phase %d", r.id, s.id, txnOf(rep.Txn), s.phase)
		return
	}
	if rep.Decision != pb.Decision_DECISION_COMMIT {
		s.txn.abortedIn = lineage
		r.ord.Abandon(s.local)
		w.hist.end(s.txn, aborted)
		s.finish()
		return
	}
	if s.local.Version() != rep.CommitVersion {
		// The certifier delivers a version before the reply that depends
		// on it, so this is a bug. The version falls back to being applied
		// as a remote one, as the agent does (internal/agent/certify.go).
		w.violate("replica %d: %v certified at version %d but version %d was delivered to it (the reply came before its entry)",
			r.id, s.txn.id, rep.CommitVersion, s.local.Version())
		r.ord.Abandon(s.local)
		w.hist.end(s.txn, unknown)
		s.finish()
		return
	}
	s.phase, s.version, s.decidedIn = waitingTurn, rep.CommitVersion, lineage
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
	case awaitingDurable:
		if len(s.txn.writes) > 0 {
			s.r.w.hist.end(s.txn, unknown) // committed at its commit point, not durable yet
			break
		}
		s.txn.abortedIn = anyLineage // a read-only transaction ended before COMMIT returned
		s.r.w.hist.end(s.txn, aborted)
	default: // its COMMIT was never sent
		s.txn.abortedIn = anyLineage
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

// kvTable is the one table the simulated database has.
const kvTable = "kv"

// keyBytes is a key's encoded primary key: one byte.
func keyBytes(key int) []byte { return keyBytesOf[key : key+1 : key+1] }

var keyBytesOf = func() []byte {
	b := make([]byte, keysMax)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// writesOf reads the rows a logged writeset wrote (its upserts), as the
// applier applies them.
func writesOf(ws *pb.Writeset) []write {
	var writes []write
	for _, c := range ws.GetChanges() {
		if c.Op != pb.Op_OP_UPSERT {
			continue
		}
		value, _ := binary.Varint(c.Row)
		writes = append(writes, write{key: int(c.Key[0]), value: value, keeps: c.KeepsRow})
	}
	return writes
}

// keysMax bounds Config.Keys (the keys are one byte).
const keysMax = 256
