package certifier

import "github.com/tashkent-db/tashkent/internal/logentry"

// recentEntries keeps the latest committed entries in memory, encoded, so
// that delivering them to replicas neither reads the log back nor encodes
// them again. It is a ring over versions [first, first+count). Guarded by
// Service.mu.
type recentEntries struct {
	ring  []logentry.Entry
	first uint64 // version of the oldest entry held; 0 when empty
	count int
}

func newRecentEntries(capacity int) *recentEntries {
	return &recentEntries{ring: make([]logentry.Entry, capacity)}
}

func (r *recentEntries) add(e logentry.Entry) {
	if r.count == 0 {
		r.first = e.Version
	} else if e.Version != r.first+uint64(r.count) {
		panic("certifier: recent entries must be added in version order")
	}
	if r.count == len(r.ring) {
		r.ring[r.first%uint64(len(r.ring))] = logentry.Entry{}
		r.first++
		r.count--
	}
	r.ring[e.Version%uint64(len(r.ring))] = e
	r.count++
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
	for v := after + 1; v <= upTo; v++ {
		dst = append(dst, r.ring[v%uint64(len(r.ring))].Bytes)
	}
	return dst, true
}

// clear empties the ring: the next entry added starts it again. After a
// span, whose entries the ring does not hold (span.go).
func (r *recentEntries) clear() {
	clear(r.ring)
	r.first, r.count = 0, 0
}
