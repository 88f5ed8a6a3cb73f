package agent

import (
	"fmt"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// A transaction that writes is named by (version, epoch): the version the
// certifier committed it as, and the epoch that certified it
// (tashkent.last_commit). Its states are those of Kashi §2.2.1, property
// 2: committed, then durable or failed; "aborted" has no version (the
// client got 40001 and nothing was committed), so it is never asked
// about. The agent judges from the replica's history (history.go), which
// is a prefix of the certifier's log (admission by log matching), and the
// certifier's durable version.
//
// Two facts of the log make the judgement (docs/ARCHITECTURE.md, the
// certifier, "Admission of streams"). Within an epoch one process assigns versions append-only and
// never reassigns one, so the history's epoch at a version it covers is
// the epoch of the only transaction that can be final there, once the
// version is durable. And a new epoch begins only once the log below its
// first version is final: a leader applies its barrier before it
// certifies, a single certifier syncs its log before it serves a new
// generation. So where a run of epoch E begins at version f, no version
// from f on can be an earlier epoch's: (v, e) with e < E and v >= f has
// failed for good, and so have its dependants (property 4).
//
// stateOf answers a StateQuery on a history whose runs (in version order)
// cover up to version through, with the certifier's durable version
// durable:
//
//	version below the history's first run       unknown, for good (no record here)
//	no epoch given, version beyond through      unknown
//	no epoch given: the epoch the history holds at the version
//	epoch = the history's at version <= through  durable if version <= durable, else committed
//	epoch < the history's at version             failed (a later epoch began at or before it)
//	epoch > the history's at version <= through  unknown; for good if version <= durable
//	otherwise                                   unknown (not decided yet, or an epoch this
//	                                             replica has not seen)
//
// Beyond through the history's epoch is its last run's: whatever comes
// later has that epoch or a later one. An epoch newer than the one the
// history holds at a covered version is unknown rather than failed: no
// certifier could have assigned such a pair, so no client holds it; and
// once the version is durable in the history's epoch, no other epoch can
// ever hold it. forGood says why an unknown stays unknown whatever comes
// ("" if it may change): tashkent.wait_durable does not wait for it.
func stateOf(runs []*pb.EpochRun, through, durable uint64, q wire.StateQuery) (state wire.TxnState, forGood string) {
	at, ok := epochAt(runs, q.Version)
	if !ok {
		if len(runs) == 0 {
			return wire.StateUnknown, ""
		}
		return wire.StateUnknown, fmt.Sprintf("this replica's history begins at version %d (epoch %d): it holds no record of earlier versions",
			runs[0].GetFirstVersion(), runs[0].GetEpoch())
	}
	covered := q.Version <= through
	epoch := q.Epoch
	if !q.HasEpoch {
		if !covered {
			return wire.StateUnknown, ""
		}
		epoch = at
	}
	switch {
	case epoch == at && covered && q.Version <= durable:
		return wire.StateDurable, ""
	case epoch == at && covered:
		return wire.StateCommitted, ""
	case epoch < at:
		return wire.StateFailed, ""
	case covered && q.Version <= durable:
		return wire.StateUnknown, fmt.Sprintf("version %d is durable in epoch %d, so epoch %d never holds it", q.Version, at, epoch)
	}
	return wire.StateUnknown, ""
}

// epochAt is the epoch of the run that holds version v (the last run
// beginning at or before it); false if v lies before the first run.
func epochAt(runs []*pb.EpochRun, v uint64) (uint64, bool) {
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].GetFirstVersion() <= v {
			return runs[i].GetEpoch(), true
		}
	}
	return 0, false
}

// stateOf answers q from the history, or says why it cannot yet. An
// unknown the history cannot settle is failed if the certifier's epoch
// says so (certifierEpoch): after a failure no entry of the new epoch may
// have come yet.
func (h *history) stateOf(durable uint64, certifying certifierEpoch, q wire.StateQuery) wire.StateAnswer {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.loaded {
		return wire.StateAnswer{Text: "the agent has not read the replica's history yet"}
	}
	state, forGood := stateOf(h.runs, h.through, durable, q)
	if state == wire.StateUnknown && forGood == "" && certifying.failed(q) {
		state = wire.StateFailed
	}
	final := state == wire.StateDurable || state == wire.StateFailed || forGood != ""
	return wire.StateAnswer{State: state, Final: final, Durable: durable, Text: forGood}
}

// epochOf is the epoch the history holds at version v (0 if none).
func (h *history) epochOf(v uint64) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	epoch, _ := epochAt(h.runs, v)
	return epoch
}

// txnState answers a backend's StateQuery (tashkent.txn_state,
// wait_durable) from the current run's history.
func (c *backendConn) txnState(q wire.StateQuery) wire.StateAnswer {
	a := c.a.judgeState(q)
	c.a.metrics.stateQueries.WithLabelValues(a.State.String()).Inc()
	return a
}

// judgeState judges q by the current run's history and the durable
// version its admitted streams carried; not while the certifier has not
// admitted the history (admission.go).
func (a *Agent) judgeState(q wire.StateQuery) wire.StateAnswer {
	r := a.currentRun()
	if r == nil {
		state, why := a.State()
		return wire.StateAnswer{Text: "the tashkent agent is " + string(state) + ": " + why}
	}
	durable, why := r.admission.durableVersion()
	if why != "" {
		return wire.StateAnswer{Text: why}
	}
	return r.history.stateOf(durable, r.admission.epoch(), q)
}
