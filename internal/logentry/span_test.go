package logentry

import (
	"bytes"
	"hash/crc32"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

func TestSpanOfReadsTheSpanWithoutAllocating(t *testing.T) {
	ws := &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(`[1]`), Row: []byte(`(1)`)}}}
	cases := []struct {
		name        string
		entry       *pb.LogEntry
		first, last uint64
	}{
		{"a transaction of its own", &pb.LogEntry{Version: 7, Txn: &pb.TxnID{Origin: "r1", Seq: 1}, Writeset: ws}, 0, 0},
		{"a fragment inside a span", &pb.LogEntry{Version: 8, Writeset: ws, SpanFirst: 7, SpanLast: 9}, 7, 9},
		{"the last fragment, with the certified writeset", &pb.LogEntry{Version: 1 << 40, Writeset: ws, SpanFirst: 1<<40 - 3, SpanLast: 1 << 40,
			Certified: &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_TABLE_WRITE}}}}, 1<<40 - 3, 1 << 40},
		{"a span of one version", &pb.LogEntry{Version: 5, Writeset: ws, SpanFirst: 5, SpanLast: 5}, 5, 5},
	}
	for _, c := range cases {
		b, err := proto.Marshal(c.entry)
		if err != nil {
			t.Fatal(err)
		}
		first, last, err := SpanOf(b)
		if err != nil || first != c.first || last != c.last {
			t.Errorf("%s: SpanOf = %d, %d, %v; want %d, %d", c.name, first, last, err, c.first, c.last)
		}
		if n := testing.AllocsPerRun(100, func() { SpanOf(b) }); n != 0 {
			t.Errorf("%s: SpanOf allocates %.0f times", c.name, n)
		}
	}
}

func TestSpanOfRejectsGarbageAndHalfSpans(t *testing.T) {
	half, _ := proto.Marshal(&pb.LogEntry{Version: 3, SpanFirst: 3})
	backwards, _ := proto.Marshal(&pb.LogEntry{Version: 3, SpanFirst: 4, SpanLast: 3})
	for _, b := range [][]byte{{0xff}, {0x20}, {0x1a, 0x05, 0x01}, half, backwards} {
		if f, l, err := SpanOf(b); err == nil {
			t.Errorf("SpanOf(%x) = %d, %d, no error", b, f, l)
		}
	}
}

// A span entry parsed back encodes to the same bytes: the head a group
// member rebuilds a span's last entry from.
func TestParseSpanEntryRoundTrips(t *testing.T) {
	certified, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_TABLE_WRITE}}})
	if err != nil {
		t.Fatal(err)
	}
	fragment, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(`[1]`), Row: []byte(`(1)`)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []SpanEntry{
		{Version: 9, Txn: &pb.TxnID{Origin: "r1", Seq: 4}, First: 7, Last: 9, Certified: certified},                     // a head
		{Version: 9, Txn: &pb.TxnID{Origin: "r1", Seq: 4}, Fragment: fragment, First: 7, Last: 9, Certified: certified}, // its last entry
		{Version: 8, Txn: &pb.TxnID{Origin: "r1", Seq: 4}, Fragment: fragment, First: 7, Last: 9},
	} {
		b := AppendSpanEntry(nil, e)
		got, err := ParseSpanEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		if again := AppendSpanEntry(nil, got); !bytes.Equal(again, b) || !proto.Equal(got.Txn, e.Txn) || got.First != 7 || got.Last != 9 {
			t.Fatalf("entry %d: parsed %+v, encodes to different bytes", e.Version, got)
		}
	}
	plain := Encode(&pb.LogEntry{Version: 3, Txn: &pb.TxnID{Origin: "r1", Seq: 1}})
	if _, err := ParseSpanEntry(plain.Bytes); err == nil {
		t.Fatal("an entry of its own parsed as a span entry")
	}
}

// The span's size and checksum go on its last entry only, read back by
// ParseSpanEntry and by protobuf decoding alike; an entry written without
// them (an older log) reads as 0.
func TestSpanEntrySizeAndChecksumRoundTrip(t *testing.T) {
	fragment, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(`[1]`), Row: []byte(`(1)`)}}})
	if err != nil {
		t.Fatal(err)
	}
	txn := &pb.TxnID{Origin: "r1", Seq: 4}
	last := SpanEntry{Version: 9, Txn: txn, Fragment: fragment, First: 7, Last: 9, Certified: []byte{}, SpanBytes: 3 << 30, SpanChecksum: 0xdeadbeef}
	b := AppendSpanEntry(nil, last)
	got, err := ParseSpanEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.SpanBytes != last.SpanBytes || got.SpanChecksum != last.SpanChecksum || !bytes.Equal(AppendSpanEntry(nil, got), b) {
		t.Fatalf("parsed %+v from the last entry, want span bytes %d checksum %#x, encoding the same bytes", got, last.SpanBytes, last.SpanChecksum)
	}
	decoded, err := Decode(b)
	if err != nil || decoded.SpanBytes != last.SpanBytes || decoded.SpanChecksum != last.SpanChecksum {
		t.Fatalf("Decode = %+v, %v; want span_bytes %d, span_checksum %#x", decoded, err, last.SpanBytes, last.SpanChecksum)
	}
	if n := len(b); n > SpanEntryBytesMax(txn, len(fragment), 0) {
		t.Fatalf("last entry of %d bytes, over SpanEntryBytesMax %d", n, SpanEntryBytesMax(txn, len(fragment), 0))
	}

	inner := last
	inner.Version = 8
	if got, err := ParseSpanEntry(AppendSpanEntry(nil, inner)); err != nil || got.SpanBytes != 0 || got.SpanChecksum != 0 {
		t.Fatalf("entry inside the span parsed as %+v, %v: carries the span's size or checksum", got, err)
	}

	older, err := proto.Marshal(&pb.LogEntry{Version: 9, Txn: txn, SpanFirst: 7, SpanLast: 9, Writeset: &pb.Writeset{}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseSpanEntry(older); err != nil || got.SpanBytes != 0 || got.SpanChecksum != 0 || got.Last != 9 {
		t.Fatalf("last entry without size and checksum parsed as %+v, %v", got, err)
	}
}

// SpanChecksum is the CRC-32C of the fragments as a spool holds them, each
// its length then its bytes: moving a fragment boundary changes it.
func TestSpanChecksumCountsFragmentBoundaries(t *testing.T) {
	sum := SpanChecksum(SpanChecksum(0, []byte("ab")), []byte("c"))
	want := crc32.Checksum([]byte{2, 'a', 'b', 1, 'c'}, crc32.MakeTable(crc32.Castagnoli))
	if sum != want {
		t.Fatalf("SpanChecksum(ab, c) = %#x, want the CRC-32C of the framed fragments %#x", sum, want)
	}
	if moved := SpanChecksum(SpanChecksum(0, []byte("a")), []byte("bc")); moved == sum {
		t.Fatal("fragments a, bc have the checksum of ab, c")
	}
}
