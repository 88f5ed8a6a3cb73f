package certifier

import (
	"context"
	"sync"
	"time"
)

// flowControlWaitMax bounds how long flow control holds one message's
// requests. The replica that asks for the pause stops asking when its
// apply makes no progress (its agent's rule), and its session ending stops
// it too; this bound is the last word, so that no replica can stop the
// others' commits for longer, whatever it reports. It is well below the
// second after which a client of a certifier group takes a silent stream
// for a stalled leader (certclient's stallTimeout) and reconnects.
const flowControlWaitMax = 500 * time.Millisecond

// flowControl holds the requests of every replica while another one has
// fallen behind (CertifyStreamRequest.pause): the cluster then commits at
// the pace of its slowest replica, as Galera's flow control makes it, and
// a replica that falls behind catches up instead of seeing each of its
// own transactions conflict with the versions it has not applied yet. The
// requests of a replica that asks for the pause are never held: its local
// transactions may hold the row locks its apply waits for, and they end
// (committed or refused) only once certified.
type flowControl struct {
	mu      sync.Mutex
	pausing map[*streamState]bool
	changed chan struct{} // closed when pausing changes
	waitMax time.Duration
	m       *metrics
}

func newFlowControl(m *metrics) *flowControl {
	return &flowControl{pausing: map[*streamState]bool{}, changed: make(chan struct{}), waitMax: flowControlWaitMax, m: m}
}

// set records whether the session of st asks for the pause (every message
// says; false also when its stream ends).
func (f *flowControl) set(st *streamState, pause bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pausing[st] == pause {
		return
	}
	if pause {
		f.pausing[st] = true
	} else {
		delete(f.pausing, st)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// holds reports whether the requests of st are to be held now (another
// session asks for the pause, and st does not), and a channel closed when
// that may have changed.
func (f *flowControl) holds(st *streamState) (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pausing) > 0 && !f.pausing[st], f.changed
}

// pausing counts the sessions that ask for the pause.
func (f *flowControl) pausingSessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pausing)
}

// hold waits, at most waitMax, while another session asks for
// the pause and st does not: two replicas behind at once must not hold
// each other's requests, whose transactions may hold the row locks their
// applies wait for. It returns early only when ctx ends.
func (f *flowControl) hold(ctx context.Context, st *streamState) error {
	paused, changed := f.holds(st)
	if !paused {
		return nil
	}
	start := time.Now()
	defer func() { f.m.flowControlWait.Add(time.Since(start).Seconds()) }()
	timeout := time.NewTimer(f.waitMax)
	defer timeout.Stop()
	for paused {
		select {
		case <-changed:
		case <-timeout.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		paused, changed = f.holds(st)
	}
	return nil
}
