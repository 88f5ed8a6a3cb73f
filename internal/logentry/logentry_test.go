package logentry

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

func TestEncodeInTwoStepsDecodesToTheSameEntry(t *testing.T) {
	want := &pb.LogEntry{
		Version: 1 << 40,
		Epoch:   12,
		Txn:     &pb.TxnID{Origin: "r1", Seq: 7},
		Writeset: &pb.Writeset{Changes: []*pb.Change{
			{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(`[1]`), Row: []byte(`{"id":1}`)},
			{Table: "public.t", Op: pb.Op_OP_DELETE, Key: []byte(`[2]`)},
			{Table: "public.t#t_code_key", Op: pb.Op_OP_UNIQUE_KEY, Key: []byte(`["a"]`)},
			{Table: "public.parent", Op: pb.Op_OP_REFERENCE, Key: []byte(`[9]`)}, // a foreign-key reference
		}},
	}
	e := EncodePrefix(want.Txn, want.Writeset).WithVersion(want.Version, want.Epoch)
	got, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) || e.Version != want.Version {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	v, err := VersionOf(e.Bytes)
	if err != nil || v != want.Version {
		t.Fatalf("VersionOf = %d, %v; want %d", v, err, want.Version)
	}
	if h, err := RawHeaderOf(e.Bytes); err != nil || h.Epoch != want.Epoch {
		t.Fatalf("RawHeaderOf = %+v, %v; want epoch %d", h, err, want.Epoch)
	}
	// The standard encoding (version first) reads the same.
	std, _ := proto.Marshal(want)
	if v, err := VersionOf(std); err != nil || v != want.Version {
		t.Fatalf("VersionOf(standard encoding) = %d, %v", v, err)
	}
}

func TestVersionOfRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{{0xff}, {0x08}, {0x1a, 0x05, 0x01}, {}} {
		if _, err := VersionOf(b); err == nil {
			t.Errorf("VersionOf(%x) succeeded", b)
		}
	}
}

func TestHeaderOfReadsVersionAndTransactionID(t *testing.T) {
	e := Encode(&pb.LogEntry{Version: 99, Txn: &pb.TxnID{Origin: "replica2", Seq: 1 << 41},
		Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "t", Op: pb.Op_OP_DELETE, Key: []byte("[1]")}}}})
	h, err := HeaderOf(e.Bytes)
	if err != nil || h != (Header{Version: 99, Origin: "replica2", Seq: 1 << 41}) {
		t.Fatalf("HeaderOf = %+v, %v", h, err)
	}
}

func TestPrefixOfEncodedWritesetIsTheSameEntry(t *testing.T) {
	ws := &pb.Writeset{Changes: []*pb.Change{
		{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(`[1]`), Row: []byte(`{"id":1}`)},
		{Table: "public.t", Op: pb.Op_OP_DDL, Row: []byte("ALTER TABLE t ADD c int")},
	}}
	encoded, err := proto.Marshal(ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, txn := range []*pb.TxnID{{Origin: "r1", Seq: 7}, {Origin: "r1"}, {Seq: 1 << 60}, {}, nil} {
		want := EncodePrefix(txn, ws).WithVersion(42, 3)
		got := EncodePrefixOfEncoded(txn, encoded).WithVersion(42, 3)
		if string(got.Bytes) != string(want.Bytes) {
			t.Fatalf("txn %v: encoded-writeset prefix gives %x, want %x", txn, got.Bytes, want.Bytes)
		}
		if cap(got.Bytes) > len(got.Bytes)+VersionBytesMax {
			t.Errorf("txn %v: entry of %d bytes was given a buffer of %d", txn, len(got.Bytes), cap(got.Bytes))
		}
	}
}

func TestRawHeaderOfMatchesHeaderOf(t *testing.T) {
	for _, txn := range []*pb.TxnID{{Origin: "replica2", Seq: 1 << 41}, {Origin: "r"}, {Seq: 3}, nil} {
		e := Encode(&pb.LogEntry{Version: 99, Txn: txn,
			Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "t", Op: pb.Op_OP_DELETE, Key: []byte("[1]")}}}})
		want, err := HeaderOf(e.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RawHeaderOf(e.Bytes)
		if err != nil || got.Version != want.Version || string(got.Origin) != want.Origin || got.Seq != want.Seq {
			t.Fatalf("RawHeaderOf = %+v, %v; HeaderOf = %+v", got, err, want)
		}
		if n := testing.AllocsPerRun(100, func() { RawHeaderOf(e.Bytes) }); n != 0 {
			t.Errorf("RawHeaderOf allocates %.0f times", n)
		}
	}
	for _, b := range [][]byte{{0xff}, {0x12, 0x03, 0x0a, 0x05, 0x61}, {0x08}} {
		if _, err := RawHeaderOf(b); err == nil {
			t.Errorf("RawHeaderOf(%x) succeeded", b)
		}
	}
}

func TestSpanEntryDecodesAsTheMessage(t *testing.T) {
	fragment, _ := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{
		{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(`[1]`), Row: []byte(`{"id":1}`)}}})
	certified := &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_TABLE_WRITE}}}
	certifiedBytes, _ := proto.Marshal(certified)
	txn := &pb.TxnID{Origin: "r1", Seq: 1 << 40}
	for _, version := range []uint64{300, 301, 302} {
		e := SpanEntry{Version: version, Txn: txn, Fragment: fragment, First: 300, Last: 302, Certified: certifiedBytes,
			SpanBytes: 3 * uint64(len(fragment)), SpanChecksum: 0x8000_0001, Epoch: 7}
		b := AppendSpanEntry([]byte("reused"), e)[len("reused"):]
		written, slack := 0, 4*VersionBytesMax+5 // the certified writeset, size and checksum: on the last entry
		if version == 302 {
			written, slack = len(certifiedBytes), 3*VersionBytesMax
		}
		if limit := SpanEntryBytesMax(txn, len(fragment), written); len(b) > limit || len(b) < limit-slack {
			t.Fatalf("version %d: %d bytes, SpanEntryBytesMax says %d", version, len(b), limit)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		want := &pb.LogEntry{Version: version, Txn: txn, SpanFirst: 300, SpanLast: 302, Epoch: 7}
		want.Writeset = &pb.Writeset{}
		proto.Unmarshal(fragment, want.Writeset)
		if version == 302 {
			want.Certified = certified // on the last entry only
			want.SpanBytes, want.SpanChecksum = e.SpanBytes, e.SpanChecksum
		}
		if !proto.Equal(got, want) {
			t.Fatalf("version %d decoded %v, want %v", version, got, want)
		}
		h, err := RawHeaderOf(b)
		if err != nil || h.Version != version || h.SpanFirst != 300 || h.SpanLast != 302 || !h.InSpan() || h.Seq != 1<<40 {
			t.Fatalf("RawHeaderOf = %+v, %v", h, err)
		}
		if allocs := testing.AllocsPerRun(100, func() { RawHeaderOf(b) }); allocs != 0 {
			t.Fatalf("RawHeaderOf of a span entry allocates %v times", allocs)
		}
	}
	plain := Encode(&pb.LogEntry{Version: 5, Txn: txn})
	if h, err := RawHeaderOf(plain.Bytes); err != nil || h.InSpan() {
		t.Fatalf("an entry of its own: %+v, %v", h, err)
	}
}

func TestRawHeaderOfRefusesAVersionOutsideItsSpan(t *testing.T) {
	b, _ := proto.Marshal(&pb.LogEntry{Version: 9, SpanFirst: 3, SpanLast: 5})
	if _, err := RawHeaderOf(b); err == nil {
		t.Fatal("version 9 in span 3..5 was accepted")
	}
}

// A barrier is an entry with a TRUNCATE or DDL change, wherever among its
// changes, or a span's entry; row changes are not.
func TestIsBarrierFindsTruncateDDLAndSpans(t *testing.T) {
	row := &pb.Change{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(`[1]`), Row: []byte(`{"id":1}`)}
	entry := func(changes ...*pb.Change) []byte {
		return Encode(&pb.LogEntry{Version: 5, Txn: &pb.TxnID{Origin: "r1", Seq: 1}, Writeset: &pb.Writeset{Changes: changes}}).Bytes
	}
	span, err := proto.Marshal(&pb.LogEntry{Version: 5, SpanFirst: 4, SpanLast: 6, Writeset: &pb.Writeset{Changes: []*pb.Change{row}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		entry []byte
		want  bool
	}{
		{"rows", entry(row, &pb.Change{Table: "public.t", Op: pb.Op_OP_DELETE, Key: []byte(`[2]`)}), false},
		{"empty", entry(), false},
		{"truncate after a row", entry(row, &pb.Change{Table: "public.t", Op: pb.Op_OP_TRUNCATE}), true},
		{"ddl", entry(&pb.Change{Op: pb.Op_OP_DDL, Row: []byte("CREATE TABLE u (id int)")}), true},
		{"span", span, true},
	} {
		if got, err := IsBarrier(c.entry); err != nil || got != c.want {
			t.Errorf("%s: IsBarrier = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if _, err := IsBarrier([]byte{0x1a, 0x05, 0x0a}); err == nil {
		t.Error("IsBarrier of a truncated writeset: no error")
	}
}
