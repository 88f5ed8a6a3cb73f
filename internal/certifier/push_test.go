package certifier_test

import (
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// A stream that asks for pushes (OpenSession.push) gets every entry as
// soon as it is durable (stream.go, sendLoop): a replica that certifies
// nothing and never asks for a catch-up still receives, in order, what
// other replicas commit.
func TestEntriesArePushedToAQuietStream(t *testing.T) {
	srv := listen(t, certifier.Config{})
	quiet := rawStream(t, srv)
	if err := quiet.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "quiet", Push: true}}); err != nil {
		t.Fatal(err)
	}

	busy := connect(t, srv, "busy", 0)
	for pk := 1; pk <= 3; pk++ {
		if r := busy.certify(t, uint64(pk-1), upsert("public.t", pk)); r.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("certify %d: %v", pk, r)
		}
	}
	next := uint64(1)
	for next <= 3 {
		msg, err := quiet.Recv()
		if err != nil {
			t.Fatalf("quiet stream, waiting for version %d: %v", next, err)
		}
		if len(msg.Replies) != 0 {
			t.Fatalf("quiet stream got replies to requests it never sent: %v", msg.Replies)
		}
		for _, raw := range msg.Entries {
			v, err := logentry.VersionOf(raw)
			if err != nil {
				t.Fatal(err)
			}
			if v != next {
				t.Fatalf("quiet stream got version %d, want %d", v, next)
			}
			next++
		}
	}
}
