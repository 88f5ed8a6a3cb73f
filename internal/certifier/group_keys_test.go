package certifier

import (
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
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
		e := logentry.EncodePrefix(txn, randomWriteset(rng)).WithVersion(uint64(i + 1))
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
	}
}
