package certclient_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

// A request too large for the client to send, and one the certifier's
// limits refuse, are each aborted with LIMIT at once, and the stream goes
// on serving the next request. Otherwise a writeset too large for the
// transport (pgbench's initial load at scale 16 is one of 160 MB) breaks the
// stream, the client sends it again after every reconnect, and every session
// of the replica waits for the certify timeout.
func TestOversizedRequestsAbortAtOnceAndTheStreamGoesOn(t *testing.T) {
	srv, err := certifier.Listen(certifier.Config{DataDir: t.TempDir(),
		Limits: certifier.Limits{WritesetBytesMax: 1 << 20}}, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "r1", MessageBytesMax: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	cases := []struct {
		name     string
		rowBytes int
		want     pb.Decision
	}{
		{"over the client's message limit", 8 << 20, pb.Decision_DECISION_ABORT},
		{"over the certifier's writeset limit", 2 << 20, pb.Decision_DECISION_ABORT},
		{"over twice the certifier's writeset limit", 7 << 19, pb.Decision_DECISION_ABORT},
		{"small", 100, pb.Decision_DECISION_COMMIT},
	}
	for i, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		began := time.Now()
		r, err := client.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: uint64(i + 1)},
			Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT,
				Key: []byte("[" + strconv.Itoa(i) + "]"), Row: bytes.Repeat([]byte("x"), c.rowBytes)}}}})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.Decision != c.want {
			t.Fatalf("%s: decision %v (%s), want %v", c.name, r.Decision, r.Detail, c.want)
		}
		if c.want == pb.Decision_DECISION_ABORT && r.AbortReason != pb.AbortReason_ABORT_REASON_LIMIT {
			t.Fatalf("%s: abort reason %v (%s), want LIMIT", c.name, r.AbortReason, r.Detail)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Fatalf("%s: answered after %v", c.name, took)
		}
		t.Logf("%s: %v %v %q", c.name, r.Decision, r.AbortReason, r.Detail)
	}
}
