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
	txn := certification.TxnID{Origin: "r1", Seq: 7}
	area, req := stagedRequest(t, txn)
	req.RequestId = 1
	s := &Service{staging: area, order: &singleLog{}}
	batch := []certifying{prepareRequest(req, true, DefaultLimits)}
	claimStages(batch, area.claim)
	state := certification.New(certification.Config{}, 0)
	decideSingle(state, 0, batch, nil)
	s.settleStages(batch, len(batch))
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

// A streamed request re-sent while the first is in flight (the session
// broke and the client re-sent it) is decided after it, whichever was
// read first: the one decided second finds the stage claimed and used,
// and gets the committed span back, never "nothing was committed".
func TestAStreamedRequestSentTwiceCommitsOnce(t *testing.T) {
	area, template := stagedRequest(t, certification.TxnID{Origin: "r1", Seq: 9})
	request := func(id uint64) *pb.CertifyRequestEncoded {
		req := proto.Clone(template).(*pb.CertifyRequestEncoded)
		req.RequestId = id
		return req
	}
	// Both prepared (read) before either is decided.
	first := []certifying{prepareRequest(request(1), false, DefaultLimits)}
	second := []certifying{prepareRequest(request(2), false, DefaultLimits)}
	state := certification.New(certification.Config{}, 0)
	for _, batch := range [][]certifying{second, first} {
		claimStages(batch, area.claim)
		decideSingle(state, 0, batch, nil)
		reply, _ := replyTo(&batch[0], DefaultLimits.InFlightRequestsMax)
		if reply.Decision != pb.Decision_DECISION_COMMIT || reply.FirstVersion != 1 || reply.CommitVersion != 1 {
			t.Fatalf("request %d: %v, want the commit of version 1..1", batch[0].req.RequestId, reply)
		}
	}
	if v := state.Version(); v != 1 {
		t.Fatalf("the transaction took versions up to %d, want it once", v)
	}
}

// stagedRequest stages one (empty) fragment of txn in a new staging area
// and returns the area and the streamed request that certifies it on a
// table.
func stagedRequest(t *testing.T, txn certification.TxnID) (*stagingArea, *pb.CertifyRequestEncoded) {
	t.Helper()
	area, err := openStagingArea(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	f, err := area.begin(txn, stageIdleMax)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := area.reserve(txn, 100, 101, 0); err != nil {
		t.Fatal(err)
	}
	staged := area.complete(txn, time.Now())
	ws, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: `public."t"`, Op: pb.Op_OP_TABLE_WRITE}}})
	if err != nil {
		t.Fatal(err)
	}
	return area, &pb.CertifyRequestEncoded{Txn: &pb.TxnID{Origin: txn.Origin, Seq: txn.Seq}, Writeset: ws,
		Streamed: &pb.Streamed{Fragments: staged.Fragments, Bytes: staged.Bytes}}
}
