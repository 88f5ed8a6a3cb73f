package certifier

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"google.golang.org/protobuf/proto"
)

// A complete stage that no certify request claims is removed after
// stageIdleMax; a claimed one, or one still being received, is kept.
func TestUnclaimedStageExpires(t *testing.T) {
	area, err := openStagingArea(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spool := func(seq uint64, complete bool) string {
		txn := certification.TxnID{Origin: "r1", Seq: seq}
		f, err := area.begin(txn, stageIdleMax)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := area.reserve(txn, 10, 11, 0); err != nil {
			t.Fatal(err)
		}
		if complete {
			area.complete(txn, now)
		}
		return area.spoolPath(txn)
	}
	idle, claimed, receiving := spool(1, true), spool(2, true), spool(3, false)
	if _, ok := area.claim(&pb.TxnID{Origin: "r1", Seq: 2}); !ok {
		t.Fatal("claim of a complete stage failed")
	}
	area.expire(now.Add(stageIdleMax / 2))
	if _, err := os.Stat(idle); err != nil {
		t.Fatalf("stage removed before stageIdleMax: %v", err)
	}
	area.expire(now.Add(stageIdleMax + time.Second))
	if _, err := os.Stat(idle); !os.IsNotExist(err) {
		t.Fatalf("unclaimed stage still there after stageIdleMax (%v)", err)
	}
	for _, kept := range []string{claimed, receiving} {
		if _, err := os.Stat(kept); err != nil {
			t.Fatalf("%s removed: %v", kept, err)
		}
	}
	if held := area.heldBytes(); held != 22 {
		t.Fatalf("%d bytes held after the expiry, want the other two stages' 22", held)
	}
}

// A certifier group's staging area keeps complete stages across a
// restart: a spool whose completion record matches it is a complete
// stage again, claimable, that expires 2×stageIdleMax after it completed;
// a spool without its record (a stage cut short), with a record that does
// not match, a record without its spool and any other file are removed.
func TestKeptStagingAreaKeepsOnlyCompleteStages(t *testing.T) {
	dataDir := t.TempDir()
	area, err := openKeptStagingArea(dataDir, 1<<20, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{staging: area, cfg: Config{Limits: DefaultLimits}}
	stageOne := func(txn certification.TxnID, fragment []byte) {
		first := &pb.StageRequest{Txn: &pb.TxnID{Origin: txn.Origin, Seq: txn.Seq}}
		if _, err := s.receiveStage(&fragmentStream{fragments: [][]byte{fragment}}, txn, first, stageIdleMax, func([]byte) {}, noStageEnd); err != nil {
			t.Fatal(err)
		}
		area.complete(txn, time.Now())
	}
	complete, mismatched := certification.TxnID{Origin: "r/1", Seq: 7}, certification.TxnID{Origin: "r2", Seq: 8}
	fragment, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte("(1)")}}})
	if err != nil {
		t.Fatal(err)
	}
	stageOne(complete, fragment)
	stageOne(mismatched, fragment)
	f, err := os.OpenFile(area.spoolPath(mismatched), os.O_APPEND|os.O_WRONLY, 0) // a longer spool than its record says
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{1})
	f.Close()
	partial := area.spoolPath(certification.TxnID{Origin: "r3", Seq: 1})
	orphan := completionPath(area.spoolPath(certification.TxnID{Origin: "r4", Seq: 1}))
	for _, p := range []string{partial, orphan, filepath.Join(area.dir, "junk")} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	again, err := openKeptStagingArea(dataDir, 1<<20, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(again.dir)
	if len(names) != 2 || len(again.txns) != 1 {
		t.Fatalf("after the restart the stage directory holds %v, the area %d stages; want the complete stage's spool and record", names, len(again.txns))
	}
	staged, ok := again.claim(&pb.TxnID{Origin: complete.Origin, Seq: complete.Seq})
	if !ok || staged.Fragments != 1 || staged.Bytes != uint64(len(fragment)) || staged.LastFragmentBytes != len(fragment) {
		t.Fatalf("claim of the kept stage: %+v, %v", staged, ok)
	}
	again.release(complete, time.Now())
	again.expire(time.Now().Add(stageIdleMax + time.Minute))
	if _, ok := again.claim(&pb.TxnID{Origin: complete.Origin, Seq: complete.Seq}); !ok {
		t.Fatal("the kept stage expired after stageIdleMax, before 2×stageIdleMax")
	}
	again.release(complete, time.Now())
	if copied := again.expire(time.Now().Add(2*stageIdleMax + time.Minute)); len(copied) != 0 {
		t.Fatalf("a kept copy expired as a stage this member copied to others: %v", copied)
	}
	if names, _ := os.ReadDir(again.dir); len(names) != 0 || again.heldBytes() != 0 {
		t.Fatalf("after 2×stageIdleMax the stage directory holds %v (%d bytes held)", names, again.heldBytes())
	}
}

// fragmentStream is a Stage stream that sends its fragments after its
// first message, then closes.
type fragmentStream struct{ fragments [][]byte }

func (s *fragmentStream) Recv() (*pb.StageRequest, error) {
	if len(s.fragments) == 0 {
		return nil, io.EOF
	}
	f := s.fragments[0]
	s.fragments = s.fragments[1:]
	return &pb.StageRequest{Fragment: f}, nil
}

// A stage this member copied to others (a group leader's) is named when it
// expires, so that the others hear it is over; the leader's word removes
// a member's copy only while no request or writer holds it.
func TestStagingAreaExpiryNamesCopiedStagesAndDiscardCopySparesHeldOnes(t *testing.T) {
	area := newStagingArea(t.TempDir(), 1<<20)
	own, copy := certification.TxnID{Origin: "r1", Seq: 1}, certification.TxnID{Origin: "r1", Seq: 2}
	for _, txn := range []certification.TxnID{own, copy} {
		f, err := area.begin(txn, stageIdleMax)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		area.complete(txn, time.Now())
	}
	area.markCopied(own)
	copied := area.expire(time.Now().Add(stageIdleMax + time.Minute))
	if len(copied) != 1 || copied[0] != own || len(area.txns) != 0 {
		t.Fatalf("expired, copied to others: %v; %d stages left", copied, len(area.txns))
	}

	f, err := area.begin(copy, 2*stageIdleMax)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if area.discardCopy(copy) {
		t.Fatal("an incomplete copy was discarded")
	}
	area.complete(copy, time.Now())
	if _, ok := area.claim(&pb.TxnID{Origin: copy.Origin, Seq: copy.Seq}); !ok {
		t.Fatal("claim")
	}
	if area.discardCopy(copy) {
		t.Fatal("a claimed copy was discarded")
	}
	area.release(copy, time.Now())
	if !area.discardCopy(copy) || len(area.txns) != 0 {
		t.Fatal("an unclaimed complete copy was not discarded")
	}
}
