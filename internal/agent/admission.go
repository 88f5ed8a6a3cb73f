package agent

import (
	"sync"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// admission is what the run's certifier streams said of the replica's
// history: whether the certifier admitted it, and the certifier's durable
// version as the admitted streams' messages carried it. Every stream of
// the run opens with the history (certclient.Options.History), and the
// certifier judges a session (certifier.Admit) before it sends anything,
// so a stream's first message admits the history it opened with.
//
// Until then, and after a refusal, a durable version says nothing about
// this replica: one that must be rewound or rebuilt may hold versions
// that the certifier's log gives to other transactions, and judged with
// that certifier's durable version, a failed (version, epoch) it holds
// would read as durable once the durable version passed it. So
// tashkent.txn_state does not answer (txnstate.go), and the durability
// feeds hear nothing new (feed.go), until a stream admits the history
// again.
type admission struct {
	mu       sync.Mutex
	admitted bool
	durable  uint64
	refused  string // why the last stream was refused, "" if none was since one admitted
	// certifying is the latest epoch an admitted stream said its
	// certifier certifies in (certifierEpoch).
	certifying certifierEpoch
}

// certifierEpoch is the epoch a certifier certifies in and the first
// version it may certify in it (CertifyStreamReply.epoch): a transaction
// of an earlier epoch at that version or above has failed, for good,
// even while no entry of the new epoch has reached the replica yet.
type certifierEpoch struct{ epoch, firstVersion uint64 }

// failed reports whether q names such a transaction.
func (c certifierEpoch) failed(q wire.StateQuery) bool {
	return q.HasEpoch && q.Epoch < c.epoch && q.Version >= c.firstVersion
}

// heardEpoch records the epoch an admitted stream's certifier certifies
// in (certclient.Options.OnEpoch).
func (a *admission) heardEpoch(epoch, firstVersion uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if epoch > a.certifying.epoch {
		a.certifying = certifierEpoch{epoch: epoch, firstVersion: firstVersion}
	}
}

// epoch is the latest certifierEpoch heard (zero: none).
func (a *admission) epoch() certifierEpoch {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.certifying
}

// heard records a message of an admitted stream, with the certifier's
// durable version.
func (a *admission) heard(durable uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.admitted, a.refused = true, ""
	a.durable = max(a.durable, durable)
}

// refuse records that a stream was refused, and why.
func (a *admission) refuse(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.admitted, a.refused = false, why
}

// durableVersion is the certifier's durable version to judge the
// history by, or why there is none.
func (a *admission) durableVersion() (uint64, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.admitted:
		return a.durable, ""
	case a.refused != "":
		return 0, "the certifier refused this replica's history (" + a.refused + ")"
	}
	return 0, "the certifier has not admitted this replica's history yet (the agent is starting)"
}
