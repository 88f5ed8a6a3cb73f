package wal

import (
	"testing"
	"time"
)

// SlowDiskSleep emulates a slow fsync for benchmarks: it must sleep the
// whole delay even when the runtime's preemption signals interrupt
// nanosleep (a lower bound only: how much longer depends on the machine).
func TestSlowDiskSleepSleepsTheWholeDelay(t *testing.T) {
	done := make(chan struct{})
	go func() { // a busy goroutine draws preemption signals to the sleeper's thread
		for {
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	defer close(done)
	for _, d := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond} {
		start := time.Now()
		SlowDiskSleep(d)
		if took := time.Since(start); took < d {
			t.Errorf("SlowDiskSleep(%v) returned after %v", d, took)
		}
	}
}
