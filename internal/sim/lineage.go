package sim

import (
	"slices"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// A lineage is the certifier's log from the start of a certifier created
// from an empty data directory. Re-creating the certifier (the nemesis's
// recreateCertifier: an operator replacing a certifier whose data was
// lost) starts a new lineage, whose versions reuse the numbers of the
// older ones from 1. Its entries carry generations no older lineage used,
// since a generation is at least the clock (certifier/epochs.go,
// nextGeneration), so a (version, epoch) pair names one entry of one
// lineage. The checkers judge every transaction against the log of the
// lineage it ran in.
type lineages struct {
	retired []disk         // the data directories of the lineages before the current one
	ofEpoch map[uint64]int // the lineage of every generation that certified
}

// lineage is the index of the current lineage.
func (w *world) lineage() int { return len(w.lineages.retired) }

// logOf is the disk of lineage l.
func (w *world) logOf(l int) *disk {
	if l == w.lineage() {
		return &w.cert.disk
	}
	return &w.lineages.retired[l]
}

// noteGeneration records that the current lineage certifies in
// generation g.
func (w *world) noteGeneration(g uint64) {
	if l, ok := w.lineages.ofEpoch[g]; ok && l != w.lineage() {
		w.violate("generation %d was used by lineages %d and %d: their entries cannot be told apart", g, l, w.lineage())
	}
	w.lineages.ofEpoch[g] = w.lineage()
}

// retireLog keeps the current lineage's data directory for the checkers
// and gives the certifier an empty one.
func (w *world) retireLog() {
	w.lineages.retired = append(w.lineages.retired, w.cert.disk)
	w.cert.disk = disk{}
}

// loggedTxn is the transaction lineage l's log holds at version v (ok
// false if it holds none).
func (w *world) loggedTxn(l int, v uint64) (certification.TxnID, bool) {
	d := w.logOf(l)
	if v == 0 || v > d.last() {
		return certification.TxnID{}, false
	}
	h, err := logentry.RawHeaderOf(d.entries[v-1].Bytes)
	if err != nil {
		return certification.TxnID{}, false
	}
	return certification.TxnID{Origin: string(h.Origin), Seq: h.Seq}, true
}

// checkCommit checks a replica's commit of version v (txn, certified in
// epoch) against its history and the log, as it happens:
//   - the run of v is recorded already (a run may precede its version,
//     never follow it);
//   - v is durable in the log of its lineage, with txn and epoch: nothing
//     reaches a replica before it is durable, so no replica applies a
//     failed version. In mode ed entries reach replicas at their commit
//     point: v must be the entry the certifier of epoch wrote (ed.go), and
//     may fail later;
//   - the versions the store holds already are the same lineage's: every
//     replica holds the log's transaction at every version it holds. A
//     store that holds another lineage's versions at the same numbers
//     must never be caught up from this one (certifier.Admit refuses it).
//     In mode ed, where a store may hold versions that failed, the first
//     version of each new epoch it commits must come on top of the log's
//     versions, in their epochs: a replica never applies a later epoch's
//     version on top of a failed one (it rewinds first).
func (s *store) checkCommit(v uint64, txn certification.TxnID, epoch uint64) {
	w := s.w
	if recorded := epochInRuns(s.runs, v); recorded != epoch {
		w.violate("replica %d committed version %d of epoch %d, but its history gives that version epoch %d (a run recorded after its version)",
			s.replica, v, epoch, recorded)
	}
	l, ok := w.lineages.ofEpoch[epoch]
	if !ok {
		w.violate("replica %d committed version %d of epoch %d, which no certifier used", s.replica, v, epoch)
		return
	}
	d := w.logOf(l)
	ed := w.cfg.Mode == ModeED
	if ed {
		if decided, ok := w.decided[epochVersion{epoch, v}]; !ok || decided != txn {
			w.violate("replica %d committed version %d (%v, epoch %d), which the certifier of that epoch never delivered (it decided %v there)",
				s.replica, v, txn, epoch, decided)
		}
	} else if logged, ok := w.loggedTxn(l, v); v > d.durable() || !ok || logged != txn || d.epochAt(v) != epoch {
		w.violate("replica %d committed version %d (%v, epoch %d) before the certifier made it durable (durable %d, the log has %v there): a failed version",
			s.replica, v, txn, epoch, d.durable(), logged)
	}
	if s.version == 0 {
		s.lineage = l
		return
	}
	if s.lineage == l && (!ed || s.epochs[s.version-1] == epoch) {
		return
	}
	for i := uint64(1); i <= s.version; i++ {
		if logged, ok := w.loggedTxn(l, i); !ok || logged != s.applied[i-1] || (ed && d.epochAt(i) != s.epochs[i-1]) {
			w.violate("another history at the same versions: replica %d holds %v (epoch %d) at version %d, where the log it is caught up from holds %v (epoch %d); it applied that log's version %d on top",
				s.replica, s.applied[i-1], s.epochs[i-1], i, logged, d.epochAt(i), v)
			break
		}
	}
	s.lineage = l
}

// judgeAdmission checks the certifier's verdict on a stream (err nil:
// admitted) against the truth: a replica whose history agrees with the
// durable log at every version up to its own (the same epoch at each)
// holds the log's prefix and must be admitted; any other must be refused.
// The comparison is by versions, not by certifier.CommonVersion. The
// history is the truth only if it describes the versions the store held
// when the replica sent it (storeEpochs): that is checked first. (Above
// the store's version, up to the delivered one, it describes entries
// delivered from a log, which checkCommit checks as they commit.)
func (w *world) judgeAdmission(replica int, o *pb.OpenSession, storeEpochs []uint64, err error) {
	for i, e := range storeEpochs[:min(o.ReplicaVersion, uint64(len(storeEpochs)))] {
		if v := uint64(i + 1); epochInRuns(o.History, v) != e {
			w.violate("replica %d opened a stream at version %d with the history %s, which gives version %d epoch %d, but its store holds epoch %d there",
				replica, o.ReplicaVersion, runsString(o.History), v, epochInRuns(o.History, v), e)
			break
		}
	}
	d := &w.cert.disk
	v := o.ReplicaVersion
	prefix := v <= d.durable() && runsEqual(clipRuns(o.History, v), runsOf(d.epochs[:v]))
	switch {
	case err == nil && !prefix:
		w.violate("admitted a replica with another history: replica %d at version %d sent the runs %s, the log's up to there are %s (durable %d)",
			replica, v, runsString(o.History), runsString(runsOf(d.epochs[:min(v, d.last())])), d.durable())
	case err != nil && prefix:
		w.violate("refused replica %d at version %d, whose history %s is a prefix of the log: %v", replica, v, runsString(o.History), err)
	}
}

// clipRuns is runs over the versions up to v, with adjacent runs of one
// epoch merged: the form runsOf gives.
func clipRuns(runs []*pb.EpochRun, v uint64) []*pb.EpochRun {
	var out []*pb.EpochRun
	for _, r := range runs {
		if r.FirstVersion > v {
			break
		}
		if len(out) == 0 || out[len(out)-1].Epoch != r.Epoch {
			out = append(out, r)
		}
	}
	return out
}

func runsEqual(a, b []*pb.EpochRun) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.EpochRun) bool { return x.Epoch == y.Epoch && x.FirstVersion == y.FirstVersion })
}

func runsString(runs []*pb.EpochRun) string {
	s := "["
	for i, r := range runs {
		if i > 0 {
			s += " "
		}
		s += uitoa(r.Epoch) + "@" + uitoa(r.FirstVersion)
	}
	return s + "]"
}
