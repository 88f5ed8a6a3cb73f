package certifier

import (
	"strconv"
	"testing"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

func entry(v uint64) logentry.Entry {
	return logentry.Entry{Version: v, Bytes: []byte(strconv.FormatUint(v, 10))}
}

func heldBetween(r *recentEntries, after, upTo uint64) string {
	got, ok := r.between(nil, after, upTo)
	if !ok {
		return "miss"
	}
	s := ""
	for _, b := range got {
		s += string(b) + " "
	}
	return s
}

// A version the ring skips (a span's) is a hole: a range over it is read
// from the log, a range after it from the ring.
func TestTheRecentRingLeavesAHoleForAVersionItSkips(t *testing.T) {
	r := newRecentEntries(8)
	for _, v := range []uint64{1, 2, 5, 6} {
		if !r.add(entry(v), 0) {
			t.Fatalf("add(%d) refused with room in the ring", v)
		}
	}
	for _, c := range []struct {
		after, upTo uint64
		want        string
	}{{0, 2, "1 2 "}, {2, 4, "miss"}, {1, 5, "miss"}, {4, 6, "5 6 "}, {5, 7, "miss"}} {
		if got := heldBetween(r, c.after, c.upTo); got != c.want {
			t.Errorf("between(%d, %d) = %q, want %q", c.after, c.upTo, got, c.want)
		}
	}
}

// The ring drops its oldest entries for a new one only if they are
// durable: an entry delivered before it is durable stays readable.
func TestTheRecentRingKeepsWhatIsNotDurable(t *testing.T) {
	r := newRecentEntries(3)
	for v := uint64(1); v <= 3; v++ {
		r.add(entry(v), 0)
	}
	if r.add(entry(4), 0) {
		t.Fatal("entry 4 pushed out entry 1, which is not durable")
	}
	if got := heldBetween(r, 0, 3); got != "1 2 3 " {
		t.Fatalf("after a refused add the ring holds %q, want 1 2 3", got)
	}
	if !r.add(entry(5), 2) {
		t.Fatal("entry 5 refused with 1 and 2 durable")
	}
	if got := heldBetween(r, 2, 5); got != "miss" || heldBetween(r, 4, 5) != "5 " || heldBetween(r, 2, 3) != "3 " {
		t.Fatalf("ring after adding 5 over durable 1, 2: (2,5] %q, (4,5] %q, (2,3] %q; want miss, 5, 3",
			got, heldBetween(r, 4, 5), heldBetween(r, 2, 3))
	}
	if !r.add(entry(100), 5) || heldBetween(r, 99, 100) != "100 " || heldBetween(r, 4, 5) != "miss" {
		t.Fatal("a far entry with everything before it durable does not start the ring again")
	}
}

// A group member's ring drops a speculative tail; a committed entry fills
// a hole in place and replaces another entry at its version, with the
// entries after it.
func TestRecentEntriesTakeCommittedEntriesOverSpeculativeOnes(t *testing.T) {
	r := newRecentEntries(8)
	for _, v := range []uint64{1, 2, 4, 5} { // a hole at 3
		r.add(entry(v), v)
	}
	r.replace(entry(3))
	if got := heldBetween(r, 0, 5); got != "1 2 3 4 5 " {
		t.Fatalf("after filling the hole at 3: %q, want 1 2 3 4 5", got)
	}
	other := logentry.Entry{Version: 4, Bytes: []byte("another entry at 4")}
	r.replace(other)
	if got := heldBetween(r, 0, 4); got != "1 2 3 another entry at 4 " || r.next() != 5 {
		t.Fatalf("after another entry at 4: %q, next %d; want it in place of 4 and 5 gone", got, r.next())
	}
	r.replace(entry(2)) // the same entry: left
	r.dropFrom(3)
	if heldBetween(r, 0, 2) != "1 2 " || r.next() != 3 {
		t.Fatalf("after dropFrom(3): %q, next %d", heldBetween(r, 0, 2), r.next())
	}
	r.dropFrom(1)
	if r.next() != 0 || !r.add(entry(7), 7) || heldBetween(r, 6, 7) != "7 " {
		t.Fatal("a ring emptied by dropFrom does not start again")
	}
}

// Early delivery stops before the first barrier, span or refused entry
// not yet durable, and goes on once it is.
func TestEarlyDeliveryStopsBeforeTheFirstStopUntilItIsDurable(t *testing.T) {
	var s earlyStops
	s.add([]uint64{7, 4}, 9) // entry 7 refused, a span at 4..5
	if got := s.through(); got != 3 {
		t.Fatalf("through = %d with a span at 4..5 and entry 7 refused, want 3", got)
	}
	s.passed(5)
	if got := s.through(); got != 6 {
		t.Fatalf("through = %d once the span is durable, want 6", got)
	}
	s.passed(7)
	if got := s.through(); got != 9 {
		t.Fatalf("through = %d once every stop is durable, want 9", got)
	}
}

// A gap holds delivery until every version in it is durable, and starts
// after the stops an earlier call left: here entry 4 refused, then a gap
// from 4 (the ring's next version) to 8 below a decision at 9.
func TestAGapHoldsDeliveryUntilAllOfItIsDurable(t *testing.T) {
	var s earlyStops
	s.add([]uint64{4}, 4)
	s.addGap(4, 8)
	s.add(nil, 9)
	for _, c := range []struct{ durable, through uint64 }{{3, 3}, {4, 4}, {7, 4}, {8, 9}} {
		s.passed(c.durable)
		if got := s.through(); got != c.through {
			t.Fatalf("durable %d: through %d, want %d", c.durable, got, c.through)
		}
	}
}
