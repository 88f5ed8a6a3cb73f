package certgroup

import (
	"testing"
	"time"
)

// A follower's Raft clock follows the wall clock when the ticker's
// receiver was late (the ticker drops those ticks); the leader's does not.
func TestTickClockGivesAFollowerTheTicksItMissed(t *testing.T) {
	start := time.Unix(1000, 0)
	c := tickClock{interval: 10 * time.Millisecond, last: start}
	steps := []struct {
		at      time.Duration
		leading bool
		want    int
	}{
		{10 * time.Millisecond, false, 1},
		{20 * time.Millisecond, false, 1},
		{55 * time.Millisecond, false, 3},   // 20 → 50 ms: three ticks, 5 ms carried
		{60 * time.Millisecond, false, 1},   // the carried 5 ms make this one whole
		{62 * time.Millisecond, false, 1},   // early fire: still one tick, the clock restarts here
		{200 * time.Millisecond, true, 1},   // the leader gets one tick per fire
		{900 * time.Millisecond, false, 60}, // a long stall: at most one election timeout at once
		{910 * time.Millisecond, false, 1},
	}
	for _, s := range steps {
		if got := c.due(start.Add(s.at), s.leading, 60); got != s.want {
			t.Errorf("at %v (leading %v): %d ticks, want %d", s.at, s.leading, got, s.want)
		}
	}
}
