package certifier

import (
	"bytes"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// recentEntries keeps the latest committed entries in memory, encoded, so
// that delivering them to replicas neither reads the log back nor encodes
// them again. It is a ring over versions [first, first+count). A version
// in that range it does not hold is a hole, read from the log: a span's
// versions (span.go), or an entry add refused. Guarded by Service.mu.
type recentEntries struct {
	ring  []logentry.Entry // the slots of versions outside the range are empty
	first uint64           // version of the oldest entry held; 0 when empty
	count int
}

func newRecentEntries(capacity int) *recentEntries {
	return &recentEntries{ring: make([]logentry.Entry, capacity)}
}

// add puts e into the ring after the versions it covers, leaving a hole
// for the versions between. The oldest entries make room for it only if
// they are durable (at or below durable): an entry delivered before it is
// durable (early.go) must stay readable until the log holds it. Otherwise
// add refuses e and reports false.
func (r *recentEntries) add(e logentry.Entry, durable uint64) bool {
	size := uint64(len(r.ring))
	if r.count > 0 {
		next := r.first + uint64(r.count)
		if e.Version < next {
			panic("certifier: recent entries must be added in version order")
		}
		if e.Version-r.first >= size {
			newFirst := e.Version - size + 1
			if min(newFirst, next)-1 > durable {
				return false
			}
			r.dropBefore(newFirst)
		}
	}
	if r.count == 0 {
		r.first = e.Version
	}
	r.ring[e.Version%size] = e
	r.count = int(e.Version-r.first) + 1
	return true
}

// dropBefore empties the slots of the versions below v.
func (r *recentEntries) dropBefore(v uint64) {
	if v >= r.first+uint64(r.count) {
		r.clear()
		return
	}
	for ; r.first < v; r.first++ {
		r.ring[r.first%uint64(len(r.ring))] = logentry.Entry{}
		r.count--
	}
}

// between appends the encoded entries (after, upTo] to dst if all of them
// are held, and reports whether they were.
func (r *recentEntries) between(dst [][]byte, after, upTo uint64) ([][]byte, bool) {
	if upTo <= after {
		return dst, true
	}
	if r.count == 0 || after+1 < r.first || upTo >= r.first+uint64(r.count) {
		return dst, false
	}
	start := len(dst)
	for v := after + 1; v <= upTo; v++ {
		e := r.ring[v%uint64(len(r.ring))]
		if e.Version != v || e.Bytes == nil {
			return dst[:start], false // a hole
		}
		dst = append(dst, e.Bytes)
	}
	return dst, true
}

// next is the version after the last one held (0: the ring is empty).
func (r *recentEntries) next() uint64 {
	if r.count == 0 {
		return 0
	}
	return r.first + uint64(r.count)
}

// replace puts a committed entry e into the ring: into its slot if the
// ring's range covers it and the slot is a hole, or after the range as
// add does; where the ring holds another entry at its version (another
// leader's, taken back), that entry and those after it go first. An entry
// the ring already holds, or older than its range, is left.
func (r *recentEntries) replace(e logentry.Entry) {
	if r.count == 0 || e.Version >= r.next() {
		r.add(e, e.Version)
		return
	}
	if e.Version < r.first {
		return
	}
	slot := &r.ring[e.Version%uint64(len(r.ring))]
	switch {
	case slot.Version != e.Version || slot.Bytes == nil:
		*slot = e
	case !bytes.Equal(slot.Bytes, e.Bytes):
		r.dropFrom(e.Version)
		r.add(e, e.Version)
	}
}

// dropFrom empties the slots of the versions from v on.
func (r *recentEntries) dropFrom(v uint64) {
	for r.count > 0 && r.first+uint64(r.count) > v {
		r.count--
		r.ring[(r.first+uint64(r.count))%uint64(len(r.ring))] = logentry.Entry{}
	}
	if r.count == 0 {
		r.first = 0
	}
}

// clear empties the ring: the next entry added starts it again.
func (r *recentEntries) clear() {
	clear(r.ring)
	r.first, r.count = 0, 0
}
