package certifier

import (
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// A follower reading keys with GroupEntryKeys must reach exactly what
// DecodeEntryKeys reads: the same transaction, the same keys, the same
// errors (every member must restore the same state from the log).
func TestGroupEntryKeysAgreesWithDecodeEntryKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(i int, b []byte) {
		t.Helper()
		wantTxn, want, wantErr := DecodeEntryKeys(b)
		gotTxn, got, gotErr := GroupEntryKeys(b)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("entry %d: DecodeEntryKeys error %v, GroupEntryKeys error %v", i, wantErr, gotErr)
		}
		if wantErr == nil && (gotTxn != wantTxn || !slices.Equal(got, want)) {
			t.Fatalf("entry %d: GroupEntryKeys = %v %v, DecodeEntryKeys = %v %v", i, gotTxn, got, wantTxn, want)
		}
	}
	for i := range 3000 {
		txn := &pb.TxnID{Origin: "agent-" + string(rune('a'+rng.IntN(3))), Seq: rng.Uint64N(1 << 40)}
		e := logentry.EncodePrefix(txn, randomWriteset(rng)).WithVersion(uint64(i+1), 0)
		check(i, e.Bytes)
		// A repeated writeset field (protobuf merges the two) and a
		// truncated entry take the decoding path.
		var twice []byte
		twice = append(twice, e.Bytes...)
		twice = protowire.AppendTag(twice, entryWritesetField, protowire.BytesType)
		twice = protowire.AppendBytes(twice, e.Bytes[:0])
		check(i, twice)
		if len(e.Bytes) > 3 {
			check(i, e.Bytes[:len(e.Bytes)-2])
		}
		// An entry of a span: its keys are the certified writeset's, on
		// its last entry only.
		fragment, _ := proto.Marshal(randomWriteset(rng))
		certified, _ := proto.Marshal(randomWriteset(rng))
		for v := uint64(1); v <= 2; v++ {
			check(i, logentry.AppendSpanEntry(nil, logentry.SpanEntry{Version: v, Txn: txn, Fragment: fragment, First: 1, Last: 2, Certified: certified}))
		}
	}
}

// A group restores a span one entry at a time: no keys from a fragment's
// rows, the certified writeset's at the span's last entry.
func TestEntryKeysOfASpanAreItsCertifiedWriteset(t *testing.T) {
	fragment, _ := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte("{}")}}})
	certified, _ := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_TABLE_WRITE}}})
	txn := &pb.TxnID{Origin: "r1", Seq: 5}
	for _, read := range []func([]byte) (certification.TxnID, []certification.Key, error){DecodeEntryKeys, GroupEntryKeys} {
		for v := uint64(7); v <= 9; v++ {
			gotTxn, keys, err := read(logentry.AppendSpanEntry(nil, logentry.SpanEntry{Version: v, Txn: txn, Fragment: fragment,
				First: 7, Last: 9, Certified: certified}))
			want := []certification.Key(nil)
			if v == 9 {
				want = []certification.Key{certification.TableKey("public.t")}
			}
			if err != nil || gotTxn != (certification.TxnID{Origin: "r1", Seq: 5}) || !slices.Equal(keys, want) {
				t.Fatalf("entry %d of span 7..9: %v %v %v, want keys %v", v, gotTxn, keys, err, want)
			}
		}
	}
}
