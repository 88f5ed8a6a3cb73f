package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pins keeps a few pins (snapshots of the replica at one version, Pin)
// so that a rewind can always read the rows as they were at a version no
// failure can take away (Eventual Durability, Kashi §2.2: a durable
// transaction never fails, and durability is a prefix of the order).
//
// A pin is usable once its version is durable (Advance): the rewind goes
// back to such a version and replays from there. Pins keeps the newest
// usable pin and the candidates newer than it, at most ConnectionsMax
// pins in all, and takes a new candidate every Interval (Tick). A
// candidate becomes the usable pin when the durable version passes it,
// and every older pin is then dropped, so the oldest open snapshot, which
// holds back vacuum, is about one Interval plus the durability lag old.
// When all the connections hold pins, the newest candidate makes room for
// the next one: the oldest candidate, which becomes usable first, stays,
// so a durability lag longer than Interval still moves the usable pin on.
//
// A pin Usable hands out is reserved for its caller until Return: Tick
// neither drops nor reuses it, and Close leaves it open until Return.
// After a rewind to k, Rewound drops the pins above k: they saw versions
// that failed. Tick also drops the pins whose connection broke (the
// server ended it, or restarted).
//
// Methods are safe for concurrent use. Tick (Rewinder.Run calls it every
// Interval), TakeNow and Close talk to the database; the others only
// change the bookkeeping, and the pins they drop are released at the next
// Tick.
type Pins struct {
	cfg PinsConfig
	// ticking: one Tick or TakeNow at a time, so that two never take a
	// pin each past ConnectionsMax.
	ticking sync.Mutex

	mu      sync.Mutex
	pins    []*Pin // by version, then by when taken
	leased  map[*Pin]bool
	drop    []*Pin      // to release at the next Tick
	idle    []*pgx.Conn // connections of released pins, for the next
	durable uint64
	taken   time.Time // when the last pin was taken
	// rewinds counts Rewound and suspend calls: a pin taken across one
	// is discarded.
	rewinds int
	// suspended: no pin is taken (a rewind runs, during which the
	// replica's rows and its version disagree).
	suspended bool
	closed    bool
}

// PinsConfig configures Pins.
type PinsConfig struct {
	// Connect opens a connection for a pin. The agent's connections
	// (its role, which passes the admission gate, and its settings:
	// idle_in_transaction_session_timeout = 0 above all).
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Interval between new candidate pins; 0: PinIntervalDefault.
	Interval time.Duration
	// ConnectionsMax is the most pins, and connections, kept open; 0:
	// PinConnectionsMaxDefault. At least 2: a usable pin and a candidate.
	ConnectionsMax int
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

const (
	// PinIntervalDefault: a new candidate ten times a second keeps the
	// oldest snapshot, and so what vacuum may not remove, well under a
	// second old, for one round trip per Interval.
	PinIntervalDefault = 100 * time.Millisecond
	// PinConnectionsMaxDefault: a usable pin, a candidate, and a second
	// candidate for when durability lags more than one Interval.
	PinConnectionsMaxDefault = 3
)

// NewPins returns a Pins that holds no pin yet.
func NewPins(cfg PinsConfig) *Pins {
	if cfg.Interval <= 0 {
		cfg.Interval = PinIntervalDefault
	}
	if cfg.ConnectionsMax <= 0 {
		cfg.ConnectionsMax = PinConnectionsMaxDefault
	}
	cfg.ConnectionsMax = max(cfg.ConnectionsMax, 2)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Pins{cfg: cfg, leased: map[*Pin]bool{}}
}

// Advance tells Pins the durable version: every version up to it is
// durable in the certifier's log, in the epoch the replica was admitted
// in. It never moves back.
func (p *Pins) Advance(durable uint64) {
	p.mu.Lock()
	p.durable = max(p.durable, durable)
	p.mu.Unlock()
}

// Usable returns the newest usable pin at or below version c (its version
// durable and at most c), reserved for the caller until Return; nil if
// there is none.
func (p *Pins) Usable(c uint64) *Pin {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pin := range slices.Backward(p.pins) {
		if pin.Version <= c && pin.Version <= p.durable {
			p.leased[pin] = true
			return pin
		}
	}
	return nil
}

// Return ends the reservation of a pin Usable returned; after Close it
// releases the pin and closes its connection.
func (p *Pins) Return(pin *Pin) {
	p.mu.Lock()
	delete(p.leased, pin)
	closed := p.closed
	if i := slices.Index(p.pins, pin); closed && i >= 0 {
		p.pins = slices.Delete(p.pins, i, i+1)
		p.drop = append(p.drop, pin)
	}
	p.mu.Unlock()
	if closed { // Close left it to its reader
		ctx, cancel := context.WithTimeout(context.Background(), pinCloseTimeout)
		defer cancel()
		p.releaseDropped(ctx)
	}
}

// pinCloseTimeout bounds the release of a pin returned after Close.
const pinCloseTimeout = 5 * time.Second

// Rewound drops the pins above k, after the replica went back to k: their
// snapshots hold versions that failed. A pin being taken meanwhile is
// discarded too.
func (p *Pins) Rewound(k uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rewinds++
	// The durable version heard was the log's the replica parted from; the
	// next stream says what is durable in the one it is admitted to.
	p.durable = min(p.durable, k)
	keep := p.pins[:0]
	for _, pin := range p.pins {
		if pin.Version > k {
			p.drop = append(p.drop, pin)
			delete(p.leased, pin)
		} else {
			keep = append(keep, pin)
		}
	}
	p.pins = keep
}

// suspend stops Tick from taking pins until resume, and discards a pin
// being taken: from a rewind's undo to its finish, the replica's rows are
// at the pin's version and its version (tashkent.snapshot_version) is
// still the one it goes back from, so a pin taken then would be wrong.
func (p *Pins) suspend() {
	p.mu.Lock()
	p.suspended = true
	p.rewinds++
	p.mu.Unlock()
}

func (p *Pins) resume() {
	p.mu.Lock()
	p.suspended = false
	p.mu.Unlock()
}

// Oldest returns the version of the oldest pin; false if there is none.
// Nothing can be undone to below it (UndoWindow.Trim).
func (p *Pins) Oldest() (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pins) == 0 {
		return 0, false
	}
	return p.pins[0].Version, true
}

// Versions returns the versions of the pins kept, oldest first.
func (p *Pins) Versions() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]uint64, len(p.pins))
	for i, pin := range p.pins {
		out[i] = pin.Version
	}
	return out
}

// Tick drops the pins no longer needed and, once Interval has passed
// since the last one, takes a new candidate. An error says the candidate
// could not be taken; the pins kept are unchanged.
func (p *Pins) Tick(ctx context.Context) error {
	_, err := p.tick(ctx, false)
	return err
}

// TakeNow takes a candidate at once, whatever the interval, making room
// if every connection holds a pin, and returns its version. It is for the
// version right after a barrier (DDL, TRUNCATE, a span), taken while the
// replica's commits are held there (tashkent.hold_commits): the barrier
// was durable before it was delivered, so the pin is usable at once and
// no rewind has to undo the barrier. Errors: as Tick's, and when every
// pin is usable or leased (no room).
func (p *Pins) TakeNow(ctx context.Context) (uint64, error) {
	return p.tick(ctx, true)
}

func (p *Pins) tick(ctx context.Context, now bool) (uint64, error) {
	p.ticking.Lock()
	defer p.ticking.Unlock()
	p.dropBroken()
	take, rewinds, err := p.plan(now)
	p.releaseDropped(ctx)
	if !take {
		return 0, err
	}
	pin, err := p.take(ctx)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if p.rewinds != rewinds || p.closed {
		p.drop = append(p.drop, pin)
	} else {
		p.insertLocked(pin)
	}
	p.mu.Unlock()
	p.releaseDropped(ctx)
	return pin.Version, nil
}

// plan prunes the pins and says whether to take a candidate now (at once:
// whatever the interval); if every connection holds a pin, one is dropped
// to make room. It returns the count of rewinds it saw not suspended,
// under the same lock: the pin taken is kept only if no rewind began
// since (its snapshot may predate the undo's commit, and its
// snapshot_version follow the finish: its version would be the rewind's
// target, its rows those of the version the rewind went back from).
func (p *Pins) plan(now bool) (take bool, rewinds int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.suspended {
		if now {
			return false, 0, errPinsStopped
		}
		return false, 0, nil
	}
	p.pruneLocked()
	at := p.cfg.Now()
	if !now && at.Sub(p.taken) < p.cfg.Interval {
		return false, 0, nil
	}
	if len(p.pins) >= p.cfg.ConnectionsMax {
		victim := makeRoom(p.pins, p.durable, p.leased)
		if victim == nil && now {
			victim = newestCandidate(p.pins, p.durable, p.leased)
		}
		if victim == nil {
			return false, 0, errNoRoomForPin(now)
		}
		p.removeLocked(victim)
		p.drop = append(p.drop, victim)
	}
	p.taken = at
	return true, p.rewinds, nil
}

// dropBroken drops the pins whose connection broke: the server ended the
// backend, or restarted, and the snapshot is gone. CheckConn reads what
// the server sent without a round trip (a millisecond at most); it runs
// under mu so that Usable cannot lease a pin while its connection is
// read. Leased pins are their reader's to find broken.
func (p *Pins) dropBroken() {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.pins[:0]
	for _, pin := range p.pins {
		if pin.conn != nil && !p.leased[pin] && !connAlive(pin.conn) {
			p.drop = append(p.drop, pin)
		} else {
			live = append(live, pin)
		}
	}
	p.pins = live
}

// connAlive: conn has not broken. A FATAL message (a terminated backend)
// closes it as CheckConn reads it.
func connAlive(conn *pgx.Conn) bool {
	return !conn.IsClosed() && conn.PgConn().CheckConn() == nil && !conn.IsClosed()
}

// errPinsStopped: no pin is taken during a rewind or after Close.
var errPinsStopped = errors.New("replica: no pin is taken now (a rewind runs, or the pins are closed)")

// errNoRoomForPin: every connection holds a pin that must stay. For Tick
// that is no error: it tries again at its next interval.
func errNoRoomForPin(now bool) error {
	if !now {
		return nil
	}
	return errors.New("replica: no room for a pin: every connection holds a usable or a leased one")
}

// take takes a pin on an idle connection, or a new one.
func (p *Pins) take(ctx context.Context) (*Pin, error) {
	p.mu.Lock()
	var conn *pgx.Conn
	if n := len(p.idle); n > 0 {
		conn, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = p.cfg.Connect(ctx); err != nil {
			return nil, fmt.Errorf("replica: connect for a pin: %w", err)
		}
	}
	pin, err := TakePin(ctx, conn, p.cfg.Now())
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return pin, nil
}

// releaseDropped ends the transactions of the dropped pins; their
// connections wait for the next pins, or close once enough do.
func (p *Pins) releaseDropped(ctx context.Context) {
	p.mu.Lock()
	drop := p.drop
	p.drop = nil
	p.mu.Unlock()
	for _, pin := range drop {
		if pin.conn == nil {
			continue
		}
		err := pin.release(ctx)
		p.mu.Lock()
		keepConn := err == nil && !pin.conn.IsClosed() && !p.closed && len(p.pins)+len(p.idle) < p.cfg.ConnectionsMax
		if keepConn {
			p.idle = append(p.idle, pin.conn)
		}
		p.mu.Unlock()
		if !keepConn {
			pin.conn.Close(context.WithoutCancel(ctx))
		}
	}
}

func (p *Pins) insertLocked(pin *Pin) {
	i, _ := slices.BinarySearchFunc(p.pins, pin.Version, func(q *Pin, v uint64) int {
		if q.Version <= v {
			return -1 // after every pin of the same version: it is newer
		}
		return 1
	})
	p.pins = slices.Insert(p.pins, i, pin)
	p.pruneLocked()
}

func (p *Pins) removeLocked(pin *Pin) {
	if i := slices.Index(p.pins, pin); i >= 0 {
		p.pins = slices.Delete(p.pins, i, i+1)
	}
}

func (p *Pins) pruneLocked() {
	live := p.pins[:0]
	for _, pin := range p.pins {
		if pin.conn != nil && pin.conn.IsClosed() && !p.leased[pin] {
			p.drop = append(p.drop, pin) // its connection broke: its snapshot is gone
		} else {
			live = append(live, pin)
		}
	}
	keep, drop := prune(live, p.durable, p.leased)
	p.pins = keep
	p.drop = append(p.drop, drop...)
}

// prune splits pins (by version, then by when taken) into those to keep
// and those no longer needed: every pin older than the newest usable one
// (version at most durable), and every pin that a newer pin of the same
// version replaces (the newer snapshot holds back less). Leased pins are
// always kept.
func prune(pins []*Pin, durable uint64, leased map[*Pin]bool) (keep, drop []*Pin) {
	usable := -1
	for i, pin := range pins {
		if pin.Version <= durable {
			usable = i
		}
	}
	for i, pin := range pins {
		older := i < usable
		replaced := i+1 < len(pins) && pins[i+1].Version == pin.Version
		if (older || replaced) && !leased[pin] {
			drop = append(drop, pin)
		} else {
			keep = append(keep, pin)
		}
	}
	return keep, drop
}

// newestCandidate is the newest pin not yet usable nor leased; nil if
// none.
func newestCandidate(pins []*Pin, durable uint64, leased map[*Pin]bool) *Pin {
	for _, pin := range slices.Backward(pins) {
		if pin.Version > durable && !leased[pin] {
			return pin
		}
	}
	return nil
}

// makeRoom picks the pin to drop when every connection holds one and a
// new candidate is due: the newest candidate (not yet usable, not
// leased), if another candidate older than it stays; nil otherwise, and
// no candidate is taken. The oldest candidate is the next to become
// usable: replacing it at every Interval would never let the usable pin
// move while durability lags more than one Interval.
func makeRoom(pins []*Pin, durable uint64, leased map[*Pin]bool) *Pin {
	var candidates []*Pin
	for _, pin := range pins {
		if pin.Version > durable && !leased[pin] {
			candidates = append(candidates, pin)
		}
	}
	if len(candidates) < 2 {
		return nil
	}
	return candidates[len(candidates)-1]
}

// Close releases every pin and closes the connections; a leased pin is
// released when it is returned, since a rewind may be reading through it.
func (p *Pins) Close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	leased := p.pins[:0]
	for _, pin := range p.pins {
		if p.leased[pin] {
			leased = append(leased, pin)
		} else {
			p.drop = append(p.drop, pin)
		}
	}
	p.pins = leased
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.releaseDropped(ctx)
	for _, c := range idle {
		c.Close(ctx)
	}
}
