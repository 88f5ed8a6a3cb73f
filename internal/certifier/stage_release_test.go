package certifier

import (
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
)

// A streamed request refused as overloaded is aborted: its backend rolls
// back and retries under a new transaction id, so nothing will ever claim
// its stage. The stage must be let go with the decision, as for any other
// abort, not held against --stage-bytes-max until stageIdleMax.
func TestAnOverloadedStreamedRequestReleasesItsStage(t *testing.T) {
	area, err := openStagingArea(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	txn := certification.TxnID{Origin: "r1", Seq: 7}
	f, err := area.begin(txn)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := area.reserve(txn, 100, 101); err != nil {
		t.Fatal(err)
	}
	staged := area.complete(txn, time.Now())
	ws, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: `public."t"`, Op: pb.Op_OP_TABLE_WRITE}}})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.CertifyRequestEncoded{Txn: &pb.TxnID{Origin: "r1", Seq: 7}, StartVersion: 0, Writeset: ws,
		Streamed: &pb.Streamed{Fragments: staged.Fragments, Bytes: staged.Bytes}}
	s := &Service{staging: area}
	batch := []certifying{prepareRequest(req, true, DefaultLimits, area.claim)}
	state := certification.New(certification.Config{}, 0)
	decideSingle(state, batch, nil)
	s.settleStages(batch)
	if reply, _ := replyTo(&batch[0], DefaultLimits.InFlightRequestsMax); reply.Decision != pb.Decision_DECISION_ABORT {
		t.Fatalf("overloaded request answered %v", reply.Decision)
	}
	if held := area.heldBytes(); held != 0 {
		t.Errorf("the aborted request's stage still holds %d bytes of --stage-bytes-max", held)
	}
	if _, err := os.Stat(area.spoolPath(txn)); !os.IsNotExist(err) {
		t.Errorf("the aborted request's spool file is still there (%v)", err)
	}
}
