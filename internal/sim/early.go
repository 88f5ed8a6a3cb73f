package sim

import (
	"slices"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// The certifier's early delivery in mode ed (certifier/early.go,
// recent.go): what a message's requests commit becomes deliverable as it
// is decided, before any write, while the write of an earlier batch may
// be in flight. Delivery reads decided entries from the recent ring; an
// entry the ring cannot hold without dropping one not yet durable is a
// stop: it, and everything after it, is delivered only once it is
// durable. The simulated disk keeps every entry, so delivery reads the
// bytes from the disk and the pending batch (certProcess.read); the ring
// is modeled only as far as it decides the stops. Barriers and spans,
// the other stops, are not modeled (doc.go).

// recentRing is recentEntries (certifier/recent.go) as far as its add
// decides: the versions [first, next) it covers, empty when next is 0.
// Which versions in the range are holes does not matter here.
type recentRing struct {
	capacity    uint64
	first, next uint64
}

// add is recentEntries.add: v goes in after the versions the ring covers;
// the oldest make room for it only if they are durable. False: refused.
func (r *recentRing) add(v, durable uint64) bool {
	if r.next > r.first {
		if v < r.next {
			panic("sim: recent entries must be added in version order")
		}
		if v-r.first >= r.capacity {
			newFirst := v - r.capacity + 1
			if min(newFirst, r.next)-1 > durable {
				return false
			}
			r.first = newFirst
			if newFirst >= r.next {
				r.first, r.next = 0, 0 // dropBefore cleared the ring
			}
		}
	}
	if r.next == 0 {
		r.first = v
	}
	r.next = v + 1
	return true
}

// deliverDecided is early.go's deliverDecided, called as decide commits
// entries: in mode ed they go into the recent ring and the streams that
// take entries early may have them at once, up to the first stop. It
// reports whether the deliverable version advanced.
func (c *certProcess) deliverDecided(entries []logentry.Entry) bool {
	if c.w.cfg.Mode != ModeED || len(entries) == 0 {
		return false
	}
	c.w.noteDecided(entries)
	durable := c.disk.durable()
	for _, e := range entries {
		if !c.recent.add(e.Version, durable) {
			c.heldBack = append(c.heldBack, e.Version)
			c.w.stats.EarlyStops++
			c.w.note("early-stop", e.Version, durable, 0)
		}
	}
	c.decided = max(c.decided, entries[len(entries)-1].Version)
	return c.advanceDeliverable()
}

// deliverPassed is early.go's deliverPassed, after a sync: the refused
// entries the log just made durable let what they held back go.
func (c *certProcess) deliverPassed() {
	if c.w.cfg.Mode != ModeED {
		return
	}
	durable := c.disk.durable()
	c.heldBack = slices.DeleteFunc(c.heldBack, func(v uint64) bool { return v <= durable })
	c.advanceDeliverable()
}

// advanceDeliverable moves the deliverable version (a watermark: it never
// goes back) to the last decided, or the last before the first entry
// held back (early.go, earlyStops.through).
func (c *certProcess) advanceDeliverable() bool {
	through := c.decided
	if len(c.heldBack) > 0 {
		through = min(through, c.heldBack[0]-1)
	}
	if through <= c.deliverable {
		return false
	}
	c.deliverable = through
	return true
}

// read is the certifier's certifier.EntryReader: the entries (after,
// upTo] from the disk, then from the batch not yet written, which mode ed
// delivers from the recent ring before any write.
func (c *certProcess) read(dst [][]byte, after, upTo uint64, maxBytes int) ([][]byte, error) {
	if after < c.disk.last() {
		dst, _ = c.disk.read(dst, after, upTo, maxBytes)
	}
	for _, e := range c.pending {
		if e.Version > after && e.Version <= upTo {
			dst = append(dst, e.Bytes)
		}
	}
	return dst, nil
}
