package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
)

// BenchmarkCertifyThroughTheAgent measures one backend's certification
// through the agent's socket against the same request sent by a
// certclient of its own to the same certifier (the agent's cost is the
// ratio), and how fast the other replica's agent, started afterwards,
// catches up with all of it (remote versions per second, in batches).
//
//	go test -run '^$' -bench CertifyThroughTheAgent -benchtime 2000x ./internal/agent/
func BenchmarkCertifyThroughTheAgent(b *testing.B) {
	c := startCluster(b, 2)
	c.exec(`CREATE TABLE t (k int PRIMARY KEY, v text)`)
	direct, err := certclient.New(certclient.Options{Target: c.certifier.Addr().String(), Replica: "direct"})
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	ctx := context.Background()
	viaAgent, viaDirect := time.Duration(0), time.Duration(0)
	s := c.session(1)
	c.stopAgent(0)
	var last uint64
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		last = s.commit(0, upsert(2*i, "agent"))
		viaAgent += time.Since(start)
		ws, _ := proto.Marshal(upsert(2*i+1, "direct"))
		start = time.Now()
		r, err := direct.CertifyEncoded(ctx, &pb.CertifyRequestEncoded{Txn: &pb.TxnID{Origin: "direct", Seq: uint64(i + 1)}, Writeset: ws})
		viaDirect += time.Since(start)
		if err != nil || r.Decision != pb.Decision_DECISION_COMMIT {
			b.Fatalf("direct certification: %v %v", r, err)
		}
		last = max(last, r.CommitVersion)
	}
	b.StopTimer()
	applyStart := time.Now()
	c.startAgent(0)
	c.awaitCommitted(0, last, 5*time.Minute)
	applyTook := time.Since(applyStart)
	b.ReportMetric(float64(viaAgent.Microseconds())/float64(b.N), "agent-µs/certify")
	b.ReportMetric(float64(viaDirect.Microseconds())/float64(b.N), "direct-µs/certify")
	b.ReportMetric(float64(viaAgent)/float64(viaDirect), "agent/direct")
	fmt.Printf("replica 1 caught up with %d versions in %v (agent start included): %.0f versions/s\n",
		last, applyTook.Round(time.Millisecond), float64(last)/applyTook.Seconds())
	s.close()
}
