package certifier

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Early delivery (Eventual Durability, Kashi, §3.7: early visibility)
// sends entries to replicas at their commit point, the certifier's
// decision, rather than at their durability point. A single certifier's
// writer marks the entries of the batch it takes deliverable just before
// it writes them (Service.deliverable), so an entry waits at most for the
// write in progress when it was decided, not for its own.
//
// An entry delivered early may fail: if the certifier dies before it is
// durable, its version is certified again, for another transaction, by
// the certifier's next generation. Replicas that applied it hold a
// history that is not a prefix of the log any more, which admission finds
// by the entries' epochs (Admit). So that undoing such a suffix is a
// matter of rows, the entries that write a whole table or the schema
// (TRUNCATE, DDL: barriers) and streamed spans are delivered only once
// durable, and nothing after them before they are.
//
// A stream takes entries early if it asks (OpenSession.early_delivery),
// and then its commit replies too, once their entries are sent: the
// commit point. Config.UnsafeDeliverBeforeDurable makes every stream take
// entries early with replies still sent once durable: it lets the fault
// tests produce replicas that hold failed versions. The agents of mode ed
// ask for early delivery; a certifier group refuses it.

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
// durable: they are the log's tail, at most one write away, not failed
// versions. A replica reopening its stream (a dropped connection, a new
// agent run) would otherwise be judged against the durable version alone
// and told to rewind what the log is about to hold.
func (s *Service) awaitDeliveredTail(ctx context.Context, version uint64) error {
	tail := min(version, s.deliverable.get())
	if tail <= s.DurableVersion() {
		return nil
	}
	if _, err := s.durable.wait(ctx, tail); err != nil {
		return status.Errorf(codes.Unavailable, "waiting for the versions the replica holds to be durable: %v", err)
	}
	return nil
}

// committedBarriers appends to barriers the versions a decided batch
// committed barrier entries at, in version order. Spans are left out: the
// writer writes and syncs each span on its own (writeInOrder).
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

// deliverableThrough is the last version of entries (in version order)
// that may be delivered before it is durable: the last one before the
// first barrier among them (barriers in version order), or all of them.
func deliverableThrough(entries []logentry.Entry, barriers []uint64) uint64 {
	first, last := entries[0].Version, entries[len(entries)-1].Version
	for _, b := range barriers {
		if b >= first && b <= last {
			return b - 1
		}
	}
	return last
}

// deliverEarly marks entries, just put into the recent ring, deliverable
// to the streams that take entries before they are durable. Entries the
// ring cannot hold all at once are left to be delivered once durable:
// delivery reads what the ring lacks from the log, where they are not yet.
func (l *singleLog) deliverEarly(entries []logentry.Entry, barriers []uint64) {
	s := l.s
	if len(entries) > s.cfg.RecentEntriesMax {
		return
	}
	s.deliverable.advance(deliverableThrough(entries, barriers))
	if d := s.cfg.UnsafeFaultWriteDelay; d > 0 {
		time.Sleep(d) // delivered, not yet written: a kill -9 now fails them
	}
}
