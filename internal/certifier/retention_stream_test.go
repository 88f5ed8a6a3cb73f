package certifier_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

// Over real streams: an agent's reported version reaches the certifier's
// status and holds the log; an agent that does not report (older than
// the field) holds it at the version it opened at, while its session is
// open only; and a replica that opens below what the log still holds is
// refused as needing a state transfer.
func TestStreamsReportProgressAndABehindReplicaIsRefused(t *testing.T) {
	srv := listen(t, certifier.Config{SegmentBytes: 1 << 10, WindowVersions: 20,
		Retention: certifier.RetentionPolicy{Bytes: -1, ReplicaTimeout: time.Hour, Interval: 20 * time.Millisecond}})
	zero := uint64(0)
	a, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "a", AppliedVersion: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	old, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "old"})
	if err != nil {
		t.Fatal(err)
	}
	commitReporting(t, a, "a", 1, 200)
	a.RequestCatchUp() // a message to carry the last version
	awaitStatus(t, srv, "a reports version 200; the agent that does not report holds the log at version 0", func(st *pb.StatusReply) bool {
		return reported(st, "a") == 200 && st.Retention.GetHeldBy() == "old" && st.Retention.GetKeepFrom() == 1 && st.LogFirstVersion == 1
	})
	old.Close()
	awaitStatus(t, srv, "once its session ended, the log lets go", func(st *pb.StatusReply) bool {
		return st.Retention.GetHeldBy() == "" && st.LogFirstVersion > 100 && !listed(st, "old")
	})

	refused := make(chan error, 1)
	late, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "late", ReplicaVersion: 50, AppliedVersion: &zero,
		OnRefused: func(err error) {
			select {
			case refused <- err:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	select {
	case err := <-refused:
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), pb.NeedsStateTransfer+": ") {
			t.Fatalf("a replica at version 50 of a log that starts after it: %v, want FailedPrecondition, %q", err, pb.NeedsStateTransfer)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a replica behind the log was not refused")
	}
}

func reported(st *pb.StatusReply, name string) uint64 {
	for _, r := range st.Replicas {
		if r.Name == name {
			return r.AppliedVersion
		}
	}
	return 0
}

func listed(st *pb.StatusReply, name string) bool {
	for _, r := range st.Replicas {
		if r.Name == name {
			return true
		}
	}
	return false
}

func awaitStatus(t *testing.T, srv *certifier.Server, what string, ok func(*pb.StatusReply) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := srv.Service.StatusNow()
		if ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s; first version %d, retention %v, replicas %v", what, st.LogFirstVersion, st.Retention, st.Replicas)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
