package certification

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestSnapshotRoundTripIsExact: on random histories (conflicts, whole-table
// and schema writes, spans, a sliding window), a state rebuilt from its snapshot
// writes the same bytes and then decides every later request exactly as the
// original does: a member that installed a snapshot certifies like one
// that replayed the whole log.
func TestSnapshotRoundTripIsExact(t *testing.T) {
	histories := 500
	if testing.Short() {
		histories = 100
	}
	for seed := range uint64(histories) {
		rng := rand.New(rand.NewPCG(seed, 11))
		window := uint64(1 + rng.IntN(64))
		w := &workload{rng: rng, tables: 1 + rng.IntN(4), rows: 1 + rng.IntN(40)}
		cfg := Config{WindowVersions: window}
		original := New(cfg, uint64(rng.IntN(3)))
		cut := rng.IntN(300)
		for range cut {
			req := w.request(original.Version(), window)
			if o := original.Certify(req); o.Decision == Commit && !o.Duplicate {
				w.committed = append(w.committed, req.Txn)
			}
		}
		data := original.Marshal()
		copied, err := Unmarshal(cfg, data)
		if err != nil {
			t.Fatalf("seed %d: unmarshal: %v", seed, err)
		}
		if again := copied.Marshal(); !bytes.Equal(again, data) {
			t.Fatalf("seed %d: snapshot of the copy differs (%d vs %d bytes)", seed, len(again), len(data))
		}
		if copied.IndexedRows() != original.IndexedRows() || len(copied.txns) != len(original.txns) {
			t.Fatalf("seed %d: copy indexes %d rows and %d ids, original %d and %d", seed,
				copied.IndexedRows(), len(copied.txns), original.IndexedRows(), len(original.txns))
		}
		for step := range 200 {
			req := w.request(original.Version(), window)
			a, b := original.Certify(req), copied.Certify(req)
			if a != b {
				t.Fatalf("seed %d step %d after the snapshot: original %+v, copy %+v", seed, step, a, b)
			}
		}
	}
}

// TestSnapshotOfTheEmptyState: a fresh state, and one restored from a
// compacted log (base > 0), survive the round trip.
func TestSnapshotOfTheEmptyState(t *testing.T) {
	for _, base := range []uint64{0, 42} {
		s, err := Unmarshal(Config{WindowVersions: 8}, New(Config{WindowVersions: 8}, base).Marshal())
		if err != nil || s.Version() != base || s.LowWaterMark() != base {
			t.Fatalf("base %d: got %v, version %d", base, err, s.Version())
		}
	}
}

// TestUnmarshalRefusesDamagedSnapshots: every truncation and a flipped byte
// of a real snapshot are refused with ErrBadSnapshot or decode to a state
// (never a panic or a huge allocation).
func TestUnmarshalRefusesDamagedSnapshots(t *testing.T) {
	s := New(Config{WindowVersions: 16}, 0)
	for i := range 40 {
		s.Certify(Request{Txn: TxnID{Origin: "r", Seq: uint64(i + 1)}, StartVersion: s.Version(),
			Keys: []Key{row("public.t", i%7), TableKey("public.u")}})
	}
	data := s.Marshal()
	for n := 0; n < len(data); n++ {
		if _, err := Unmarshal(Config{WindowVersions: 16}, data[:n]); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("truncated to %d of %d bytes: %v, want ErrBadSnapshot", n, len(data), err)
		}
	}
	for i := range data {
		damaged := bytes.Clone(data)
		damaged[i] ^= 0x80
		_, _ = Unmarshal(Config{WindowVersions: 16}, damaged) // must not panic
	}
}
