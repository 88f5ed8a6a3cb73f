package certifier_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

// historyOf is the runs of delivered entries, as a replica records them.
func historyOf(entries []*pb.LogEntry) []*pb.EpochRun {
	var runs []*pb.EpochRun
	for _, e := range entries {
		if len(runs) == 0 || runs[len(runs)-1].Epoch != e.GetEpoch() {
			runs = append(runs, &pb.EpochRun{Epoch: e.GetEpoch(), FirstVersion: e.GetVersion()})
		}
	}
	return runs
}

// certifyMany commits n transactions through a fresh replica stream
// opened at from and returns what it was delivered.
func certifyMany(t *testing.T, srv *certifier.Server, name string, from uint64, n int) []*pb.LogEntry {
	t.Helper()
	r := connect(t, srv, name, from)
	for i := range n {
		if reply := r.certify(t, from+uint64(i), upsert("public."+name, i)); reply.CommitVersion != from+uint64(i)+1 {
			t.Fatalf("%s: commit %d: %v", name, i, reply)
		}
	}
	r.client.Close()
	return r.delivered()
}

// openWith opens a session with the given history and returns the error
// the stream ends with, nil if the certifier answered its catch-up.
func openWith(t *testing.T, srv *certifier.Server, version uint64, history []*pb.EpochRun) error {
	t.Helper()
	stream := rawStream(t, srv)
	if err := stream.Send(&pb.CertifyStreamRequest{Open: &pb.OpenSession{Replica: "probe", ReplicaVersion: version, History: history}, CatchUp: true}); err != nil {
		t.Fatal(err)
	}
	_, err := stream.Recv()
	return err
}

// Two certifiers that each committed versions 1..10 from an empty
// directory: a replica that holds one's history is refused by the other
// (the version numbers alone would admit it), and a restart's new
// generation is told apart from the one before it, also after the
// restart that scans the log for its epochs.
func TestAdmissionTellsHistoriesApartByTheirEpochs(t *testing.T) {
	dirA := t.TempDir()
	srvA := listen(t, certifier.Config{DataDir: dirA})
	first := certifyMany(t, srvA, "a1", 0, 5)
	srvA.Close()
	srvA = listen(t, certifier.Config{DataDir: dirA})
	second := certifyMany(t, srvA, "a2", 5, 5)
	srvA.Close()
	historyA := historyOf(append(first[:5:5], second...))
	if len(historyA) != 2 || historyA[0].Epoch == 0 || historyA[1].Epoch <= historyA[0].Epoch || historyA[1].FirstVersion != 6 {
		t.Fatalf("a restart did not start a new epoch at version 6: history %v", historyA)
	}

	srvB := listen(t, certifier.Config{})
	historyB := historyOf(certifyMany(t, srvB, "b", 0, 10))
	if len(historyB) != 1 || historyB[0].Epoch == historyA[0].Epoch || historyB[0].Epoch == historyA[1].Epoch {
		t.Fatalf("a second certifier from an empty directory reuses an epoch: %v and %v", historyB, historyA)
	}
	err := openWith(t, srvB, 10, historyA)
	if status.Code(err) != codes.FailedPrecondition || !strings.HasPrefix(status.Convert(err).Message(), pb.NeedsRewind) ||
		!strings.Contains(err.Error(), "only up to version 0") {
		t.Fatalf("certifier B admitted (or refused otherwise) a replica holding A's versions 1..10: %v", err)
	}
	if err := openWith(t, srvB, 10, historyB); err != nil {
		t.Fatalf("certifier B refused its own history: %v", err)
	}

	srvA = listen(t, certifier.Config{DataDir: dirA}) // its epochs come from scanning its log
	if err := openWith(t, srvA, 10, historyA); err != nil {
		t.Fatalf("certifier A refused its own history after a restart: %v", err)
	}
	if err := openWith(t, srvA, 7, historyA); err != nil {
		t.Fatalf("certifier A refused a prefix of its history: %v", err)
	}
	oneEpoch := []*pb.EpochRun{{Epoch: historyA[0].Epoch, FirstVersion: 1}}
	if err := openWith(t, srvA, 10, oneEpoch); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "only up to version 5") {
		t.Fatalf("certifier A admitted (or refused otherwise) versions 6..10 of its first generation, which never certified them: %v", err)
	}
}
