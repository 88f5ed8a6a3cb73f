package certifier_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
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

// A log whose start retention removed still knows the epoch of the entry
// it starts after, also after a restart: a replica exactly at the start
// is admitted in that epoch and refused in another (the version alone
// would admit it). A data directory without that record (written before
// the certifier kept it) admits such a replica by its version.
func TestAdmissionComparesAReplicaAtTheStartOfATrimmedLog(t *testing.T) {
	dir := t.TempDir()
	cfg := certifier.Config{DataDir: dir, SegmentBytes: 1 << 10, WindowVersions: 20,
		Retention: certifier.RetentionPolicy{Bytes: -1, ReplicaTimeout: time.Hour, Interval: 20 * time.Millisecond}}
	srv := listen(t, cfg)
	var epoch atomic.Uint64
	zero := uint64(0)
	a, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "a", AppliedVersion: &zero,
		OnEntries: func(entries []logentry.Entry, _ uint64) error {
			for _, e := range entries {
				h, err := logentry.RawHeaderOf(e.Bytes)
				if err != nil {
					return err
				}
				epoch.Store(h.Epoch)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	commitReporting(t, a, "a", 1, 200)
	a.RequestCatchUp()
	awaitStatus(t, srv, "retention keeps the certification window only", func(st *pb.StatusReply) bool {
		return st.Retention.GetKeepFrom() == 181 && st.LogFirstVersion > 100
	})
	start := srv.Service.StatusNow().LogFirstVersion - 1
	ours := []*pb.EpochRun{{Epoch: epoch.Load(), FirstVersion: 1}}
	other := []*pb.EpochRun{{Epoch: 1, FirstVersion: 1}}
	probe := func(when string) {
		t.Helper()
		if err := openWith(t, srv, start, ours); err != nil {
			t.Fatalf("%s: a replica at the log's start %d with the log's history is refused: %v", when, start, err)
		}
		err := openWith(t, srv, start, other)
		if status.Code(err) != codes.FailedPrecondition || !strings.HasPrefix(status.Convert(err).Message(), pb.NeedsStateTransfer) ||
			!strings.Contains(err.Error(), fmt.Sprintf("at most up to version %d", start-1)) {
			t.Fatalf("%s: a replica at the log's start %d with another history: %v, want refused as agreeing at most up to %d", when, start, err, start-1)
		}
	}
	probe("as retention removed the start")
	a.Close()
	srv.Close()

	cfg.Retention.Interval = time.Hour // the log's start stays where it is
	srv = listen(t, cfg)
	probe("after a restart")
	srv.Close()

	if err := os.Remove(filepath.Join(dir, "log-start.json")); err != nil {
		t.Fatal(err)
	}
	srv = listen(t, cfg)
	if err := openWith(t, srv, start, other); err != nil {
		t.Fatalf("without the record of the epoch at the log's start, a replica exactly there is refused: %v", err)
	}
}

// A single certifier's messages name its generation and the first version
// it certifies in it: after a restart, a later epoch from the version
// after the log's last.
func TestAStreamHearsTheEpochItsCertifierCertifiesIn(t *testing.T) {
	dir := t.TempDir()
	srv := listen(t, certifier.Config{DataDir: dir})
	first := openEarly(t, srv, "r1")
	if reply := first.certify(1, 1); reply.CommitVersion != 1 || first.epoch == 0 || first.epochFirst != 1 {
		t.Fatalf("reply %v; epoch %d from version %d: want a generation from version 1", reply, first.epoch, first.epochFirst)
	}
	srv.Close()
	srv = listen(t, certifier.Config{DataDir: dir})
	second := openEarly(t, srv, "r2")
	if reply := second.certify(1, 2); reply.CommitVersion != 2 || second.epoch <= first.epoch || second.epochFirst != 2 {
		t.Fatalf("after a restart: reply %v; epoch %d from version %d: want a later generation than %d, from version 2",
			reply, second.epoch, second.epochFirst, first.epoch)
	}
}
