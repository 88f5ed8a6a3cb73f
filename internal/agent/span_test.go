package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// A span of 30 fragments of about 1 MiB committed by another replica
// through the real certifier is applied by both replicas as one
// transaction (rows, a key deleted in one fragment and inserted again in
// a later one), while each agent holds no more than its backlog bound
// plus one stream message of delivered bytes.
func TestARemoteSpanFlowsThroughASmallBacklog(t *testing.T) {
	const backlog = 1 << 20
	c, base := startWithSchema(t, 2, clustertest.Options{Agent: func(i int, cfg *agent.Config) { cfg.ApplyBacklogBytes = backlog }}, schema)
	pad := strings.Repeat("p", 10000)
	var frags [][]byte
	for f := 0; f < 30; f++ {
		ws := &pb.Writeset{}
		for k := f * 100; k < f*100+100; k++ {
			ws.Changes = append(ws.Changes, &pb.Change{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte(fmt.Sprintf("[%d]", k)), Row: []byte(fmt.Sprintf("(%d,%s%d)", k, pad, f))})
		}
		if f == 1 {
			ws.Changes = append(ws.Changes, &pb.Change{Table: "public.t", Op: pb.Op_OP_DELETE, Key: []byte("[5]")})
		}
		if f == 2 {
			ws.Changes = append(ws.Changes, &pb.Change{Table: "public.t", Op: pb.Op_OP_UPSERT, Key: []byte("[5]"), Row: []byte("(5,again)")})
		}
		b, _ := proto.Marshal(ws)
		frags = append(frags, b)
	}
	addr := c.Certifier.Addr().String()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	txn := &pb.TxnID{Origin: "outsider#1", Seq: 1}
	st, err := pb.NewCertifierClient(conn).Stage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frags {
		m := &pb.StageRequest{Fragment: f}
		if i == 0 {
			m.Txn = txn
		}
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	staged, err := st.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := certclient.New(certclient.Options{Target: addr, Replica: "outsider", ReplicaVersion: base})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	certified, _ := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_TABLE_WRITE}}})
	most := make([]int, 2)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for i := range 2 {
				most[i] = max(most[i], c.Agents[i].BacklogBytes())
			}
		}
	}()
	reply, err := cl.CertifyEncoded(context.Background(), &pb.CertifyRequestEncoded{Txn: txn, StartVersion: base, Writeset: certified,
		Streamed: &pb.Streamed{Fragments: staged.GetFragments(), Bytes: staged.GetBytes()}})
	if err != nil || reply.Decision != pb.Decision_DECISION_COMMIT {
		t.Fatalf("certify: %v %v", reply, err)
	}
	t.Logf("span %d..%d", reply.FirstVersion, reply.CommitVersion)
	for i := range 2 {
		c.AwaitCommitted(i, reply.CommitVersion, time.Minute)
	}
	close(stop)
	<-stopped
	// The certifier packs up to 4 MiB of entries in one stream message,
	// which the agent takes whole.
	const message = 4<<20 + 1<<20
	for i, n := range most {
		if n > backlog+message {
			t.Errorf("replica %d's agent held %d bytes of delivered versions, over its bound %d plus one message", i+1, n, backlog)
		}
	}
	t.Logf("most backlog bytes held: %v (bound %d)", most, backlog)
	for i := range 2 {
		rows := c.Rows(i, "t")
		if n := strings.Count(rows, "("); n != 3000 || !strings.Contains(rows, "(5,again)") {
			t.Errorf("replica %d: %d rows, row 5 again: %v", i+1, n, strings.Contains(rows, "(5,again)"))
		}
	}
}
