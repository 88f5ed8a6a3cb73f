package cluster

import (
	"testing"
	"time"
)

func TestRateMeterFollowsTheLastWindow(t *testing.T) {
	m := rateMeter{window: 5 * time.Second}
	t0 := time.Unix(1000, 0)
	if m.rate() != 0 {
		t.Fatal("rate without samples")
	}
	m.add(t0, 0)
	if m.rate() != 0 {
		t.Fatal("rate from one sample")
	}
	// 10 MiB/s for 10 s, then 1 MiB/s: after 5 s more the rate is the new one.
	for s := 1; s <= 10; s++ {
		m.add(t0.Add(time.Duration(s)*time.Second), int64(s)*10<<20)
	}
	if got := m.rate(); got != 10<<20 {
		t.Fatalf("rate %v, want 10 MiB/s", got)
	}
	for s := 11; s <= 15; s++ {
		m.add(t0.Add(time.Duration(s)*time.Second), 100<<20+int64(s-10)<<20)
	}
	if got := m.rate(); got != 1<<20 {
		t.Fatalf("rate %v after the slowdown, want 1 MiB/s", got)
	}
	if len(m.samples) > 7 {
		t.Fatalf("the meter keeps %d samples for a 5 s window of one a second", len(m.samples))
	}
}

func TestRateMeterBoundsItsSamples(t *testing.T) {
	m := rateMeter{window: time.Hour}
	t0 := time.Unix(1000, 0)
	for i := range 1000 {
		m.add(t0.Add(time.Duration(i)*time.Millisecond), int64(i))
	}
	if len(m.samples) > rateSamplesMax {
		t.Fatalf("%d samples kept, limit %d", len(m.samples), rateSamplesMax)
	}
}

func TestETA(t *testing.T) {
	for _, c := range []struct {
		done, total int64
		rate        float64
		want        time.Duration
	}{
		{0, 100 << 20, 10 << 20, 10 * time.Second},
		{50 << 20, 100 << 20, 10 << 20, 5 * time.Second},
		{100 << 20, 100 << 20, 10 << 20, 0},
		{10, 100, 0, 0},
	} {
		if got := eta(c.done, c.total, c.rate); got != c.want {
			t.Errorf("eta(%d, %d, %v) = %v, want %v", c.done, c.total, c.rate, got, c.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
