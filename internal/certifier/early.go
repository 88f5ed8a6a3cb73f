package certifier

import (
	"cmp"
	"context"
	"runtime"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Early delivery (Eventual Durability, Kashi, §3.7: early visibility)
// sends entries to replicas at their commit point, the certifier's
// decision, rather than at their durability point. A single certifier
// puts what it decides into the recent ring and marks it deliverable
// (Service.deliverable) as it decides it (deliverDecided), so an entry
// waits for no write, neither its own nor the one in progress.
//
// An entry delivered early may fail: if the certifier dies before it is
// durable, its version is certified again, for another transaction, by
// the certifier's next generation. Replicas that applied it hold a
// history that is not a prefix of the log any more, which admission finds
// by the entries' epochs (Admit). So that undoing such a suffix is a
// matter of rows, the entries that write a whole table or the schema
// (TRUNCATE, DDL: barriers) and streamed spans are delivered only once
// durable, and nothing after them before they are (earlyStops). So is an
// entry the recent ring cannot hold without dropping one not yet
// durable: delivery reads what the ring lacks from the log.
//
// A stream takes entries early if it asks (OpenSession.early_delivery),
// and then its commit replies too, once their entries are sent: the
// commit point. Config.UnsafeDeliverBeforeDurable makes every stream take
// entries early with replies still sent once durable: it lets the fault
// tests produce replicas that hold failed versions. The agents of mode ed
// ask for early delivery. A certifier group's leader delivers early the
// same way (group_early.go).

// delivery is what a stream takes before it is durable.
type delivery struct {
	push         bool // every entry, not only with replies (OpenSession.push)
	earlyEntries bool
	earlyReplies bool
}

func (s *Service) deliveryOf(open *pb.OpenSession) delivery {
	early := open.GetEarlyDelivery()
	return delivery{push: open.GetPush(), earlyEntries: early || s.cfg.UnsafeDeliverBeforeDurable, earlyReplies: early}
}

// warnOneThread says once that a stream takes the commit point from a
// certifier running one Go thread: a log flush holds that thread, so a
// commit arriving during it is decided, and answered, once it returns.
func (s *Service) warnOneThread(d delivery) {
	if d.earlyReplies && runtime.GOMAXPROCS(0) == 1 {
		s.oneThread.Do(func() {
			s.cfg.Logger.Warn("a replica takes the commit point (mode ed), but this certifier runs one Go thread: " +
				"a commit that arrives while the log is flushed waits for the flush; run it with --max-procs 2 or more")
		})
	}
}

// repliesBound is the highest version a stream's replies may depend on
// now: through, the entries it may be sent, if it takes replies early.
func (d delivery) repliesBound(durable, through uint64) uint64 {
	if d.earlyReplies {
		return through
	}
	return durable
}

// durableNewsDue reports whether a stream that takes entries early must
// be sent a message that only names the durable version: it holds entries
// that became durable since its last message named the durable version,
// and nothing else is about to go out. Its replica waits for that news:
// settlements of re-sent calls, and the safe commits waiting for
// durability.
func (d delivery) durableNewsDue(sendable int, delivered, durable, durableSent uint64) bool {
	return d.earlyEntries && sendable == 0 && durable > durableSent && delivered > durableSent
}

// awaitDeliveredTail waits, before a stream is admitted, until the
// versions its replica holds that this process delivered early are
// durable: they are the log's tail, at most two writes away (the one in
// flight and their own), not failed
// versions. A replica reopening its stream (a dropped connection, a new
// agent run) would otherwise be judged against the durable version alone
// and told to rewind what the log is about to hold.
//
// The wait ends with the stream or with lifetime (a group member's
// leadership: its speculative versions may then never be durable).
func (s *Service) awaitDeliveredTail(ctx, lifetime context.Context, version uint64) error {
	tail := min(version, s.deliverable.get())
	if tail <= s.DurableVersion() {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(lifetime, cancel)()
	defer cancel()
	if _, err := s.durable.wait(ctx, tail); err != nil {
		return status.Errorf(codes.Unavailable, "waiting for the versions the replica holds to be durable: %v", err)
	}
	return nil
}

// earlyStops are where early delivery stops among the versions decided
// and not yet durable: barriers, the first versions of spans, and entries
// the recent ring could not take (recentEntries.add), each until it is
// durable; and on a group's leader, versions the ring lacks below what it
// decided, until all of them are (groupMember.deliverDecided). Guarded by
// singleLog.mu, or groupEarly.mu.
type earlyStops struct {
	stops   []earlyStop // ascending by at
	decided uint64      // the last version decided
}

// earlyStop holds delivery before version at until version until is
// durable.
type earlyStop struct{ at, until uint64 }

// through is the last version that may be delivered before it is
// durable: the last decided, or the last before the first stop.
func (e *earlyStops) through() uint64 {
	if len(e.stops) > 0 {
		return min(e.decided, e.stops[0].at-1)
	}
	return e.decided
}

// passed forgets the first stops that durable passed.
func (e *earlyStops) passed(durable uint64) {
	n := 0
	for n < len(e.stops) && e.stops[n].until <= durable {
		n++
	}
	e.stops = e.stops[:copy(e.stops, e.stops[n:])]
}

// add takes the stops of what a call of decide committed, up to last;
// every stop of an earlier call is below these.
func (e *earlyStops) add(stops []uint64, last uint64) {
	mark := len(e.stops)
	for _, v := range stops {
		e.stops = append(e.stops, earlyStop{at: v, until: v})
	}
	slices.SortFunc(e.stops[mark:], func(a, b earlyStop) int { return cmp.Compare(a.at, b.at) })
	e.decided = max(e.decided, last)
}

// addGap holds delivery before version from until every version up to
// until is durable; it comes before the stops of the same call, and
// starts after those of earlier calls (the versions an earlier call's
// stops hold are already held back).
func (e *earlyStops) addGap(from, until uint64) {
	if n := len(e.stops); n > 0 {
		from = max(from, e.stops[n-1].until+1)
	}
	if from <= until {
		e.stops = append(e.stops, earlyStop{at: from, until: until})
	}
}

// batchStops appends to stops where early delivery stops in a decided
// batch: the barriers it committed and the first versions of its spans.
func batchStops(batch []certifying, stops []uint64) []uint64 {
	stops = committedBarriers(batch, stops)
	for i := range batch {
		c := &batch[i]
		if c.reply == nil && !c.lookedUp() && c.req.Streamed != nil && c.outcome.Decision == certification.Commit && !c.outcome.Duplicate {
			stops = append(stops, c.outcome.FirstVersion)
		}
	}
	return stops
}

// committedBarriers appends to barriers the versions a decided batch
// committed barrier entries at. Spans are not among them: their first
// versions stop early delivery on their own (batchStops).
func committedBarriers(batch []certifying, barriers []uint64) []uint64 {
	for i := range batch {
		c := &batch[i]
		if c.barrier && c.reply == nil && !c.lookedUp() && c.req.Streamed == nil &&
			c.outcome.Decision == certification.Commit && !c.outcome.Duplicate {
			barriers = append(barriers, c.outcome.CommitVersion)
		}
	}
	return barriers
}

// deliverDecided puts the entries decide just committed into the recent
// ring and lets the streams that take entries early have them, up to the
// first stop. It runs under l.mu, so entries reach the ring in version
// order.
func (l *singleLog) deliverDecided(batch []certifying, entries []logentry.Entry, spans []committedSpan) {
	if len(entries) == 0 && len(spans) == 0 {
		return
	}
	stops, last := l.s.addDecided(entries, nil)
	if len(spans) > 0 {
		last = max(last, spans[len(spans)-1].last)
	}
	l.stops.add(batchStops(batch, stops), last)
	l.s.advanceDeliverable(l.stops.through())
}

// addDecided puts entries just decided into the recent ring, in version
// order, and returns stops with the versions the ring refused appended
// (recentEntries.add), and the last version of entries.
func (s *Service) addDecided(entries []logentry.Entry, stops []uint64) ([]uint64, uint64) {
	durable := s.DurableVersion()
	last := uint64(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range entries {
		if !s.recent.add(e, durable) {
			stops = append(stops, e.Version)
		}
		last = e.Version
	}
	return stops, last
}

// advanceDeliverable lets the streams that take entries early have the
// versions up to through, if there are such streams: a stream opening
// meanwhile starts at the durable version.
func (s *Service) advanceDeliverable(through uint64) {
	if s.earlyStreams.Load() > 0 {
		s.deliverable.advance(through)
	}
}

// deliverPassed lets the streams that take entries early have what the
// stops the log just made durable held back.
func (l *singleLog) deliverPassed() {
	l.mu.Lock()
	l.stops.passed(l.s.DurableVersion())
	through := l.stops.through()
	l.mu.Unlock()
	l.s.deliverable.advance(through)
}
