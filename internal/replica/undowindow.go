package replica

import (
	"fmt"
	"sync"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// UndoWindow keeps the log entries a rewind may have to undo: every entry
// delivered to the replica (its local versions' too) above its oldest pin
// (Pins.Oldest), in version order. A rewind to pin k undoes the entries
// (k, v], v the replica's version (Rewinder.Rewind).
//
// It is bounded (bytes): when an append would pass the bound, the oldest
// entries go, and the window then starts above them, so a rewind to a pin
// below its start cannot undo and says so (CannotUndoError): the replica
// needs a rebuild. Pins are usually a fraction of a second old, so the
// window holds that much of the log (about 1 MB at 20,000 versions/s);
// the bound matters only while durability stalls.
//
// Methods are safe for concurrent use.
type UndoWindow struct {
	mu       sync.Mutex
	start    uint64 // the window holds every entry from start+1 on
	entries  []logentry.Entry
	bytes    int
	bytesMax int
	overflow bool // start moved up because the bound was passed
}

// UndoWindowBytesDefault bounds the window at 64 MiB: minutes of a
// stalled durability at a few thousand versions per second, and a small
// part of a replica's memory.
const UndoWindowBytesDefault = 64 << 20

// NewUndoWindow returns an empty window that starts at version start (the
// replica's version: the next entry must be start+1). bytesMax bounds the
// bytes of the entries held; 0: UndoWindowBytesDefault.
func NewUndoWindow(start uint64, bytesMax int) *UndoWindow {
	if bytesMax <= 0 {
		bytesMax = UndoWindowBytesDefault
	}
	return &UndoWindow{start: start, bytesMax: bytesMax}
}

// Append adds delivered entries, in version order. Entries the window
// holds already (a stream that delivers again from the replica's version)
// are skipped. A gap (an entry after the next one expected) empties the
// window, which then starts before that entry: versions before it cannot
// be undone.
func (w *UndoWindow) Append(entries ...logentry.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range entries {
		next := w.start + uint64(len(w.entries)) + 1
		switch {
		case e.Version < next:
			continue
		case e.Version > next:
			w.entries, w.bytes, w.start = nil, 0, e.Version-1
		}
		w.entries = append(w.entries, e)
		w.bytes += len(e.Bytes)
	}
	for w.bytes > w.bytesMax && len(w.entries) > 0 {
		w.dropFirst()
		w.overflow = true
	}
}

func (w *UndoWindow) dropFirst() {
	w.bytes -= len(w.entries[0].Bytes)
	w.entries[0] = logentry.Entry{}
	w.entries = w.entries[1:]
	w.start++
}

// Trim drops the entries up to version k: nothing is undone below the
// oldest pin.
func (w *UndoWindow) Trim(k uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.entries) > 0 && w.entries[0].Version <= k {
		w.dropFirst()
	}
	if len(w.entries) == 0 && k > w.start {
		w.start = k
	}
}

// DropAbove drops the entries above k: after a rewind to k (their
// versions failed, and the log numbers new ones from k + 1), and when a
// new certifier stream opens at the replica's version k (entries delivered
// but not applied are delivered again, and may be another epoch's).
func (w *UndoWindow) DropAbove(k uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.entries) > 0 && w.entries[len(w.entries)-1].Version > k {
		last := len(w.entries) - 1
		w.bytes -= len(w.entries[last].Bytes)
		w.entries[last] = logentry.Entry{}
		w.entries = w.entries[:last]
	}
	if w.start > k {
		w.start = k
		w.overflow = false
	}
}

// Entries returns the entries (k, v]. A CannotUndoError if the window
// does not hold them all.
func (w *UndoWindow) Entries(k, v uint64) ([]logentry.Entry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k < w.start {
		why := fmt.Sprintf("the undo window holds the entries after version %d only", w.start)
		if w.overflow {
			why += fmt.Sprintf(" (it passed its bound of %d bytes)", w.bytesMax)
		}
		return nil, &CannotUndoError{Version: k + 1, Reason: why}
	}
	last := w.start + uint64(len(w.entries))
	if v > last {
		return nil, &CannotUndoError{Version: last + 1, Reason: fmt.Sprintf("the undo window holds the entries up to version %d only, and the replica's version is %d", last, v)}
	}
	from := int(k - w.start)
	return append([]logentry.Entry(nil), w.entries[from:from+int(v-k)]...), nil
}

// Span returns the versions the window can undo: (start, last].
func (w *UndoWindow) Span() (start, last uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.start, w.start + uint64(len(w.entries))
}
