package certifier

import (
	"os"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
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
		f, err := area.begin(txn)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := area.reserve(txn, 10, 11); err != nil {
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
