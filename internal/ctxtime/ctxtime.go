// Package ctxtime has the pause the Go processes' goroutines share: one
// that ends early when its context does, so that a retry loop or a
// workload stops as soon as it is cancelled. Pure cores take no time at
// all (their drivers count ticks); this is for the drivers.
package ctxtime

import (
	"context"
	"time"
)

// Sleep pauses for d, or until ctx ends: then it returns ctx's error, and
// nil after a full pause.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
