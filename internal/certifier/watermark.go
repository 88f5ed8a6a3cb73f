package certifier

import (
	"context"
	"sync"
)

// watermark is a version that grows, with a way to wait for it; only a
// group member's early delivery ever lowers one (lower).
type watermark struct {
	mu      sync.Mutex
	version uint64
	err     error // set once: the service failed and nothing will advance
	changed chan struct{}
}

func newWatermark(v uint64) *watermark {
	return &watermark{version: v, changed: make(chan struct{})}
}

func (w *watermark) advance(v uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v > w.version {
		w.version = v
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

// lower moves the version back to v if it is above: what it stood for
// was taken back (a group member's speculative versions, group_early.go).
// A waiter already past v has returned; the others wait on.
func (w *watermark) lower(v uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v < w.version {
		w.version = v
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

func (w *watermark) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

func (w *watermark) get() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.version
}

// watch returns the version, the failure if any, and a channel closed
// when either changes.
func (w *watermark) watch() (uint64, error, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.version, w.err, w.changed
}

// wait returns the version once it is at least v.
func (w *watermark) wait(ctx context.Context, v uint64) (uint64, error) {
	for {
		w.mu.Lock()
		cur, err, ch := w.version, w.err, w.changed
		w.mu.Unlock()
		if err != nil {
			return cur, err
		}
		if cur >= v {
			return cur, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return cur, ctx.Err()
		}
	}
}

// next waits until the version is above v.
func (w *watermark) next(ctx context.Context, v uint64) (uint64, error) { return w.wait(ctx, v+1) }
