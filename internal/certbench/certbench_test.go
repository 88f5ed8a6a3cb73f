package certbench

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// The encoder writes by hand what proto.Marshal of the same Writeset
// writes; the certifier and the replicas decode it as a Writeset.
func TestWritesetEncoderMatchesProtobuf(t *testing.T) {
	for _, cfg := range []Config{{Keys: 4, RowBytes: 32}, {Keys: 1, RowBytes: 0}, {Keys: 3, RowBytes: 200, KeySpace: 10}} {
		w := newWritesetEncoder(cfg, 7)
		for seq := uint64(1); seq < 4; seq++ {
			got := w.encode(rand.New(rand.NewPCG(1, seq)), seq)
			decoded := &pb.Writeset{}
			if err := proto.Unmarshal(got, decoded); err != nil {
				t.Fatalf("%+v: encoded writeset does not decode: %v", cfg, err)
			}
			if len(decoded.Changes) != cfg.Keys {
				t.Fatalf("%+v: %d changes, want %d", cfg, len(decoded.Changes), cfg.Keys)
			}
			for k, c := range decoded.Changes {
				if c.Table != benchTable || c.Op != pb.Op_OP_UPSERT || len(c.Row) != cfg.RowBytes {
					t.Fatalf("%+v: change %d is %v", cfg, k, c)
				}
				if want := "7." + strconv.FormatUint(seq, 10) + "." + strconv.Itoa(k); cfg.KeySpace == 0 && string(c.Key) != want {
					t.Fatalf("%+v: change %d key %q, want %q", cfg, k, c.Key, want)
				}
			}
			want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(decoded)
			if string(got) != string(want) {
				t.Fatalf("%+v: encoded %x, protobuf encodes %x", cfg, got, want)
			}
		}
	}
}

// A request belongs to the step it was due in, whenever its reply comes:
// one due before the window closed is measured even if answered after it,
// so a stall at the end of a step is not cut off from its latencies.
func TestMeasureWindowSelectsByDueTime(t *testing.T) {
	var w measureWindow
	before := time.Now()
	if w.holds(before) || w.past(before) {
		t.Fatal("a window not yet opened holds nothing and has not passed")
	}
	start := w.open()
	inside := start.Add(time.Millisecond)
	if !w.holds(inside) || w.holds(before) {
		t.Fatal("an open window holds what is due from its start on, nothing before")
	}
	end := w.close()
	if end.Before(inside) {
		end = inside.Add(time.Nanosecond) // the clock is coarse: keep the case meaningful
		w.end.Store(end.UnixNano())
	}
	if !w.holds(inside) || w.past(inside) {
		t.Fatal("a request due inside the window is still measured after the window closed")
	}
	if w.holds(end) || !w.past(end) {
		t.Fatal("a request due at or after the close is not measured, and the step is past it")
	}
}
