package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// BenchmarkCertifyThroughTheAgent measures one backend's certification
// through the agent's socket against the same request sent by a
// certclient of its own to the same certifier (the agent's cost is the
// ratio), and how fast the other replica's agent, started afterwards,
// catches up with all of it (remote versions per second, in batches).
// The backend is simulated: what is measured is the agent's path, not a
// session's commit.
//
//	go test -run '^$' -bench CertifyThroughTheAgent -benchtime 2000x ./internal/agent/
func BenchmarkCertifyThroughTheAgent(b *testing.B) {
	c, base := startWithSchema(b, 2, clustertest.Options{}, schema)
	direct, err := certclient.New(certclient.Options{Target: c.Certifier.Addr().String(), Replica: "direct"})
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	ctx := context.Background()
	viaAgent, viaDirect := time.Duration(0), time.Duration(0)
	s := simulated(b, c, 1)
	c.StopAgent(0)
	var last uint64
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		last = s.commit(base, upsert(2*i, "agent"))
		viaAgent += time.Since(start)
		ws, _ := proto.Marshal(upsert(2*i+1, "direct"))
		start = time.Now()
		r, err := direct.CertifyEncoded(ctx, &pb.CertifyRequestEncoded{Txn: &pb.TxnID{Origin: "direct", Seq: uint64(i + 1)},
			StartVersion: base, Writeset: ws})
		viaDirect += time.Since(start)
		if err != nil || r.Decision != pb.Decision_DECISION_COMMIT {
			b.Fatalf("direct certification: %v %v", r, err)
		}
		last = max(last, r.CommitVersion)
	}
	b.StopTimer()
	applyStart := time.Now()
	c.StartAgent(0)
	c.AwaitCommitted(0, last, 5*time.Minute)
	applyTook := time.Since(applyStart)
	b.ReportMetric(float64(viaAgent.Microseconds())/float64(b.N), "agent-µs/certify")
	b.ReportMetric(float64(viaDirect.Microseconds())/float64(b.N), "direct-µs/certify")
	b.ReportMetric(float64(viaAgent)/float64(viaDirect), "agent/direct")
	fmt.Printf("replica 1 caught up with %d versions in %v (agent start included): %.0f versions/s\n",
		last-base, applyTook.Round(time.Millisecond), float64(last-base)/applyTook.Seconds())
	s.close()
}
