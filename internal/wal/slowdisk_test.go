package wal

import (
	"testing"
	"time"
)

// SlowDiskSleep emulates a slow fsync for benchmarks: it sleeps at least
// the whole delay (a lower bound only: how much longer depends on the
// machine), and returns at once for none. Its EINTR loop is not exercised
// here: signals that would interrupt nanosleep cannot be aimed at the
// sleeping thread from a test.
func TestSlowDiskSleepSleepsTheWholeDelay(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond} {
		start := time.Now()
		SlowDiskSleep(d)
		if took := time.Since(start); took < d {
			t.Errorf("SlowDiskSleep(%v) returned after %v", d, took)
		}
	}
}
