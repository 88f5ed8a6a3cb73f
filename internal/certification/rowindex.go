package certification

import (
	"math/bits"
	"math/rand/v2"
)

// rowIndex maps a row key's hash to the last version that wrote the row,
// and the last that wrote it other than by a keeping write (what a
// reference conflicts with, see KeepingWrite): the conflict index of §6.1,
// the certifier's hottest data structure. At a
// full window it holds about a million rows, far more than the caches, so
// each lookup costs a memory access; a Go map spends two or more (control
// word, then slot) and hashes the already uniform key again. This is a flat
// open-addressing table with linear probing: a lookup usually reads one
// cache line. Row hashes are never 0 (nonZero), so 0 marks a free slot;
// deletion shifts the following entries back (no tombstones), so lookups
// never slow down as rows come and go.
//
// Slots are chosen by multiplying the hash, mixed with a random seed, by an
// odd constant and taking the top bits (Fibonacci hashing). The seed keeps
// someone who picks primary keys (xxhash is public) from piling rows into
// one run, as Go's maps are seeded for the same reason. The layout never
// affects a decision: the index answers as a map would, so the state
// machine stays deterministic.
type rowIndex struct {
	slots []rowSlot
	shift uint   // 64 - log2(len(slots))
	seed  uint64 // mixed into every slot choice
	count int
}

type rowSlot struct {
	row     uint64 // 0: free
	version uint64
	// plain is the last version that wrote the row other than by a
	// keeping write (KeepingWrite), 0 if none is indexed: what a
	// reference conflicts with. It is never above version, so a row
	// leaves the index (with its last write) no earlier than its last
	// plain write leaves the window. The reference index leaves it equal
	// to version.
	plain uint64
}

// rowIndexLoadMax is the largest fill (count / slots) before the table
// doubles: linear probing stays short below it.
const rowIndexLoadMax = 0.5

const fibonacci = 0x9E3779B97F4A7C15

func newRowIndex(rows int) *rowIndex {
	size := 16
	for float64(rows) > rowIndexLoadMax*float64(size) {
		size *= 2
	}
	return &rowIndex{slots: make([]rowSlot, size), shift: uint(64 - bits.TrailingZeros(uint(size))), seed: rand.Uint64()}
}

func (t *rowIndex) home(row uint64) uint64 { return ((row ^ t.seed) * fibonacci) >> t.shift }

func (t *rowIndex) mask() uint64 { return uint64(len(t.slots) - 1) }

// find returns row's slot, nil if row is not indexed.
func (t *rowIndex) find(row uint64) *rowSlot {
	mask := t.mask()
	for i := t.home(row); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.row == row {
			return s
		}
		if s.row == 0 {
			return nil
		}
	}
}

// get returns the version that last wrote row, 0 if none is indexed.
func (t *rowIndex) get(row uint64) uint64 {
	if s := t.find(row); s != nil {
		return s.version
	}
	return 0
}

// getPlain returns the version that last wrote row other than by a
// keeping write, 0 if none is indexed.
func (t *rowIndex) getPlain(row uint64) uint64 {
	if s := t.find(row); s != nil {
		return s.plain
	}
	return 0
}

func (t *rowIndex) set(row, version uint64) { t.put(row, version, true) }

// setKeeping records that version wrote row by a keeping write: the last
// plain write stays what it was.
func (t *rowIndex) setKeeping(row, version uint64) { t.put(row, version, false) }

func (t *rowIndex) put(row, version uint64, plain bool) {
	mask := t.mask()
	for i := t.home(row); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.row == row {
			s.version = version
			if plain {
				s.plain = version
			}
			return
		}
		if s.row == 0 {
			s.row, s.version = row, version
			if plain {
				s.plain = version
			}
			t.count++
			if float64(t.count) > rowIndexLoadMax*float64(len(t.slots)) {
				t.grow()
			}
			return
		}
	}
}

// deleteIf forgets row if version is the last that wrote it.
func (t *rowIndex) deleteIf(row, version uint64) {
	mask := t.mask()
	i := t.home(row)
	for ; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.row == 0 {
			return
		}
		if s.row == row {
			if s.version != version {
				return
			}
			break
		}
	}
	t.count--
	// Shift back every following entry of the run that may move into the
	// hole (Knuth's algorithm R), so that no lookup stops early.
	hole := i
	for j := (i + 1) & mask; t.slots[j].row != 0; j = (j + 1) & mask {
		home := t.home(t.slots[j].row)
		// The entry at j may fill the hole unless its home lies in the
		// cyclic range (hole, j].
		if (j-home)&mask >= (j-hole)&mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = rowSlot{}
}

func (t *rowIndex) grow() {
	old := t.slots
	t.slots = make([]rowSlot, 2*len(old))
	t.shift--
	t.count = 0
	mask := t.mask()
	for _, s := range old {
		if s.row == 0 {
			continue
		}
		i := t.home(s.row)
		for t.slots[i].row != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
		t.count++
	}
}

func (t *rowIndex) len() int { return t.count }
