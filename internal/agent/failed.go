package agent

import (
	"sync"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// Under mode ed the certifier answers at the commit point, before the
// version is durable, and a version can fail: the certifier lost it before
// it was durable (Kashi, "Eventual Durability", §2.2.1, property 2). The
// agent learns it from a verdict "rewind to C" (askRewind): every version
// above C decided in the epochs the replica's history holds failed. It
// tells the durability feeds (wire.Failed, 'X' C, epoch), so that the
// extension ends the backends that hold one: a safe commit waiting for
// durability gets FATAL TK006, a commit waiting for its turn 40001, a safe
// read-only transaction that may have read one 40001
// (extension/src/safe.c). The agent sets it back to wire.NoneFailed when
// its next run opens the admission gate: the replica then holds no failed
// version (the rewind took it back to C or below), and the rewind ended
// every backend that was in a transaction. The feed applies 'X'
// asynchronously, maybe after the new epoch's first commits: the epoch
// keeps a late 'X' from failing them (they are of a later epoch).
//
// A fresh agent knows nothing until its first run opens the gate: it sends
// no 'X' until then, so a failure an earlier agent reported stays in force
// while this one rewinds.

// failedWatch is the failure the feeds must pass on, and the wake-up of
// the feeds.
type failedWatch struct {
	mu      sync.Mutex
	known   bool
	failed  wire.Failed
	changed chan struct{}
}

func newFailedWatch() *failedWatch {
	return &failedWatch{changed: make(chan struct{}), failed: wire.Failed{After: wire.NoneFailed}}
}

// set records that every version above after decided in epoch or an
// earlier one failed (after wire.NoneFailed: none is known to) and wakes
// the feeds if that changed.
func (w *failedWatch) set(after, epoch uint64) {
	f := wire.Failed{After: after, Epoch: epoch}
	if after == wire.NoneFailed {
		f.Epoch = 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.known && w.failed == f {
		return
	}
	w.known, w.failed = true, f
	close(w.changed)
	w.changed = make(chan struct{})
}

// load returns the failure to pass on; ok is false while the agent knows
// nothing (it sends no 'X').
func (w *failedWatch) load() (wire.Failed, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed, w.known
}

// wait is closed at the next change after the call.
func (w *failedWatch) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}
