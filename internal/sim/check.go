package sim

import (
	"math"
	"sort"

	"github.com/tashkent-db/tashkent/internal/certification"
)

// check runs the checkers over the final state: the certifier's durable
// log is the truth every other observation is compared with; each
// transaction is judged against the log of its lineage (lineage.go), and
// convergence against the current one.
func (w *world) check() {
	logs := make([][]logged, w.lineage()+1)
	committedAt := make([]map[certification.TxnID]uint64, len(logs))
	for l := range logs {
		logs[l] = w.durableLog(w.logOf(l))
		committedAt[l] = w.checkLog(logs[l])
		w.checkNoLostUpdate(logs[l])
		w.checkReferences(logs[l])
	}
	w.checkAcknowledged(logs)
	w.checkAbortedStayAborted(committedAt)
	w.checkFailedStayFailed(logs, committedAt)
	w.checkFailedSnapshots(logs, committedAt)
	w.checkConvergence(logs[w.lineage()])
	w.checkReads(logs, committedAt)
	w.checkObservedPrefixes(logs, committedAt)
}

// logged is one entry of the certifier's durable log, decoded.
type logged struct {
	version uint64
	txn     certification.TxnID
	epoch   uint64
	writes  []write
}

// durableLog decodes the durable log on d.
func (w *world) durableLog(d *disk) []logged {
	entries := d.entries[:d.synced]
	log := make([]logged, len(entries))
	for i, e := range entries {
		le, err := e.Decode()
		if err != nil {
			w.violate("log position %d cannot be decoded: %v", i+1, err)
			continue
		}
		log[i] = logged{version: le.Version, txn: txnOf(le.Txn), epoch: le.Epoch, writes: writesOf(le.Writeset)}
	}
	return log
}

// replay is the state the log's replay builds.
func (w *world) replay(log []logged) *store {
	truth := newStore(&world{cfg: w.cfg}, -1)
	for _, e := range log {
		truth.commit(e.version, e.txn, e.epoch, e.writes)
	}
	return truth
}

// checkLog: every version appears once, in order, and no transaction got
// two versions (a retry of a logged request must get the first one back).
func (w *world) checkLog(log []logged) map[certification.TxnID]uint64 {
	committedAt := make(map[certification.TxnID]uint64, len(log))
	for i, e := range log {
		if e.version != uint64(i+1) {
			w.violate("log position %d holds version %d", i+1, e.version)
		}
		if v, dup := committedAt[e.txn]; dup {
			w.violate("transaction %v committed twice, at versions %d and %d (a retry got a second version)", e.txn, v, e.version)
			continue
		}
		committedAt[e.txn] = e.version
	}
	return committedAt
}

// checkAcknowledged: no acknowledged commit is lost; it is in the log of
// its lineage at the version the client was told. In mode ed this holds
// for safe commits, which are acknowledged once durable; a fast one is
// acknowledged at its commit point and may fail afterwards (Kashi
// §2.2.1): it is in the log, or a certifier crash failed its version.
func (w *world) checkAcknowledged(logs [][]logged) {
	for _, t := range w.hist.txns {
		if t.status != acked {
			continue
		}
		log := logs[t.lineage]
		inLog := t.version != 0 && t.version <= uint64(len(log)) && log[t.version-1].txn == t.id
		if !inLog && w.cfg.Mode == ModeED && t.fast && w.versionFailed(t.lineage, t.version, t.epoch) {
			w.stats.FastFailed++
			continue
		}
		if !inLog {
			w.violate("acknowledged commit lost: %v was acknowledged at version %d, which the durable log of lineage %d (length %d) does not hold for it",
				t.id, t.version, t.lineage, len(log))
		}
	}
}

// checkAbortedStayAborted: a transaction whose client was told it aborted
// (40001) must not be in the log of the lineage whose certifier answered
// it, nor, if its COMMIT was never sent, in any log. The client retries
// such a transaction, so a commit would execute its work twice.
func (w *world) checkAbortedStayAborted(committedAt []map[certification.TxnID]uint64) {
	for _, t := range w.hist.txns {
		if t.status != aborted {
			continue
		}
		for l, at := range committedAt {
			if v := at[t.id]; v != 0 && (t.abortedIn == l || t.abortedIn == anyLineage) {
				w.violate("%v was answered as aborted but committed at version %d of lineage %d", t.id, v, l)
			}
		}
	}
}

// checkFailedStayFailed (mode ed): the failure report ('X' common
// version, epoch, from the certifier that refused the replica) names only
// versions that failed: a safe transaction told that its version failed
// (TK006: nothing of it remains, safe to retry) is not in the log of the
// lineage that told it, and a fast commit told so after its
// acknowledgement is not in the log of its lineage. (Across a re-created
// certifier, a version durable in the older lineage is reported failed
// too: that log is gone.)
func (w *world) checkFailedStayFailed(logs [][]logged, committedAt []map[certification.TxnID]uint64) {
	for _, t := range w.hist.txns {
		switch {
		case t.status == failed:
			if v := committedAt[t.abortedIn][t.id]; v != 0 {
				w.violate("%v was told its version failed (TK006) but committed at version %d of lineage %d", t.id, v, t.abortedIn)
			}
		case t.toldFailed && committedAt[t.lineage][t.id] == t.version:
			w.violate("%v, a fast commit, was told its version %d (epoch %d) failed, but the log of lineage %d holds it there", t.id, t.version, t.epoch, t.lineage)
		}
	}
}

// snapshotHeldFailed is true when, in mode ed, the version t's snapshot
// was taken at is not the log's: its replica held versions that failed
// (by log matching, an epoch at a version names one prefix).
func (w *world) snapshotHeldFailed(t *txnRecord, logs [][]logged) bool {
	if w.cfg.Mode != ModeED || t.snapshot == 0 {
		return false
	}
	log := logs[t.lineage]
	return t.snapshot > uint64(len(log)) || log[t.snapshot-1].epoch != t.snapshotEpoch
}

// checkFailedSnapshots (mode ed): a transaction whose snapshot held
// failed versions may have read them (a fast read-only one may, §2.2.1
// property 5a), but it must not commit: its version comes after the
// failed ones, so it fails with them (durability is a prefix); and a safe
// read-only one must not be acknowledged (property 5b, §2.2.3). Their
// reads are not compared with the log (checkReads leaves them out).
func (w *world) checkFailedSnapshots(logs [][]logged, committedAt []map[certification.TxnID]uint64) {
	for _, t := range w.hist.txns {
		if !w.snapshotHeldFailed(t, logs) {
			continue
		}
		if v := committedAt[t.lineage][t.id]; v != 0 {
			w.violate("%v committed at version %d from snapshot %d (epoch %d), which held versions that failed", t.id, v, t.snapshot, t.snapshotEpoch)
		}
		if t.status == readOnly && !t.fast {
			w.violate("a safe read-only transaction was acknowledged although its snapshot held versions that failed: %v at snapshot %d (epoch %d)",
				t.id, t.snapshot, t.snapshotEpoch)
		}
	}
}

// checkConvergence: after healing, every replica holds every version, in
// the log's order (so replicas agree on the order: no long fork), with the
// log's epochs in its history, and the same state as the log's replay.
func (w *world) checkConvergence(log []logged) {
	if !w.converged {
		w.violate("the cluster did not converge within %d ticks of healing: %s", w.cfg.HealTicksMax, w.convergenceState())
	}
	truth := w.replay(log)
	for _, r := range w.replicas {
		db := r.db
		if w.converged && db.version != uint64(len(log)) {
			w.violate("replica %d is at version %d, the log at %d", r.id, db.version, len(log))
		}
		for i, txn := range db.applied {
			if i >= len(log) || log[i].txn != txn || log[i].epoch != db.epochs[i] {
				w.violate("replica %d committed %v (epoch %d) at version %d, where the log has another transaction (or none)", r.id, txn, db.epochs[i], i+1)
				break
			}
		}
		for v := uint64(1); v <= db.version && v <= uint64(len(log)); v++ {
			if e := epochInRuns(db.runs, v); e != log[v-1].epoch {
				w.violate("replica %d's history gives version %d epoch %d, the log %d", r.id, v, e, log[v-1].epoch)
				break
			}
		}
		if db.version == truth.version && db.checksum() != truth.checksum() {
			w.violate("replica %d's state differs from the log's replay at version %d", r.id, db.version)
		}
	}
}

func (w *world) convergenceState() string {
	s := ""
	for _, r := range w.replicas {
		s += " " + r.describe()
	}
	c := w.cert
	return s + " | certifier up=" + boolStr(c.up) + " durable=" + uitoa(c.disk.durable()) +
		" pending=" + uitoa(uint64(len(c.pending))) + " writing=" + boolStr(c.writing)
}

// checkNoLostUpdate: no two committed transactions with overlapping
// writesets have overlapping [snapshot, commit] intervals: the writer
// before each committed write of a key must be at or below the writer's
// snapshot (first committer wins, Tashkent §2).
func (w *world) checkNoLostUpdate(log []logged) {
	lastWriter := make([]uint64, w.cfg.Keys)
	for _, e := range log {
		t := w.hist.byID[e.txn]
		if t == nil {
			w.violate("version %d belongs to %v, which no client ran", e.version, e.txn)
			continue
		}
		if t.label > t.snapshot {
			w.violate("%v was labelled with version %d, newer than its snapshot %d", t.id, t.label, t.snapshot)
		}
		for _, wr := range e.writes {
			if prev := lastWriter[wr.key]; prev > t.snapshot {
				w.violate("lost update: %v (snapshot %d, committed at %d) overwrote key %d, written at version %d after its snapshot",
					t.id, t.snapshot, e.version, wr.key, prev)
			}
			lastWriter[wr.key] = e.version
		}
	}
}

// checkReferences: a committed transaction's foreign-key parents were not
// written (other than by a keeping update) between its snapshot and its
// commit, and no committed plain write of a key came from a snapshot older
// than a reference to it committed before the write: in both orders, a
// parent deleted concurrently with the insert of a child would leave an
// orphan (internal/certification, "Foreign-key references"). A keeping
// update leaves the parent in place, so it may race a reference.
func (w *world) checkReferences(log []logged) {
	lastWriter := make([]uint64, w.cfg.Keys) // the last plain write
	lastReferencer := make([]uint64, w.cfg.Keys)
	for _, e := range log {
		t := w.hist.byID[e.txn]
		if t == nil {
			continue // checkNoLostUpdate reports it
		}
		refs := t.referencedOnly()
		for _, key := range refs {
			if prev := lastWriter[key]; prev > t.snapshot {
				w.violate("referenced row changed: %v (snapshot %d, committed at %d) referenced key %d, written at version %d after its snapshot",
					t.id, t.snapshot, e.version, key, prev)
			}
		}
		for _, wr := range t.writes { // what it did, not what it certified
			if wr.keeps {
				continue
			}
			if prev := lastReferencer[wr.key]; prev > t.snapshot {
				w.violate("referenced row changed: %v (snapshot %d, committed at %d) wrote key %d, referenced at version %d after its snapshot",
					t.id, t.snapshot, e.version, wr.key, prev)
			}
		}
		for _, key := range refs {
			lastReferencer[key] = e.version
		}
		for _, wr := range t.writes {
			if !wr.keeps {
				lastWriter[wr.key] = e.version
			}
		}
	}
}

// checkReads: every read, of every transaction (committed, aborted or
// read-only, on any replica), saw exactly what the log's prefix up to its
// snapshot holds. That excludes aborted reads (G1a), intermediate reads
// (G1b), reads of versions above the snapshot, stale reads within a
// snapshot, and long fork: every snapshot is a prefix of the one order.
func (w *world) checkReads(logs [][]logged, committedAt []map[certification.TxnID]uint64) {
	truths := make([]*store, len(logs))
	for l, log := range logs {
		truths[l] = w.replay(log)
	}
	for _, t := range w.hist.txns {
		if w.snapshotHeldFailed(t, logs) {
			continue
		}
		for _, o := range t.reads {
			if o.own {
				continue
			}
			if want := truths[t.lineage].read(o.key, t.snapshot); o.value != want {
				w.violate("%v read key %d = %d at snapshot %d, but the log's prefix holds %d: %s",
					t.id, o.key, o.value, t.snapshot, want, w.classifyRead(o, t, committedAt[t.lineage]))
			}
		}
	}
}

func (w *world) classifyRead(o observation, t *txnRecord, committedAt map[certification.TxnID]uint64) string {
	info := w.hist.values[o.value]
	switch {
	case info == nil:
		return "a stale read of the initial value"
	case !info.final:
		return "G1b, an intermediate value of " + txnStr(info.txn.id)
	case committedAt[info.txn.id] == 0:
		return "G1a, a value of " + txnStr(info.txn.id) + ", which never committed"
	case committedAt[info.txn.id] > t.snapshot:
		return "a read of version " + uitoa(committedAt[info.txn.id]) + ", above the snapshot"
	default:
		return "a stale read of version " + uitoa(committedAt[info.txn.id])
	}
}

// checkObservedPrefixes checks long fork from the reads alone, without
// trusting the snapshots the simulation recorded: the values a transaction
// read must all be explained by one prefix of the log. Each read of key k
// that saw the write of version v says the prefix ends in [v, next write of
// k after v); the intersection must not be empty. Two read-only
// transactions on different replicas that saw two writes in opposite orders
// (a long fork) cannot both pass, as the log has one order.
func (w *world) checkObservedPrefixes(logs [][]logged, committedAts []map[certification.TxnID]uint64) {
	writersOf := make([][][]uint64, len(logs))
	for l, log := range logs {
		writers := make([][]uint64, w.cfg.Keys) // per key, the versions that wrote it
		for _, e := range log {
			for _, wr := range e.writes {
				writers[wr.key] = append(writers[wr.key], e.version)
			}
		}
		writersOf[l] = writers
	}
	for _, t := range w.hist.txns {
		if w.snapshotHeldFailed(t, logs) {
			continue
		}
		writers, committedAt := writersOf[t.lineage], committedAts[t.lineage]
		lo, hi := uint64(0), uint64(math.MaxUint64)
		for _, o := range t.reads {
			if o.own {
				continue
			}
			seen := uint64(0) // the initial value
			if info := w.hist.values[o.value]; info != nil {
				if seen = committedAt[info.txn.id]; seen == 0 {
					continue // an aborted read: checkReads reports it
				}
			}
			vs := writers[o.key]
			i := sort.Search(len(vs), func(i int) bool { return vs[i] > seen })
			lo = max(lo, seen)
			if i < len(vs) {
				hi = min(hi, vs[i]-1)
			}
		}
		if lo > hi {
			w.violate("long fork: %v's reads fit no prefix of the log (one read needs version %d, another excludes every version above %d)",
				t.id, lo, hi)
		}
	}
}
