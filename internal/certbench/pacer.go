package certbench

import (
	"context"
	"time"

	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// An open-loop step is driven by one pacer that issues tickets, each the
// time a request is due, at the configured rate; any client that is free
// takes the next ticket, and its latency is measured from the ticket's time
// (so a request that waited for a free client, or behind a stall, counts
// its wait: no coordinated omission).
//
// How the pacer waits matters at this scale. A Go timer fires with
// millisecond granularity whenever the process is idle, because the
// runtime then sleeps in epoll_wait, whose timeout is in whole
// milliseconds (runtime/netpoll_epoll.go rounds 1 ns..1 ms up to 1 ms).
// Measured with 64 goroutines pacing 10,000/s with timers, each request
// started 0.6 ms late at the median: the generator's own lateness, counted
// as the certifier's latency. On Linux the pacer therefore waits on a
// timerfd through the runtime's poller (pacer_linux.go): the kernel wakes
// epoll_wait when it expires, to the microsecond, without holding a thread
// or a P while it waits. It wakes at most every pacerTickMin, issuing
// every ticket due by then: a wake-up per request at 10,000/s doubled the
// generator's system time (timerfd reads, epoll wake-ups: 0.7 -> 1.5-1.9 s
// of sys per 5 s step), CPU taken from the certifier it measures.

// pacerTickMin is the shortest period the pacer wakes at; the tickets it
// issues at a wake-up were due up to this long before (counted in their
// latency: late p99).
const pacerTickMin = 200 * time.Microsecond

// ticketsMax bounds the tickets waiting for a free client; past it the
// pacer waits, and the tickets it then issues still carry their due times.
const ticketsMax = 1 << 16

// pace sends due times on tickets, interval apart from start, until ctx
// ends; then it closes tickets.
func pace(ctx context.Context, start time.Time, interval time.Duration, tickets chan<- time.Time) {
	defer close(tickets)
	tick := max(interval, pacerTickMin)
	t, err := newPreciseTicker(start, tick)
	if err != nil {
		t = newTimerTicker(start, tick)
	}
	defer t.close()
	issued := int64(0)
	for ctx.Err() == nil {
		ticks, err := t.wait(ctx) // ticks due by now, since start
		if err != nil {
			return
		}
		// Tickets due by the last tick (the first tick is at start).
		due := int64(time.Duration(ticks-1)*tick/interval) + 1
		for ; issued < due; issued++ {
			select {
			case tickets <- start.Add(time.Duration(issued) * interval):
			case <-ctx.Done():
				return
			}
		}
	}
}

// ticker waits until the next tick and reports how many ticks are due in
// all.
type ticker interface {
	wait(ctx context.Context) (int64, error)
	close()
}

// timerTicker is the portable ticker, with Go timers (see above for its
// granularity).
type timerTicker struct {
	start    time.Time
	interval time.Duration
	next     int64
}

func newTimerTicker(start time.Time, interval time.Duration) ticker {
	return &timerTicker{start: start, interval: interval}
}

func (t *timerTicker) wait(ctx context.Context) (int64, error) {
	_ = ctxtime.Sleep(ctx, time.Until(t.start.Add(time.Duration(t.next)*t.interval)))
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t.next = int64(time.Since(t.start)/t.interval) + 1
	return t.next, nil
}

func (t *timerTicker) close() {}
