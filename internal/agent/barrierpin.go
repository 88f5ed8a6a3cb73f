package agent

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// A rewind cannot undo a barrier (a TRUNCATE, DDL, a span: not rows), so
// it needs a pin taken after the last barrier the replica applied. Pins'
// candidates, taken every 100 ms at whatever version the replica is at,
// become usable only once durable, and the versions after a barrier come
// early: a failure soon after a barrier would find no usable pin after
// it, and the replica would halt for a rebuild. The barrier itself was
// durable before it was delivered (the certifier delivers nothing after
// it early until then), so a pin at exactly its version is usable at
// once.
//
// barrierPinner takes that pin. When a delivery holds a barrier, the
// order is held before the barrier at once (reserveHold, before the
// entries reach the order, so the applier never plans past it); its hold
// session then holds the replica's commits before the barrier
// (tashkent.hold_commits: the applier's runs and the local commits, which
// the order does not see), moves the hold to the barrier, which waits
// until it is committed, pins (replica.Pins.TakeNow) and releases. Nothing
// after the barrier commits in between, so the pin holds exactly the
// barrier's version. A local barrier (this replica's own DDL) may commit
// before the hold, and a local version right after it then too: the pin
// then holds a later version, a candidate like the others.
//
// Each wait of a hold lasts at most barrierHoldMax: the reservation until
// the session takes it over, the hold before the barrier, the wait for
// the barrier's commit. A barrier that takes longer to commit (a large
// index built, a long span) gets no pin of its own. It ends with its session too, and the
// session is closed when the run ends. A barrier delivered while another
// session (tashkent verify) holds the replica gets no pin either, nor one
// delivered while the replica does not serve (catching up), when no
// session may hold its commits.
type barrierPinner struct {
	r *run

	mu      sync.Mutex
	pid     int32 // the hold session's backend; 0: none connected
	active  bool  // a hold is reserved or held for a pin
	pending barrier
	latest  uint64 // the last barrier version asked for
	wake    chan struct{}
	// started is closed once the agent keeps pins: the session connects.
	started   chan struct{}
	startOnce sync.Once

	conn *pgx.Conn // the hold session: the goroutine's (run)
}

// barrier is a version to pin at, and the version to hold the replica's
// commits after before it commits: the one before it, or before its span.
type barrier struct{ before, at uint64 }

// barrierHoldMax bounds a barrier's hold, the wait for the barrier's
// commit included: while the barrier is not committed, nothing after it
// could commit anyway; once it is, the hold lasts a pin's round trip.
const barrierHoldMax = 5 * time.Second

// barrierHoldApplicationName: the session that holds the replica's
// commits while a pin is taken at a barrier.
const barrierHoldApplicationName = "tashkent-agent-hold"

func newBarrierPinner(r *run) *barrierPinner {
	return &barrierPinner{r: r, wake: make(chan struct{}, 1), started: make(chan struct{})}
}

// start lets the pinner connect its session.
func (p *barrierPinner) start() { p.startOnce.Do(func() { close(p.started) }) }

// lastBarrier is the last barrier among delivered entries; at 0: none.
// Only the last matters: a rewind goes back to a version at or after
// every barrier delivered, since barriers are durable.
func lastBarrier(entries []logentry.Entry) (barrier, error) {
	for i := len(entries) - 1; i >= 0; i-- {
		h, err := logentry.RawHeaderOf(entries[i].Bytes)
		if err != nil {
			return barrier{}, err
		}
		if h.InSpan() {
			return barrier{before: h.SpanFirst - 1, at: h.SpanLast}, nil
		}
		if yes, err := logentry.IsBarrier(entries[i].Bytes); err != nil || yes {
			return barrier{before: h.Version - 1, at: h.Version}, err
		}
	}
	return barrier{}, nil
}

// want asks for a pin at b. It runs before b's entry reaches the order.
func (p *barrierPinner) want(b barrier) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.at <= p.latest {
		return // a later fragment of a span asked for already
	}
	p.latest = b.at
	log := p.r.a.log
	switch {
	case p.active:
		// The hold reserved or held keeps the applier before b.before;
		// the pinner moves it on to b before it releases it.
		p.pending = b
		return
	case p.pid == 0:
		log.Debug("no pin at a barrier: the agent's hold session is not connected", "barrier", b.at)
		return
	case !p.serving():
		log.Debug("no pin at a barrier: the replica does not serve yet, and its commits cannot be held", "barrier", b.at)
		return
	case !p.r.a.reserveHold(p.pid, b.before, barrierHoldMax):
		log.Debug("no pin at a barrier: another session holds the replica's commits", "barrier", b.at)
		return
	}
	p.active, p.pending = true, b
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// serving: the agent serves with this run, and a session may hold the
// replica's commits (backendConn.hold).
func (p *barrierPinner) serving() bool {
	r, _ := p.r.a.servingRun(p.r)
	return r != nil
}

// run connects the hold session once started and pins the barriers
// asked for, until the run ends.
func (p *barrierPinner) run() {
	defer p.disconnect()
	ctx := p.r.ctx
	select {
	case <-ctx.Done():
		return
	case <-p.started:
	}
	for ctx.Err() == nil {
		if p.conn == nil {
			if err := p.connect(); err != nil {
				p.r.a.log.Debug("could not connect the session that holds commits for pins at barriers", "err", err)
				_ = ctxtime.Sleep(ctx, time.Second)
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
			p.pinPending()
		}
	}
}

func (p *barrierPinner) connect() error {
	conn, err := p.r.a.connect(p.r.ctx, barrierHoldApplicationName)
	if err != nil {
		return err
	}
	p.conn = conn
	p.mu.Lock()
	p.pid = int32(conn.PgConn().PID())
	p.mu.Unlock()
	return nil
}

func (p *barrierPinner) disconnect() {
	if p.conn == nil {
		return
	}
	p.mu.Lock()
	pid := p.pid
	p.pid = 0
	p.mu.Unlock()
	p.conn.Close(context.WithoutCancel(p.r.ctx)) // its hold ends with it
	p.conn = nil
	p.r.a.cancelReservation(pid)
}

// pinPending pins the barriers asked for, the newest one each time, then
// releases the hold. The release is under mu: a barrier delivered
// meanwhile finds the hold gone and reserves a new one.
func (p *barrierPinner) pinPending() {
	for {
		p.mu.Lock()
		b := p.pending
		p.pending = barrier{}
		if b.at == 0 {
			p.release()
			p.active = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.pinAt(b)
	}
}

// pinAt holds the replica's commits after b.before, then after b.at once
// it is committed, and pins.
func (p *barrierPinner) pinAt(b barrier) {
	log := p.r.a.log
	rw := p.r.a.rewinds.forDatabase(p.r.started)
	if rw == nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.r.ctx, 2*barrierHoldMax)
	defer cancel()
	var held int64
	for _, v := range []uint64{b.before, b.at} {
		err := p.conn.QueryRow(ctx, `SELECT tashkent.hold_commits($1, $2)`, int64(v), barrierHoldMax.Milliseconds()).Scan(&held)
		if err != nil {
			log.Debug("no pin at a barrier: could not hold the replica's commits", "barrier", b.at, "err", err)
			return
		}
	}
	pinned, err := rw.Pins.TakeNow(ctx)
	switch {
	case err != nil:
		log.Debug("no pin at a barrier", "barrier", b.at, "err", err)
	case pinned != b.at:
		log.Debug("pinned a snapshot after a barrier, not at it: versions after it had committed", "barrier", b.at, "pinned", pinned)
	default:
		log.Debug("pinned a snapshot at a barrier", "barrier", b.at)
	}
}

// release ends the hold, and the reservation its session did not take
// over; called with mu held. A session that cannot release is closed,
// which ends its hold: the loop connects again.
func (p *barrierPinner) release() {
	pid := p.pid
	defer p.r.a.cancelReservation(pid)
	if p.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.r.ctx, queryTimeout)
	defer cancel()
	if _, err := p.conn.Exec(ctx, `SELECT tashkent.release_commits()`); err != nil {
		p.r.a.log.Debug("could not release the hold of a pin at a barrier; it ends with its session", "err", err)
		p.pid = 0
		p.conn.Close(context.WithoutCancel(ctx))
		p.conn = nil
		return
	}
	// A barrier delivered next reserves a hold at once: it must not find
	// this one, whose release message may not have arrived yet.
	p.r.a.endHoldOf(pid, "a pin at a barrier was taken")
}
