package certifier

import (
	"errors"
	"hash/crc32"
	"log/slog"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

func testFragments(t *testing.T, n int) [][]byte {
	t.Helper()
	var frags [][]byte
	for i := range n {
		b, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte{'[', byte('0' + i), ']'}, Row: []byte("(1)")}}})
		if err != nil {
			t.Fatal(err)
		}
		frags = append(frags, b)
	}
	return frags
}

// A stage's checksum, computed as its fragments are spooled, is the
// CRC-32C of the spool file (each fragment's length, then its bytes) and
// logentry.SpanChecksum over the fragments; a group member's completion
// record keeps it across a restart.
func TestStageChecksumIsTheSpoolsCRC32CAndSurvivesARestart(t *testing.T) {
	dataDir := t.TempDir()
	area, err := openKeptStagingArea(dataDir, 1<<20, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{staging: area, cfg: Config{Limits: DefaultLimits}}
	frags := testFragments(t, 3)
	txn := certification.TxnID{Origin: "r1", Seq: 9}
	first := &pb.StageRequest{Txn: &pb.TxnID{Origin: txn.Origin, Seq: txn.Seq}, Fragment: frags[0]}
	staged, err := s.receiveStage(&fragmentStream{fragments: frags[1:]}, txn, first, stageIdleMax, func([]byte) {}, noStageEnd)
	if err != nil {
		t.Fatal(err)
	}
	spool, err := os.ReadFile(staged.Spool)
	if err != nil {
		t.Fatal(err)
	}
	var want uint32
	for _, f := range frags {
		want = logentry.SpanChecksum(want, f)
	}
	if file := crc32.Checksum(spool, crc32.MakeTable(crc32.Castagnoli)); staged.Checksum != file || staged.Checksum != want {
		t.Fatalf("stage checksum %#x; the spool file's CRC-32C is %#x, SpanChecksum of the fragments %#x", staged.Checksum, file, want)
	}

	again, err := openKeptStagingArea(dataDir, 1<<20, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	kept, ok := again.take(txn)
	if !ok || kept.Checksum != staged.Checksum || kept.Bytes != staged.Bytes || kept.Fragments != 3 {
		t.Fatalf("after a restart the stage is %+v (%v), want %+v", kept, ok, staged)
	}
}

// A group member checks its stage, and a fetched span, against the
// committed head: the count, size and checksum of the fragments, and, on
// the last fetched entry, the head's certified writeset, size and
// checksum. A head without a size (encoded without one) is checked on
// the count only.
func TestSpanCheckAgainstItsHead(t *testing.T) {
	frags := testFragments(t, 2)
	var bytes uint64
	var checksum uint32
	for _, f := range frags {
		bytes, checksum = bytes+uint64(len(f)), logentry.SpanChecksum(checksum, f)
	}
	txn := &pb.TxnID{Origin: "r1", Seq: 3}
	sp := committedSpan{first: 5, last: 6, txn: txn, certified: []byte{0x0a, 0x00}, bytes: bytes, checksum: checksum}
	if err := sp.checkStage(StagedWriteset{Fragments: 2, Bytes: bytes, Checksum: checksum}); err != nil {
		t.Fatalf("the staged fragments do not match their head: %v", err)
	}
	for _, other := range []StagedWriteset{{Fragments: 2, Bytes: bytes, Checksum: checksum + 1}, {Fragments: 2, Bytes: bytes + 1, Checksum: checksum}, {Fragments: 1, Bytes: bytes, Checksum: checksum}} {
		if err := sp.checkStage(other); err == nil {
			t.Fatalf("stage %+v matches the head of %d bytes, checksum %#x", other, bytes, checksum)
		}
	}
	unsized := sp
	unsized.bytes, unsized.checksum = 0, 0
	if err := unsized.checkStage(StagedWriteset{Fragments: 2, Bytes: 1, Checksum: 1}); err != nil {
		t.Fatalf("a head without a size refused a stage of the right count: %v", err)
	}

	entry := func(v uint64, fragment []byte, last logentry.SpanEntry) []byte {
		e := last
		e.Version, e.Fragment = v, fragment
		return logentry.AppendSpanEntry(nil, e)
	}
	head := logentry.SpanEntry{Txn: txn, First: 5, Last: 6, Certified: sp.certified, SpanBytes: bytes, SpanChecksum: checksum}
	for v, f := range frags {
		got, err := checkFetchedSpanEntry(entry(uint64(5+v), f, head), uint64(5+v), sp)
		if err != nil || string(got) != string(f) {
			t.Fatalf("fetched entry %d: %v", 5+v, err)
		}
	}
	otherHead := head
	otherHead.SpanChecksum++
	var mismatch spanMismatchError
	if _, err := checkFetchedSpanEntry(entry(6, frags[1], otherHead), 6, sp); !errors.As(err, &mismatch) {
		t.Fatalf("a last entry with another checksum than the head: %v, want a mismatch", err)
	}
}
