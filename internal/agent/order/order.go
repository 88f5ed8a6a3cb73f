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
// A streamed transaction commits as a span: consecutive versions
// span_first..span_last, one entry per fragment of its writeset
// (certifierpb.LogEntry), committed by one database transaction. A local
// span's entries are not kept (its backend has the rows). A remote span
// goes to the applier as it is delivered, one fragment per batch, never
// mixed with versions outside it: the applier keeps the span's
// transaction open across its batches and commits it with the batch that
// ends the span. The bytes of a fragment are let go once its batch is
// applied, so a span larger than the backlog bound flows through it. The
// committed version, the holds and the versions handed to Inherit are
// never inside a span. Since a span's fragments are not kept once
// applied, a span cannot be applied again within a run: when a local span
// is abandoned, or a version before a span whose transaction is open (the
// open transaction keeps the applier from it), Abandon asks the agent to
// start a new run (Restart), which delivers everything again from the
// database's version.
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
	round     uint64
	inherited bool
	spanFirst uint64 // a span's first version; 0: not a span
}

// Version is the version delivered for the transaction, 0 until then;
// for a span, its last version, from the delivery of its first entry.
func (l *Local) Version() uint64 { return l.version }

// Inherited reports whether a backend held the version when the agent
// started (Inherit).
func (l *Local) Inherited() bool { return l.inherited }

// Batch is a run of consecutive remote versions the applier commits in
// one transaction, or one fragment of a span.
type Batch struct {
	First, Last uint64
	Entries     []logentry.Entry
	// SpanFirst and SpanLast are the span the batch is part of (both 0:
	// none). The span's batches come in version order, one at a time: the
	// one that begins the span begins its database transaction, the one
	// that ends it commits it; none is mixed with versions outside it.
	SpanFirst, SpanLast uint64
}

// BeginsSpan reports whether the batch is the first of a span.
func (b *Batch) BeginsSpan() bool { return b.SpanFirst != 0 && b.First == b.SpanFirst }

// EndsSpan reports whether the batch is the last of a span.
func (b *Batch) EndsSpan() bool { return b.SpanFirst != 0 && b.Last == b.SpanLast }

// InSpan reports whether the batch is part of a span.
func (b *Batch) InSpan() bool { return b.SpanFirst != 0 }

// Abandonment is what the agent must do after Abandon.
type Abandonment uint8

const (
	// Nothing: the applier applies the abandoned version in its turn.
	Nothing Abandonment = iota
	// Cancel the batch in flight (CancelWanted): it starts after the
	// abandoned version, which the applier must apply first.
	Cancel
	// Restart: end the run; the next delivers again from the database's
	// version. A local span was abandoned (its entries were not kept), or
	// a version before a span whose transaction the applier holds open
	// (its fragments applied so far are not kept either).
	Restart
)

type slot struct {
	entry               logentry.Entry // Bytes nil: not kept (a local span, a fragment applied)
	local               *Local         // nil: remote
	spanFirst, spanLast uint64
}

// spanRange is a range of versions of one streamed transaction.
type spanRange struct{ first, last uint64 }

func (s spanRange) contains(v uint64) bool { return s.first != 0 && s.first <= v && v <= s.last }

// openSpan is a remote span whose database transaction the applier holds
// open: versions first..applied ran in it.
type openSpan struct {
	spanRange
	applied uint64
}

// Order is the commit order of one replica as its agent sees it.
type Order struct {
	origin    string
	round     uint64
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
	// delivering is the span whose last entry is not delivered yet, and
	// its Local (nil: remote).
	delivering      spanRange
	deliveringLocal *Local
	open            *openSpan // nil: no span's transaction is open
	restart         bool      // Abandon asked for a new run
	// localThrough: every delivered version from committed+1 up to here
	// is local (firstRemote's scan starts after it). Between two reads of
	// the database's version, a replica whose commits are all its own
	// delivers hundreds of local versions, and Next runs at every change.
	localThrough uint64
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
// the reset are ignored (Round).
func (o *Order) Reset(committed uint64) {
	o.round++
	o.committed, o.delivered = committed, committed
	o.slots = make(map[uint64]slot)
	o.pending = make(map[uint64]*Local)
	o.inherited = make(map[uint64]*Local)
	o.inFlight, o.cancel = nil, false
	o.waitingBytes, o.decisionAwaited = 0, false
	o.delivering, o.deliveringLocal, o.open, o.restart = spanRange{}, nil, nil, false
	o.localThrough = committed
}

// Round counts resets. A stream opened in round r delivers with r.
func (o *Order) Round() uint64 { return o.round }

// Committed is the highest version known committed in the database.
func (o *Order) Committed() uint64 { return o.committed }

// Delivered is the highest version delivered.
func (o *Order) Delivered() uint64 { return o.delivered }

// Register announces a transaction of a backend before it is sent for
// certification with sequence number seq.
func (o *Order) Register(seq uint64) *Local {
	l := &Local{seq: seq, round: o.round}
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
	l := &Local{version: v, round: o.round, inherited: true}
	o.inherited[v] = l
	return l
}

// Deliver records entries from a stream opened at round, in version
// order. Entries at or below the delivered version are delivered again
// after a reconnection and ignored.
func (o *Order) Deliver(round uint64, entries []logentry.Entry) error {
	if round != o.round {
		return nil
	}
	for _, e := range entries {
		if e.Version <= o.delivered {
			continue
		}
		if e.Version != o.delivered+1 {
			panic(fmt.Sprintf("order: version %d delivered after %d", e.Version, o.delivered))
		}
		if err := o.deliverOne(e); err != nil {
			return err
		}
	}
	return nil
}

func (o *Order) deliverOne(e logentry.Entry) error {
	first, last, err := logentry.SpanOf(e.Bytes)
	if err != nil {
		return fmt.Errorf("order: entry %d: %w", e.Version, err)
	}
	sp := spanRange{first, last}
	if err := o.checkSpan(e.Version, sp); err != nil {
		return err
	}
	local := o.deliveringLocal
	if e.Version == first || first == 0 {
		if local, err = o.ownerOf(e, sp); err != nil {
			return err
		}
	}
	o.delivered = e.Version
	s := slot{entry: e, local: local, spanFirst: first, spanLast: last}
	switch {
	case local != nil && first != 0:
		local.version, local.spanFirst = last, first
		s.entry.Bytes = nil // the backend has the rows
	case local != nil:
		local.version = e.Version
	}
	o.slots[e.Version] = s
	o.waitingBytes += len(s.entry.Bytes)
	if first != 0 && e.Version < last {
		o.delivering, o.deliveringLocal = sp, local
	} else {
		o.delivering, o.deliveringLocal = spanRange{}, nil
	}
	return nil
}

// checkSpan checks that version v, of span sp, comes where it may: a
// span's entries in a row from its first, nothing else in between.
func (o *Order) checkSpan(v uint64, sp spanRange) error {
	switch {
	case sp.first != 0 && !sp.contains(v):
		return fmt.Errorf("order: entry %d is outside its span %d..%d", v, sp.first, sp.last)
	case o.delivering.first != 0 && sp != o.delivering:
		return fmt.Errorf("order: entry %d (span %d..%d) delivered inside span %d..%d", v, sp.first, sp.last, o.delivering.first, o.delivering.last)
	case o.delivering.first == 0 && sp.first != 0 && v != sp.first:
		return fmt.Errorf("order: entry %d delivered without the first entries of its span %d..%d", v, sp.first, sp.last)
	}
	return nil
}

// ownerOf finds the Local an entry (the first of span sp, if it is one)
// belongs to, nil if it is remote.
func (o *Order) ownerOf(e logentry.Entry, sp spanRange) (*Local, error) {
	held := e.Version
	if sp.first != 0 {
		held = sp.last
	}
	if l, ok := o.inherited[held]; ok {
		delete(o.inherited, held)
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
// version becomes remote. It reports what the agent must do: Cancel the
// batch in flight when it starts after the abandoned version, which the
// applier must apply first (Tashkent §8.1); Restart when the version
// cannot be applied in this run (see the package comment).
func (o *Order) Abandon(l *Local) Abandonment {
	if l.round != o.round {
		return Nothing
	}
	if l.version == 0 {
		delete(o.pending, l.seq)
		return Nothing
	}
	if l.inherited && o.inherited[l.version] == l {
		delete(o.inherited, l.version)
		return Nothing
	}
	if l.version <= o.committed {
		return Nothing
	}
	if l.spanFirst != 0 {
		return o.askRestart()
	}
	s, ok := o.slots[l.version]
	if !ok || s.local != l {
		return Nothing // abandoned before
	}
	o.slots[l.version] = slot{entry: s.entry}
	o.localThrough = min(o.localThrough, l.version-1)
	if o.open != nil && l.version < o.open.first {
		return o.askRestart()
	}
	if o.inFlight != nil && l.version < o.inFlight.First && !o.cancel {
		o.cancel = true
		return Cancel
	}
	return Nothing
}

// askRestart records that the run must end; Restart the first time.
func (o *Order) askRestart() Abandonment {
	if o.restart {
		return Nothing
	}
	o.restart = true
	return Restart
}

// RestartWanted reports whether Abandon asked for a new run: until Reset,
// no batch is planned.
func (o *Order) RestartWanted() bool { return o.restart }

// Next returns the next batch for the applier and marks it in flight: the
// lowest remote version above the committed one and the remote versions
// right after it, at most max; or the next fragment of a remote span,
// alone. It returns nil while a batch is in flight, when no remote
// version waits, and once a restart is wanted.
func (o *Order) Next(max int) *Batch {
	if o.inFlight != nil || max < 1 || o.restart {
		return nil
	}
	if o.open != nil {
		return o.planFragment(o.open.applied + 1)
	}
	first := o.firstRemote()
	if first == 0 {
		return nil
	}
	if s := o.slots[first]; s.spanFirst != 0 {
		if !o.mayPass(s.spanLast) {
			return nil // a span passes whole or not at all
		}
		return o.planFragment(first)
	}
	if !o.mayPass(first) {
		return nil
	}
	b := &Batch{First: first}
	for v := first; v <= o.delivered && len(b.Entries) < max && o.mayPass(v); v++ {
		s := o.slots[v]
		if s.local != nil || s.spanFirst != 0 {
			break
		}
		b.Entries = append(b.Entries, s.entry)
		b.Last = v
	}
	o.inFlight, o.cancel = b, false
	return b
}

// planFragment plans version v, a fragment of a remote span, alone: one
// fragment (up to a few MiB) is what the applier holds decoded at a time.
func (o *Order) planFragment(v uint64) *Batch {
	if v > o.delivered {
		return nil
	}
	s := o.slots[v]
	b := &Batch{First: v, Last: v, Entries: []logentry.Entry{s.entry}, SpanFirst: s.spanFirst, SpanLast: s.spanLast}
	o.inFlight, o.cancel = b, false
	return b
}

// firstRemote is the lowest delivered remote version above the
// committed one, 0 if none.
func (o *Order) firstRemote() uint64 {
	for v := max(o.committed, o.localThrough) + 1; v <= o.delivered; v++ {
		if o.slots[v].local == nil {
			o.localThrough = v - 1
			return v
		}
	}
	o.localThrough = o.delivered
	return 0
}

// Hold holds the applier after version v, or after the highest version
// already under way if that is later (committed, or in the batch in
// flight, or the span under way), and returns that version: no batch
// planned from now goes past it, until Release. A hold inside a span
// known to the order moves to the span's last version; one inside a span
// not delivered yet keeps that span from starting. Local versions after
// it are held in the extension (hold.c), not here. A hold only moves
// forward. It lets a snapshot hold exactly one version on every replica
// (tashkent verify).
func (o *Order) Hold(v uint64) uint64 {
	h := max(v, o.committed, o.hold)
	if b := o.inFlight; b != nil {
		h = max(h, b.Last, b.SpanLast)
	}
	if o.open != nil {
		h = max(h, o.open.last)
	}
	if sp := o.spanAt(h); sp.first != 0 {
		h = sp.last
	}
	o.hold = h
	return h
}

// spanAt is the span known to hold version v, if any.
func (o *Order) spanAt(v uint64) spanRange {
	if s, ok := o.slots[v]; ok && s.spanFirst != 0 {
		return spanRange{s.spanFirst, s.spanLast}
	}
	if o.delivering.contains(v) {
		return o.delivering
	}
	return spanRange{}
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

// Done ends the batch in flight: applied or not (it is planned again).
// An applied batch that is no span's, or ends one, committed: every
// version up to its last is committed, the local ones before it
// included, since it had the turn. An applied batch inside a span ran in
// the span's open transaction: its bytes are let go, and the span's next
// fragment is planned next. A span batch not applied is planned again:
// the applier has rolled back what it did (only that batch, inside an
// open span; the caller ends the run if it lost the span's transaction
// instead).
func (o *Order) Done(applied bool) {
	b := o.inFlight
	if b == nil {
		panic("order: Done without a batch in flight")
	}
	cancelled := o.cancel
	o.inFlight, o.cancel, o.decisionAwaited = nil, false, false
	switch {
	case !applied:
	case b.InSpan() && !b.EndsSpan():
		o.applyInSpan(b)
		if cancelled {
			// It ran to its end before the cancel reached it (it does not
			// wait for a turn): its open transaction now keeps the applier
			// from the abandoned version before it.
			o.restart = true
		}
	default:
		o.open = nil
		o.advance(b.Last)
	}
}

// applyInSpan records that b ran in its span's open transaction.
func (o *Order) applyInSpan(b *Batch) {
	if o.open == nil {
		o.open = &openSpan{spanRange: spanRange{b.SpanFirst, b.SpanLast}}
	}
	o.open.applied = b.Last
	for v := b.First; v <= b.Last; v++ {
		s := o.slots[v]
		o.waitingBytes -= len(s.entry.Bytes)
		s.entry.Bytes = nil
		o.slots[v] = s
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
	if sp := o.spanAt(to); sp.first != 0 && to != sp.last {
		panic(fmt.Sprintf("order: version %d committed inside span %d..%d", to, sp.first, sp.last))
	}
	if o.open != nil && to >= o.open.last {
		o.open = nil // committed by another: the applier's transaction fails
	}
	if to >= o.delivering.last {
		o.delivering, o.deliveringLocal = spanRange{}, nil
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

// RemoteWaiting counts the delivered remote transactions not committed
// yet, a span as one: the applier's backlog (local versions are committed
// by their backends).
func (o *Order) RemoteWaiting() int {
	n := 0
	for v, s := range o.slots {
		if s.local == nil && (s.spanFirst == 0 || v == s.spanFirst) {
			n++
		}
	}
	return n
}

// Applied is the highest version the applier's work has reached: the
// committed version, or the last applied in the span whose transaction
// is open. It moves while a long span is applied.
func (o *Order) Applied() uint64 {
	if o.open != nil {
		return o.open.applied
	}
	return o.committed
}
