package certification

import (
	"math/rand/v2"
	"testing"
)

// The row index must answer exactly as a map: checked on random sets,
// overwrites and deletions over a small key space, so that runs collide,
// wrap around the end of the table, and are shifted back by deletions, on
// tables that grow from their smallest size. Keeping writes (setKeeping)
// move the version and leave the last plain write (getPlain) alone.
func TestRowIndexMatchesAMap(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 5))
		idx := newRowIndex(0)
		if seed%2 == 1 {
			idx.seed = 0 // also the unmixed layout
		}
		want, wantPlain := map[uint64]uint64{}, map[uint64]uint64{}
		keys := 1 + rng.IntN(200)
		for step := range 3000 {
			row := uint64(1 + rng.IntN(keys))
			if rng.IntN(8) == 0 {
				row = ^uint64(0) - uint64(rng.IntN(3)) // high bits set
			}
			switch rng.IntN(4) {
			case 0:
				v := uint64(step + 1)
				idx.set(row, v)
				want[row], wantPlain[row] = v, v
			case 2:
				v := uint64(step + 1)
				idx.setKeeping(row, v)
				want[row] = v
			case 1:
				v := want[row]
				if rng.IntN(4) == 0 {
					v++ // not the last writer: must stay
				}
				idx.deleteIf(row, v)
				if want[row] == v {
					delete(want, row)
					delete(wantPlain, row)
				}
			}
			if got := idx.get(row); got != want[row] {
				t.Fatalf("seed %d step %d: get(%d) = %d, want %d", seed, step, row, got, want[row])
			}
			if got := idx.getPlain(row); got != wantPlain[row] {
				t.Fatalf("seed %d step %d: getPlain(%d) = %d, want %d", seed, step, row, got, wantPlain[row])
			}
		}
		if idx.len() != len(want) {
			t.Fatalf("seed %d: %d rows indexed, want %d", seed, idx.len(), len(want))
		}
		for row, v := range want {
			if got := idx.get(row); got != v {
				t.Fatalf("seed %d: at the end get(%d) = %d, want %d", seed, row, got, v)
			}
		}
		for row := uint64(1); row <= uint64(keys); row++ {
			if _, ok := want[row]; !ok && idx.get(row) != 0 {
				t.Fatalf("seed %d: get(%d) found a deleted row", seed, row)
			}
		}
	}
}
