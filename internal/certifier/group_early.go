package certifier

import (
	"cmp"
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Early delivery in a certifier group (early.go; Eventual Durability,
// Kashi, §3.7). The leader certifies speculatively in the group's state
// (certgroup.Core.Certify): a version is decided, the commit point, when
// the leader certifies it, and durable, the durability point, when Raft
// commits it. The leader delivers at the commit point as a single
// certifier does: what it decides goes into the recent ring as it decides
// it (deliverDecided, called under the Node's lock, so in version order),
// and the streams that take entries early may have it up to the first
// stop (earlyStops).
//
// When the leader loses its leadership, the versions it decided and Raft
// did not commit may never commit: a new leader certifies those numbers
// again, for other transactions, in its term's epoch (certgroup's epoch
// is the group's base plus the term). The old leader drops its ring's
// speculative tail, and its stops and deliverable version go back to the
// durable version (dropSpeculation); its streams ended with the
// leadership. A replica that applied such a version holds a history that
// is not a prefix of the log, which the new leader's admission finds by
// the epochs (Admit) once it has applied its whole log (admitEarly).
//
// The committed path (appendEntries) adds to the ring only what it does
// not hold already (recentEntries.replace): on the leader, the entries it
// decided; where the ring holds another entry at a committed version (a
// speculative tail whose leadership loss is reported later), that tail
// goes first. A stream admitted in a lost leadership sends nothing more
// (mayDeliver): the durable version and the entries this member holds
// are then another leader's, and its replica may hold failed versions.
//
// Deciding costs the ring and the stops only while some stream takes
// entries early (Service.earlyStreams); the versions decided meanwhile,
// and those a new leader's versioned-log writer has not yet put into the
// ring, are a gap that delivery waits behind until all of it is durable.

// groupEarly is what a member delivers before durability while it leads.
type groupEarly struct {
	// mu guards stops and sent, and orders the moves of the service's
	// deliverable version; taken under the Node's lock.
	mu    sync.Mutex
	stops earlyStops
	sent  uint64 // the highest version this leadership sent before it was durable
	// ringCommitted is the last version the committed path put into (or
	// found in) the recent ring: above it, the ring holds only versions
	// this member decided as leader. Guarded by Service.mu.
	ringCommitted uint64
}

// deliverDecided is called by certgroup.Node.CertifyAll with the results
// of a message's requests, under the Node's lock. Each result is copied
// into its request (decided: the batch index of each result's request).
// While some stream takes entries early, the new commits go into the
// recent ring, in version order, and those streams may have them up to
// the first stop. Versions decided while none did, and those the
// versioned-log writer has not yet put into the ring after a change of
// leader, are missing there: delivery stops before them until all of them
// are durable (a gap), for they are in no log before that and may hold a
// barrier.
func (g *groupMember) deliverDecided(batch []certifying, decided []int, results []certgroup.Result) {
	var entries []logentry.Entry
	first, last := uint64(0), uint64(0)
	for k, r := range results {
		c := &batch[decided[k]]
		c.outcome, c.lowWaterMark, c.latest, c.ticket = r.Outcome, r.LowWaterMark, r.Latest, r.Ticket
		if r.Entry.Bytes != nil {
			entries = append(entries, r.Entry)
		}
		if r.Outcome.Decision == certification.Commit && !r.Outcome.Duplicate {
			first = cmp.Or(first, r.Outcome.FirstVersion, r.Outcome.CommitVersion)
			last = r.Outcome.CommitVersion
		}
	}
	if last == 0 || g.s.earlyStreams.Load() == 0 {
		return
	}
	gapFrom, stops := g.addSpeculative(entries, first)
	g.early.mu.Lock()
	defer g.early.mu.Unlock()
	if gapFrom != 0 {
		g.early.stops.addGap(gapFrom, first-1)
	}
	g.early.stops.add(batchStops(batch, stops), last)
	g.s.advanceDeliverable(g.early.stops.through())
}

// addSpeculative puts entries just decided, from version first on, into
// the recent ring. It returns the first version below first the ring
// lacks (0: none), and the versions the ring refused.
func (g *groupMember) addSpeculative(entries []logentry.Entry, first uint64) (gapFrom uint64, refused []uint64) {
	s := g.s
	durable := s.DurableVersion()
	s.mu.Lock()
	defer s.mu.Unlock()
	if next := max(s.recent.next(), g.early.ringCommitted+1); next < first {
		gapFrom = next
	}
	for _, e := range entries {
		if !s.recent.add(e, durable) {
			refused = append(refused, e.Version)
		}
	}
	return gapFrom, refused
}

// deliverPassed lets the streams that take entries early have what the
// stops the committed path just made durable held back.
func (g *groupMember) deliverPassed() {
	g.early.mu.Lock()
	defer g.early.mu.Unlock()
	g.early.stops.passed(g.s.DurableVersion())
	g.s.deliverable.advance(g.early.stops.through())
}

// dropSpeculation forgets what this member decided as a leader that Raft
// has not committed (see the comment at the top of this file). It runs in
// the Raft loop, before the versions committed in the same batch are
// reported, and before this member can lead again.
func (g *groupMember) dropSpeculation() {
	s := g.s
	s.mu.Lock()
	s.recent.dropFrom(g.early.ringCommitted + 1)
	s.mu.Unlock()
	g.early.mu.Lock()
	defer g.early.mu.Unlock()
	g.early.stops, g.early.sent = earlyStops{}, 0
	s.deliverable.lower(s.DurableVersion())
}

// sentEarly: see orderer.sentEarly. A stream of a lost leadership counts
// no more (mayDeliver refuses its messages).
func (g *groupMember) sentEarly(tenure, through uint64) {
	g.early.mu.Lock()
	defer g.early.mu.Unlock()
	if g.leadership.tenure.Load() == tenure {
		g.early.sent = max(g.early.sent, through)
	}
}

// sentVersion is the highest version this leadership sent before it was
// durable.
func (e *groupEarly) sentVersion() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sent
}

// admitEarly waits, for a replica that takes entries early, until this
// leader has applied its whole log, and returns the version it applied:
// the versions the replica holds above it are either this leadership's,
// delivered early (awaitDeliveredTail waits for them), or failed
// versions of an earlier leader, which Admit then finds.
func (g *groupMember) admitEarly(ctx context.Context) (uint64, error) {
	_, first, err := g.certifyingEpoch(ctx)
	if err != nil {
		return 0, err
	}
	return first - 1, nil
}

// takesEarly reports whether a session takes entries before they are
// durable, and so may hold versions that failed.
func (s *Service) takesEarly(open *pb.OpenSession) bool { return s.deliveryOf(open).earlyEntries }

// certifyingEpoch waits until this member leads and has applied its whole
// log (certgroup.Core.CertifyingEpoch).
func (g *groupMember) certifyingEpoch(ctx context.Context) (uint64, uint64, error) {
	epoch, first, err := g.node.CertifyingEpoch(ctx)
	if err != nil {
		return 0, 0, status.Errorf(codes.Unavailable, "certifier member %d: %v; retry", g.node.ID(), err)
	}
	return epoch, first, nil
}
