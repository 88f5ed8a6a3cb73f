package agent

import "testing"

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The durable version only rises; the feeds are woken by the first value
// heard (0 included: an empty log's) and by each rise, never by a value
// that is not higher, and an advance never waits for them.
func TestDurableWatchWakesAtEachRiseOnly(t *testing.T) {
	w := newDurableWatch()
	if _, heard := w.load(); heard {
		t.Fatal("a new watch says it heard a durable version")
	}
	ch := w.wait()
	w.advance(0)
	if v, heard := w.load(); !closed(ch) || !heard || v != 0 {
		t.Fatalf("after the first word (0): woken %v, value %d, heard %v", closed(ch), v, heard)
	}
	ch = w.wait()
	w.advance(0)
	if closed(ch) {
		t.Fatal("the same value again woke the feeds")
	}
	w.advance(5)
	if !closed(ch) {
		t.Fatal("a rise did not wake the feeds")
	}
	ch = w.wait()
	w.advance(3)
	if v, _ := w.load(); closed(ch) || v != 5 {
		t.Fatalf("a lower value: woken %v, value %d; want not woken, 5", closed(ch), v)
	}
	for v := uint64(6); v < 1000; v++ { // nobody reads: never blocks
		w.advance(v)
	}
	if v, _ := w.load(); !closed(ch) || v != 999 {
		t.Fatalf("after many rises: woken %v, value %d", closed(ch), v)
	}
}

// A refusal suspends the watch: the feeds may send nothing until a stream
// admits the history again, whose first advance wakes them even at the
// same value.
func TestDurableWatchSendsNothingWhileSuspended(t *testing.T) {
	w := newDurableWatch()
	w.advance(7)
	ch := w.wait()
	w.suspend()
	if _, ok := w.load(); ok || closed(ch) {
		t.Fatalf("suspended: may send %v, woken %v; want neither", ok, closed(ch))
	}
	w.advance(7)
	if v, ok := w.load(); !ok || v != 7 || !closed(ch) {
		t.Fatalf("admitted again at the same value: %d, may send %v, woken %v; want 7, true, true", v, ok, closed(ch))
	}
}
