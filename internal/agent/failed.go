package agent

import (
	"sync"
	"sync/atomic"

	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// Under mode ed the certifier answers at the commit point, before the
// version is durable, and a version can fail: the certifier lost it before
// it was durable (Kashi, "Eventual Durability", §2.2.1, property 2). The
// agent learns it from a verdict "rewind to C" (askRewind): every version
// above C failed. It tells the durability feeds (wire.Failed, 'X'), so that
// the extension ends the backends that hold one: a safe commit waiting for
// durability gets FATAL TK006, a commit waiting for its turn 40001, a safe
// read-only transaction that may have read one 40001
// (extension/src/safe.c). The agent sets it back to wire.NoneFailed when
// its next run opens the admission gate: the replica then holds no failed
// version (the rewind took it back to C or below), and the rewind ended
// every backend that was in a transaction.

// failedWatch is the version above which every version failed, as the
// feeds must pass it on, and the wake-up of the feeds.
type failedWatch struct {
	after atomic.Uint64

	mu      sync.Mutex
	changed chan struct{}
}

func newFailedWatch() *failedWatch {
	w := &failedWatch{changed: make(chan struct{})}
	w.after.Store(wire.NoneFailed)
	return w
}

// set records that every version above after failed (wire.NoneFailed:
// none is known to) and wakes the feeds if that changed.
func (w *failedWatch) set(after uint64) {
	if w.after.Swap(after) == after {
		return
	}
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *failedWatch) load() uint64 { return w.after.Load() }

// wait is closed at the next change after the call.
func (w *failedWatch) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}
