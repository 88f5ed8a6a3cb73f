package certifier

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
)

// randomWriteset draws changes of every operation, some of them invalid
// (missing table or key, unknown operation), so that both readers must
// agree on errors too.
func randomWriteset(rng *rand.Rand) *pb.Writeset {
	tables := []string{"", "public.t", `"Odd".x`, "t#idx"}
	ws := &pb.Writeset{}
	for range rng.IntN(6) {
		c := &pb.Change{Table: tables[rng.IntN(len(tables))], Op: pb.Op(rng.IntN(11))} // 10: unknown
		if rng.IntN(4) > 0 {
			c.Key = []byte(strings.Repeat("k", rng.IntN(3)) + string(rune('0'+rng.IntN(10))))
		}
		if rng.IntN(2) == 0 {
			c.Row = []byte(`{"v":1}`)
		}
		c.KeepsRow = rng.IntN(3) == 0 // on any op: only an upsert's counts
		ws.Changes = append(ws.Changes, c)
	}
	return ws
}

func TestKeysOfEncodedAgreesWithKeysOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		ws := randomWriteset(rng)
		b, err := proto.Marshal(ws)
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := KeysOf(ws)
		got, gotErr := keysOfEncoded(nil, b)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("writeset %d %v: KeysOf error %v, keysOfEncoded error %v", i, ws, wantErr, gotErr)
		}
		if wantErr == nil && !slices.Equal(got, want) {
			t.Fatalf("writeset %d %v: keysOfEncoded = %v, KeysOf = %v", i, ws, got, want)
		}
	}
}

// Protobuf decoding keeps the last occurrence of a scalar field, and so
// must the key reader: the replicas apply what they decode.
func TestKeysOfEncodedLastFieldWins(t *testing.T) {
	change := encodedUpsert("public.first", "[1]")
	change = protowire.AppendTag(change, changeTableField, protowire.BytesType)
	change = protowire.AppendString(change, "public.second")
	ws := protowire.AppendTag(nil, writesetChangesField, protowire.BytesType)
	ws = protowire.AppendBytes(ws, change)
	got, want, err := keysBothWays(t, ws)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("keysOfEncoded = %v, %v; want %v", got, err, want)
	}
}

// encodedUpsert is an upsert change of key in table, encoded field by
// field as a test appends more fields to it.
func encodedUpsert(table, key string) []byte {
	var change []byte
	change = protowire.AppendTag(change, changeTableField, protowire.BytesType)
	change = protowire.AppendString(change, table)
	change = protowire.AppendTag(change, changeOpField, protowire.VarintType)
	change = protowire.AppendVarint(change, uint64(pb.Op_OP_UPSERT))
	change = protowire.AppendTag(change, changeKeyField, protowire.BytesType)
	return protowire.AppendString(change, key)
}

// keysBothWays reads the writeset ws with keysOfEncoded and, decoded by
// protobuf, with KeysOf, which must agree.
func keysBothWays(t *testing.T, ws []byte) (encoded, decoded []certification.Key, encodedErr error) {
	t.Helper()
	w := &pb.Writeset{}
	if err := proto.Unmarshal(ws, w); err != nil {
		t.Fatalf("protobuf refuses the writeset: %v", err)
	}
	decoded, err := KeysOf(w)
	if err != nil {
		t.Fatal(err)
	}
	encoded, encodedErr = keysOfEncoded(nil, ws)
	return encoded, decoded, encodedErr
}

// keeps_row turns an upsert's row key into a keeping write (and nothing
// else's): read as protobuf reads a bool (any non-zero varint), the last
// occurrence winning.
func TestKeysOfEncodedReadsKeepsRow(t *testing.T) {
	upsert := func(keeps ...uint64) []byte {
		change := encodedUpsert("public.parent", "[1]")
		for _, k := range keeps {
			change = protowire.AppendTag(change, changeKeepsRowField, protowire.VarintType)
			change = protowire.AppendVarint(change, k)
		}
		ws := protowire.AppendTag(nil, writesetChangesField, protowire.BytesType)
		return protowire.AppendBytes(ws, change)
	}
	for _, tc := range []struct {
		keeps []uint64
		want  certification.KeyKind
	}{
		{nil, certification.Write},
		{[]uint64{1}, certification.KeepingWrite},
		{[]uint64{2}, certification.KeepingWrite},
		{[]uint64{1, 0}, certification.Write},
		{[]uint64{0, 1}, certification.KeepingWrite},
	} {
		got, want, err := keysBothWays(t, upsert(tc.keeps...))
		if err != nil || !slices.Equal(got, want) || got[0].Kind != tc.want {
			t.Fatalf("keeps_row %v: keysOfEncoded = %v, %v; KeysOf = %v; want kind %v", tc.keeps, got, err, want, tc.want)
		}
	}
}

// keeps_row in another wire type than a varint is, to protobuf, an unknown
// field (it decodes, KeepsRow stays as it was): the encoded reader must
// accept it as KeysOf does, not reject the writeset, and an earlier valid
// keeps_row still counts.
func TestKeysOfEncodedSkipsKeepsRowOfAnotherWireType(t *testing.T) {
	for _, before := range []bool{false, true} {
		change := encodedUpsert("public.parent", "[1]")
		if before {
			change = protowire.AppendTag(change, changeKeepsRowField, protowire.VarintType)
			change = protowire.AppendVarint(change, 1)
		}
		change = protowire.AppendTag(change, changeKeepsRowField, protowire.BytesType)
		change = protowire.AppendString(change, "x")
		change = protowire.AppendTag(change, changeKeepsRowField, protowire.Fixed32Type)
		change = protowire.AppendFixed32(change, 7)
		ws := protowire.AppendBytes(protowire.AppendTag(nil, writesetChangesField, protowire.BytesType), change)
		got, want, err := keysBothWays(t, ws)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("keeps_row set before: %v: keysOfEncoded = %v, %v; KeysOf = %v", before, got, err, want)
		}
	}
}

func TestKeysOfEncodedRejectsMalformedBytes(t *testing.T) {
	valid, _ := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "t", Op: pb.Op_OP_UPSERT, Key: []byte("1")}}})
	badUTF8 := slices.Clone(valid)
	badUTF8[4] = 0xff // the table name's only byte
	for name, b := range map[string][]byte{
		"empty":          nil,
		"truncated":      valid[:len(valid)-1],
		"bad tag":        {0xff},
		"changes varint": {0x08, 0x01},
		"table not utf8": badUTF8,
	} {
		if keys, err := keysOfEncoded(nil, b); err == nil {
			t.Errorf("%s (%x): keysOfEncoded accepted it: %v", name, b, keys)
		}
		if name != "empty" && name != "changes varint" {
			if err := proto.Unmarshal(b, &pb.Writeset{}); err == nil {
				t.Errorf("%s: protobuf accepts it, the key reader should too", name)
			}
		}
	}
}

func BenchmarkKeysOfEncoded(b *testing.B) {
	ws := &pb.Writeset{}
	for k := range 4 {
		ws.Changes = append(ws.Changes, &pb.Change{Table: "public.bench", Op: pb.Op_OP_UPSERT,
			Key: []byte{'1', byte('0' + k)}, Row: make([]byte, 32)})
	}
	enc, _ := proto.Marshal(ws)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := keysOfEncoded(nil, enc); err != nil {
			b.Fatal(err)
		}
	}
}
