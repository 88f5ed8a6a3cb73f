// Package order is the agent's account of its replica's commit order
// (Tashkent §6.2, steps C4 and C5): which delivered versions the replica's
// own backends commit (local) and which the agent applies (remote), and
// which run of remote versions the applier sends next.
//
// The certifier delivers every version to every replica, in order, before
// the reply that depends on it. A version is local when its transaction id
// is one a live backend of this agent asked for (Register), or one a
// backend already held when the agent started (Inherit); every other
// version is remote. The extension keeps the order itself: each commit
// waits in shared memory until the version before it is visible. So the
// agent does not wait for local versions before it applies remote ones.
// It pipelines: the next run of consecutive remote versions goes to the
// applier as one transaction as soon as it is delivered, and that
// transaction waits inside PostgreSQL for its turn while its writes
// overlap the commits before it. One batch is in flight at a time.
//
// A local version whose backend will not commit it after all (it aborted
// after certification, or its socket closed) is abandoned and becomes
// remote: the replica never skips a version (soft recovery, Tashkent
// §8.1). If a batch in flight starts after it, that batch can never get
// its turn (the applier is the one that must apply the abandoned version,
// and it is busy): Abandon reports that the batch must be cancelled, and
// the next batch starts at the abandoned version.
//
// Order is a deterministic state machine: no I/O, no clock, no goroutines,
// no locks. Its caller serializes calls and does what the results say.
package order

import (
	"fmt"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Local is a version one of the replica's backends commits itself. Its
// version is 0 until its entry is delivered.
type Local struct {
	seq       uint64 // the transaction id's sequence number; 0 if inherited
	version   uint64
	epoch     uint64
	inherited bool
}

// Version is the version delivered for the transaction, 0 until then.
func (l *Local) Version() uint64 { return l.version }

// Inherited reports whether a backend held the version when the agent
// started (Inherit).
func (l *Local) Inherited() bool { return l.inherited }

// Batch is a run of consecutive remote versions the applier commits in
// one transaction.
type Batch struct {
	First, Last uint64
	Entries     []logentry.Entry
}

type slot struct {
	entry logentry.Entry
	local *Local // nil: remote
}

// Order is the commit order of one replica as its agent sees it.
type Order struct {
	origin    string
	epoch     uint64
	committed uint64            // every version up to here is committed in the database
	delivered uint64            // the highest version delivered
	slots     map[uint64]slot   // delivered versions above committed
	pending   map[uint64]*Local // registered, not delivered, by sequence number
	inherited map[uint64]*Local // inherited, not delivered, by version
	inFlight  *Batch
	cancel    bool // the batch in flight waits behind an abandoned version
	// hold: no batch goes past it while it is set (0: none); see Hold.
	hold uint64
	// waitingBytes are the encoded bytes of the delivered versions above
	// committed (slots).
	waitingBytes int
	// decisionAwaited: the batch in flight waits for a row lock of a
	// backend whose certification is not decided yet (AwaitDecision).
	decisionAwaited bool
}

// New starts the order after version committed (the database's
// tashkent.committed_version()). origin names this run of the agent, as in
// the transaction ids it sends.
func New(origin string, committed uint64) *Order {
	o := &Order{origin: origin}
	o.Reset(committed)
	return o
}

// Reset starts the order again after version committed, read back from a
// database that restarted: everything above it is delivered again, every
// Local of before is forgotten, and deliveries of streams opened before
// the reset are ignored (Epoch).
func (o *Order) Reset(committed uint64) {
	o.epoch++
	o.committed, o.delivered = committed, committed
	o.slots = make(map[uint64]slot)
	o.pending = make(map[uint64]*Local)
	o.inherited = make(map[uint64]*Local)
	o.inFlight, o.cancel = nil, false
	o.waitingBytes, o.decisionAwaited = 0, false
}

// Epoch counts resets. A stream opened at epoch e delivers with e.
func (o *Order) Epoch() uint64 { return o.epoch }

// Committed is the highest version known committed in the database.
func (o *Order) Committed() uint64 { return o.committed }

// Delivered is the highest version delivered.
func (o *Order) Delivered() uint64 { return o.delivered }

// Register announces a transaction of a backend before it is sent for
// certification with sequence number seq.
func (o *Order) Register(seq uint64) *Local {
	l := &Local{seq: seq, epoch: o.epoch}
	o.pending[seq] = l
	return l
}

// Inherit records that a backend held version v, certified before the
// agent started, when the agent found it (Tashkent §7.2): it commits v
// itself unless it gives up (Abandon). It must come before v is
// delivered. It returns nil if v is committed already.
func (o *Order) Inherit(v uint64) *Local {
	if v <= o.committed {
		return nil
	}
	if v <= o.delivered {
		panic(fmt.Sprintf("order: version %d inherited after it was delivered (delivered %d)", v, o.delivered))
	}
	l := &Local{version: v, epoch: o.epoch, inherited: true}
	o.inherited[v] = l
	return l
}

// Deliver records entries from a stream opened at epoch, in version
// order. Entries at or below the delivered version are delivered again
// after a reconnection and ignored.
func (o *Order) Deliver(epoch uint64, entries []logentry.Entry) error {
	if epoch != o.epoch {
		return nil
	}
	for _, e := range entries {
		if e.Version <= o.delivered {
			continue
		}
		if e.Version != o.delivered+1 {
			panic(fmt.Sprintf("order: version %d delivered after %d", e.Version, o.delivered))
		}
		local, err := o.ownerOf(e)
		if err != nil {
			return err
		}
		o.delivered = e.Version
		if local != nil {
			local.version = e.Version
		}
		o.slots[e.Version] = slot{entry: e, local: local}
		o.waitingBytes += len(e.Bytes)
	}
	return nil
}

// ownerOf finds the Local an entry belongs to, nil if it is remote.
func (o *Order) ownerOf(e logentry.Entry) (*Local, error) {
	if l, ok := o.inherited[e.Version]; ok {
		delete(o.inherited, e.Version)
		return l, nil
	}
	h, err := logentry.RawHeaderOf(e.Bytes)
	if err != nil {
		return nil, fmt.Errorf("order: entry %d: %w", e.Version, err)
	}
	if string(h.Origin) != o.origin {
		return nil, nil
	}
	l, ok := o.pending[h.Seq]
	if !ok {
		return nil, nil
	}
	delete(o.pending, h.Seq)
	return l, nil
}

// Abandon withdraws a Local: its backend will not commit it. Not yet
// delivered, it is forgotten (its entry will be remote); delivered, its
// version becomes remote. It reports whether the batch in flight must be
// cancelled: it starts after the abandoned version, which the applier
// must apply first (Tashkent §8.1).
func (o *Order) Abandon(l *Local) (cancel bool) {
	if l.epoch != o.epoch {
		return false
	}
	if l.version == 0 {
		delete(o.pending, l.seq)
		return false
	}
	if l.inherited && o.inherited[l.version] == l {
		delete(o.inherited, l.version)
		return false
	}
	s, ok := o.slots[l.version]
	if !ok || s.local != l {
		return false // committed already, or abandoned before
	}
	o.slots[l.version] = slot{entry: s.entry}
	if o.inFlight != nil && l.version < o.inFlight.First && !o.cancel {
		o.cancel = true
		return true
	}
	return false
}

// Next returns the next batch for the applier and marks it in flight: the
// lowest remote version above the committed one and the remote versions
// right after it, at most max. It returns nil while a batch is in flight
// or when no remote version waits.
func (o *Order) Next(max int) *Batch {
	if o.inFlight != nil || max < 1 {
		return nil
	}
	first := o.firstRemote()
	if first == 0 || !o.mayPass(first) {
		return nil
	}
	b := &Batch{First: first}
	for v := first; v <= o.delivered && len(b.Entries) < max && o.mayPass(v); v++ {
		s := o.slots[v]
		if s.local != nil {
			break
		}
		b.Entries = append(b.Entries, s.entry)
		b.Last = v
	}
	o.inFlight, o.cancel = b, false
	return b
}

func (o *Order) firstRemote() uint64 {
	for v := o.committed + 1; v <= o.delivered; v++ {
		if o.slots[v].local == nil {
			return v
		}
	}
	return 0
}

// Hold holds the applier after version v, or after the highest version
// already under way if that is later (committed, or in the batch in
// flight), and returns that version: no batch planned from now goes past
// it, until Release. Local versions after it are held in the extension
// (hold.c), not here. A hold only moves forward. It lets a snapshot hold
// exactly one version on every replica (tashkent verify).
func (o *Order) Hold(v uint64) uint64 {
	h := max(v, o.committed, o.hold)
	if o.inFlight != nil {
		h = max(h, o.inFlight.Last)
	}
	o.hold = h
	return h
}

// Release ends the hold.
func (o *Order) Release() { o.hold = 0 }

func (o *Order) mayPass(v uint64) bool { return o.hold == 0 || v <= o.hold }

// InFlight is the batch in flight, nil if none.
func (o *Order) InFlight() *Batch { return o.inFlight }

// CancelWanted reports whether the batch in flight must be cancelled
// (Abandon said so) and has not ended yet: the caller cancels it until it
// does, as a cancel that reaches the applier between statements is lost.
func (o *Order) CancelWanted() bool { return o.inFlight != nil && o.cancel }

// Done ends the batch in flight: committed (every version up to its last
// is committed, the local ones before it included, since it had the
// turn), or not (it is planned again).
func (o *Order) Done(committed bool) {
	b := o.inFlight
	if b == nil {
		panic("order: Done without a batch in flight")
	}
	o.inFlight, o.cancel, o.decisionAwaited = nil, false, false
	if committed {
		o.advance(b.Last)
	}
}

// Observe takes a committed version read from the database: versions up
// to it are committed, whoever committed them. A value below the one
// known is a read older than the knowledge and changes nothing; whether
// the database went back (it lost commits) is for the caller to tell, by
// comparing what it read with Committed taken before it asked.
func (o *Order) Observe(committed uint64) {
	o.advance(committed)
}

func (o *Order) advance(to uint64) {
	if to <= o.committed {
		return
	}
	for v := o.committed + 1; v <= to && v <= o.delivered; v++ {
		o.waitingBytes -= len(o.slots[v].entry.Bytes)
		delete(o.slots, v)
	}
	for v := range o.inherited {
		if v <= to {
			delete(o.inherited, v)
		}
	}
	o.committed = to
	if o.delivered < to {
		o.delivered = to // the stream goes on from there
	}
}

// WaitingBytes are the encoded bytes of the delivered versions not
// committed yet: what the agent holds in memory for them.
func (o *Order) WaitingBytes() int { return o.waitingBytes }

// Full reports whether more than max bytes of delivered versions wait and
// the applier can make room without another delivery. It cannot while
// its batch waits for a row lock of a backend whose certification is
// still undecided (AwaitDecision): that decision comes on the stream,
// after entries a delivery that waits would never hand over. (A local
// version's own decision needs no later message: the certifier client
// answers it as soon as its entry is delivered.)
func (o *Order) Full(max int) bool {
	return o.waitingBytes > max && !o.decisionAwaited
}

// AwaitDecision records that the batch in flight waits for a backend whose
// certification is not decided yet; Done and Reset clear it.
func (o *Order) AwaitDecision() { o.decisionAwaited = o.inFlight != nil }

// IsLocal reports whether version v is delivered, uncommitted and local.
func (o *Order) IsLocal(v uint64) bool {
	s, ok := o.slots[v]
	return ok && s.local != nil
}

// Waiting counts the delivered versions not committed yet.
func (o *Order) Waiting() int { return len(o.slots) }

// RemoteWaiting counts the delivered remote versions not committed yet:
// the applier's backlog (local versions are committed by their backends).
func (o *Order) RemoteWaiting() int {
	n := 0
	for _, s := range o.slots {
		if s.local == nil {
			n++
		}
	}
	return n
}
