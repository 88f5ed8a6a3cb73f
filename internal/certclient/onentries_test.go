package certclient_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// An OnEntries that waits (the agent waits for room in its apply
// backlog) for more than a second while a request is pending is no stall
// of the certifier's: with several members, the client does not leave a
// healthy leader for it.
func TestAWaitingOnEntriesIsNotAStall(t *testing.T) {
	port, _ := netutil.FreePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv := listen(t, t.TempDir(), addr)
	defer srv.Close()
	other, _ := netutil.FreePort() // no one listens: a dead member
	var logs testbin.Output
	var once sync.Once
	client, err := certclient.New(certclient.Options{Target: addr + ",127.0.0.1:" + strconv.Itoa(other), Replica: "r1",
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnEntries: func(entries []logentry.Entry, _ uint64) error {
			if len(entries) > 0 {
				once.Do(func() { time.Sleep(2500 * time.Millisecond) })
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := client.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: 1},
		Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte("k"), Row: []byte("x")}}}})
	if err != nil || r.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("certify: %v, %v", r, err)
	}
	time.Sleep(500 * time.Millisecond)
	if strings.Contains(logs.String(), "reopening") {
		t.Errorf("the client reconnected away from a healthy certifier while OnEntries waited:\n%s", logs.String())
	}
}
