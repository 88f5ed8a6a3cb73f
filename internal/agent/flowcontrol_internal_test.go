package agent

import (
	"testing"
	"time"
)

func TestApplyProgressMeasuresAStall(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p := applyProgress{lastApplied: 5, lastProgress: t0}
	for _, s := range []struct {
		ms               int
		applied, backlog uint64
		want             time.Duration
	}{
		{1000, 5, 0, 0},                       // idle: nothing waits
		{2000, 5, 3, 0},                       // a backlog begins: not stalled
		{2500, 5, 3, 500 * time.Millisecond},  // no progress since
		{3000, 6, 4, 0},                       // progress
		{4500, 6, 4, 1500 * time.Millisecond}, // stalled again
		{9000, 6, 9, 6000 * time.Millisecond}, // and more waits
		{9010, 6, 0, 0},                       // the backlog is gone (applied by a new run)
		{20000, 6, 1, 0},                      // a new backlog after an idle spell is not a stall
		{21000, 6, 1, time.Second},
	} {
		if got := p.observe(at(s.ms), s.applied, s.backlog); got != s.want {
			t.Fatalf("at %d ms (applied %d, backlog %d): stalled %v, want %v", s.ms, s.applied, s.backlog, got, s.want)
		}
	}
}
