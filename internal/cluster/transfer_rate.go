package cluster

import "time"

// rateWindow is how far back a transfer's rate looks: long enough to
// smooth pg_basebackup's once-a-second reports, short enough to follow a
// change (a --max-rate, a busy donor disk).
const rateWindow = 5 * time.Second

// rateSamplesMax bounds a meter's memory: a report a second fills the
// window many times over.
const rateSamplesMax = 64

// rateMeter turns progress reports (time, bytes done) into a rate over the
// last window. It is pure: the caller passes the time.
type rateMeter struct {
	window  time.Duration
	samples []rateSample
}

type rateSample struct {
	at   time.Time
	done int64
}

// add records that done bytes were done at t.
func (m *rateMeter) add(t time.Time, done int64) {
	m.samples = append(m.samples, rateSample{t, done})
	// Keep one sample at or before the window's start, so that the rate
	// covers the whole window.
	cut := 0
	for i := range m.samples {
		if t.Sub(m.samples[i].at) >= m.window {
			cut = i
		}
	}
	if over := len(m.samples) - rateSamplesMax; over > cut {
		cut = over
	}
	m.samples = m.samples[cut:]
}

// rate is bytes per second between the oldest and the newest sample kept;
// 0 until two samples lie apart in time.
func (m *rateMeter) rate() float64 {
	if len(m.samples) < 2 {
		return 0
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	secs := last.at.Sub(first.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(last.done-first.done) / secs
}

// eta is the time left to copy total bytes, done of them copied, at rate
// bytes per second; 0 when the rate is unknown or nothing is left.
func eta(done, total int64, rate float64) time.Duration {
	if rate <= 0 || total <= done {
		return 0
	}
	return time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second)
}
