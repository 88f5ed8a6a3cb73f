package bench

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A real `tashkent certifier --unsafe-fault-fsync-delay D` (what the bench
// starts in the slow-disk regime) answers no commit before its log sync
// plus D: each of a few serial certifications takes at least D.
func TestCertifierFsyncDelayFlag(t *testing.T) {
	const delay = 30 * time.Millisecond
	bin := testbin.Path(t)
	dir := t.TempDir()
	port, err := netutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p, err := startProc("certifier", bin, []string{"--log-level=warn", "certifier", "--data-dir", filepath.Join(dir, "log"),
		"--listen", addr, "--metrics-listen", "", "--unsafe-fault-fsync-delay", delay.String()}, filepath.Join(dir, "certifier.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.stop(certGrace); err != nil {
			t.Errorf("stop the certifier (pid %d): %v", p.pid(), err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.waitReady(ctx, readyTimeout, func(ctx context.Context) error {
		_, err := cluster.QueryCertifier(ctx, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	client, err := certclient.New(certclient.Options{Target: addr, Replica: "slowdisk-test", OnEntries: func([]logentry.Entry, uint64) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for seq := uint64(1); seq <= 3; seq++ {
		start := time.Now()
		reply, err := client.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "slowdisk-test", Seq: seq}, StartVersion: client.Delivered(),
			Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte("[" + strconv.FormatUint(seq, 10) + "]"), Row: []byte(`{"v":1}`)}}}})
		took := time.Since(start)
		if err != nil || reply.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("certify %d: %v %v\n%s", seq, reply, err, p.logTail())
		}
		if took < delay {
			t.Errorf("commit %d answered after %s, before the %s fsync delay: the flag did not reach the log's sync", seq, took, delay)
		}
	}
}
