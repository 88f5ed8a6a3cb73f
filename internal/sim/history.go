package sim

import (
	"slices"

	"github.com/tashkent-db/tashkent/internal/certification"
)

// status is what the client was told about a transaction.
type status int

const (
	running  status = iota
	readOnly        // committed locally, never certified
	acked           // the client got COMMIT
	aborted         // the client got 40001 (or its session died before COMMIT)
	unknown         // the client does not know: certify timeout, crash while committing
	failed          // mode ed: a safe commit whose version failed (FATAL TK006: nothing of it remains)
)

// txnRecord is everything a client saw of one transaction: the ledger the
// checkers compare with the durable logs.
type txnRecord struct {
	id       certification.TxnID
	replica  int
	label    uint64 // start_version sent to the certifier
	snapshot uint64 // the version its reads saw; label <= snapshot
	reads    []observation
	writes   []write // the last value per key, in first-write order
	// references are the keys the transaction read as parents of a
	// foreign key (its writes depend on them still being as it read them),
	// in first-read order, sent as certification references.
	references []int
	status     status
	version    uint64 // the acknowledged commit version
	// lineage is the certifier lineage (lineage.go) whose log holds its
	// snapshot, and its version once acknowledged.
	lineage int
	// abortedIn is the lineage whose certifier sent its abort (the
	// message carries the sender's lineage, so an answer that arrives
	// after a re-creation names the older one), or anyLineage when its
	// session closed before COMMIT was sent: no log may hold it. For a
	// failed one, the lineage whose refusal reported the failure.
	abortedIn int
	// fast: mode ed, synchronous_commit off (acknowledged at the commit
	// point); otherwise safe.
	fast bool
	// epoch is the epoch of its commit's log entry, once committed.
	epoch uint64
	// snapshotEpoch is the epoch the replica held its snapshot's version
	// in (0 for snapshot 0): in mode ed, a snapshot whose version is not
	// the log's held failed versions.
	snapshotEpoch uint64
	// toldFailed: mode ed, a fast commit its replica was told failed
	// (WARNING TK006) after it was acknowledged.
	toldFailed bool
}

// anyLineage is txnRecord.abortedIn for a transaction no certifier
// answered: it is searched for in every lineage's log.
const anyLineage = -1

// referencedOnly is the keys the transaction referenced and did not
// write: a write of the key conflicts with all a reference would, so the
// extension's collapse leaves those out too (extension/src/writeset.c).
func (t *txnRecord) referencedOnly() []int {
	var out []int
	for _, key := range t.references {
		if !slices.ContainsFunc(t.writes, func(wr write) bool { return wr.key == key }) {
			out = append(out, key)
		}
	}
	return out
}

// observation is one read: the value the transaction saw, and whether it
// was its own write.
type observation struct {
	key   int
	value int64
	own   bool
}

// writeInfo says who wrote a value and whether the value was the writer's
// last for its key (an intermediate value must never be read by others).
type writeInfo struct {
	txn   *txnRecord
	final bool
}

type history struct {
	w         *world
	txns      []*txnRecord
	byID      map[certification.TxnID]*txnRecord
	values    map[int64]*writeInfo
	lastValue int64
	ackedAt   map[ackedVersion]*txnRecord // the transaction acknowledged with each version
}

// ackedVersion is a version acknowledged in a lineage; in mode ed, where
// a version that failed is decided again, in an epoch.
type ackedVersion struct {
	lineage int
	version uint64
	epoch   uint64
}

func newHistory(w *world) *history {
	return &history{
		w: w, byID: make(map[certification.TxnID]*txnRecord),
		values: make(map[int64]*writeInfo), ackedAt: make(map[ackedVersion]*txnRecord),
	}
}

func (h *history) begin(id certification.TxnID, replica int, label uint64) *txnRecord {
	t := &txnRecord{id: id, replica: replica, label: label}
	h.txns = append(h.txns, t)
	h.byID[id] = t
	h.w.stats.Transactions++
	return t
}

// newValue returns a value never written before, so that a read names its
// writer.
func (h *history) newValue(t *txnRecord, key int, keeps bool) int64 {
	h.lastValue++
	for i, wr := range t.writes {
		if wr.key == key {
			h.values[wr.value].final = false
			t.writes[i].value = h.lastValue
			t.writes[i].keeps = wr.keeps && keeps // kept only if every write kept it
			h.values[h.lastValue] = &writeInfo{txn: t, final: true}
			return h.lastValue
		}
	}
	t.writes = append(t.writes, write{key: key, value: h.lastValue, keeps: keeps})
	h.values[h.lastValue] = &writeInfo{txn: t, final: true}
	return h.lastValue
}

// ack records a COMMIT answered to the client, at version v of lineage.
func (h *history) ack(t *txnRecord, v uint64, lineage int) {
	if t.status == acked && t.version != v {
		h.w.violate("transaction %v acknowledged twice, at versions %d and %d", t.id, t.version, v)
	}
	at := ackedVersion{lineage: lineage, version: v}
	if h.w.cfg.Mode == ModeED {
		at.epoch = t.epoch
	}
	if other := h.ackedAt[at]; other != nil && other != t {
		h.w.violate("version %d acknowledged to two transactions: %v and %v", v, other.id, t.id)
	}
	h.ackedAt[at] = t
	t.status, t.version, t.lineage = acked, v, lineage
	h.w.stats.Committed++
	h.w.note("ack", t.id.Seq, v, uint64(t.replica))
}

func (h *history) end(t *txnRecord, s status) {
	t.status = s
	switch s {
	case aborted:
		h.w.stats.Aborted++
	case unknown:
		h.w.stats.Unknown++
	case readOnly:
		h.w.stats.ReadOnly++
	case failed:
		h.w.stats.SafeFailed++
	}
	h.w.note("txn-end", t.id.Seq, uint64(s), uint64(t.replica))
}
