package agent_test

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/certclient/fakecert"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// streamFragments sends a streamed writeset's fragments and returns their
// total size.
func (b *backend) streamFragments(fragments [][]byte) uint64 {
	b.t.Helper()
	var total uint64
	for _, f := range fragments {
		b.send(wire.Fragment{Writeset: f})
		total += uint64(len(f))
	}
	return total
}

// certifyStreamed sends a streamed writeset (its fragments, then the
// certified writeset) and returns the decision.
func (b *backend) certifyStreamed(start uint64, fragments [][]byte, certified []byte) wire.Decision {
	b.t.Helper()
	total := b.streamFragments(fragments)
	b.send(wire.CertifyStreamed{StartVersion: start, Fragments: uint32(len(fragments)), Bytes: total, Certified: certified})
	return b.read().(wire.Decision)
}

// silentFor reports whether the agent sends nothing for d.
func (b *backend) silentFor(d time.Duration) bool {
	b.nc.SetReadDeadline(time.Now().Add(d))
	_, err := b.r.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// fragments encodes rows from..from+n-1 of t as n one-row fragments.
func fragments(t testing.TB, from, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for k := from; k < from+n; k++ {
		out = append(out, encode(t, upsert(k, fmt.Sprintf("s%d", k))))
	}
	return out
}

func encode(t testing.TB, ws *pb.Writeset) []byte {
	t.Helper()
	b, err := proto.Marshal(ws)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tableWrite is the certified writeset of a streamed write of t.
func tableWrite(t testing.TB) []byte {
	return encode(t, &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_TABLE_WRITE}}})
}

// streamCluster is one replica whose agent talks to a fake certifier,
// which records the stages and requests and answers as the test says.
func streamCluster(t *testing.T) (*clustertest.Cluster, *fakecert.Certifier) {
	f := fakecert.Start(t)
	c := clustertest.Start(t, 1, clustertest.Options{Agent: func(_ int, cfg *agent.Config) {
		cfg.Certifier, cfg.MetricsAddr = f.Addr(), "127.0.0.1:0"
	}})
	c.Exec(0, schema)
	return c, f
}

// A streamed writeset's fragments reach the certifier's Stage in order,
// under the transaction id its certify request then carries, with
// Streamed and the certified writeset; the certifier's decision reaches
// the backend as for any writeset: an abort, and a commit at the span's
// last version (here a span of one version, its first and last alike).
func TestStreamedWritesetIsStagedThenCertified(t *testing.T) {
	c, f := streamCluster(t)
	b := simulated(t, c, 0)
	start := c.Committed(0)
	aborted := false
	f.SetDecide(func(req *pb.CertifyRequestEncoded) *pb.CertifyReply {
		if req.Streamed != nil && !aborted {
			aborted = true
			return &pb.CertifyReply{Decision: pb.Decision_DECISION_ABORT, AbortReason: pb.AbortReason_ABORT_REASON_CONFLICT,
				ConflictVersion: start, Detail: "table public.t written by version 1"}
		}
		return &pb.CertifyReply{Decision: pb.Decision_DECISION_COMMIT}
	})
	frags := fragments(t, 1, 3)
	frags[1] = encode(t, upsert(2, strings.Repeat("x", 5<<20))) // over gRPC's default message size
	d := b.certifyStreamed(start, frags, tableWrite(t))
	if d.Kind != wire.Abort || d.AbortReason != uint8(pb.AbortReason_ABORT_REASON_CONFLICT) || d.Version != start {
		t.Fatalf("decision %+v, want the certifier's abort", d)
	}
	stages, reqs := f.Stages(), f.Requests()
	stage, req := stages[len(stages)-1], reqs[len(reqs)-1]
	if stage.Err != nil || len(stage.Fragments) != 3 || !strings.HasPrefix(stage.Txn.GetOrigin(), "replica1#") {
		t.Fatalf("stage %+v, want 3 fragments of a transaction of replica1", stage)
	}
	for i, got := range stage.Fragments {
		if string(got) != string(frags[i]) {
			t.Fatalf("fragment %d staged as %x, want %x", i, got, frags[i])
		}
	}
	want := &pb.Streamed{Fragments: 3, Bytes: uint64(len(frags[0]) + len(frags[1]) + len(frags[2]))}
	if !proto.Equal(req.Txn, stage.Txn) || !proto.Equal(req.Streamed, want) || req.StartVersion != start || string(req.Writeset) != string(tableWrite(t)) {
		t.Fatalf("certify request %v, want %v's with %v and the certified writeset", req, stage.Txn, want)
	}

	v := b.certifyStreamed(start, fragments(t, 4, 1), tableWrite(t))
	if v.Kind != wire.Commit || v.Version != start+1 {
		t.Fatalf("decision %+v, want a commit of version %d", v, start+1)
	}
	metrics := httpGet(t, "http://"+c.Agents[0].MetricsAddr().String()+"/metrics")
	for _, m := range []string{
		`tashkent_agent_streamed_certifications_total{outcome="abort"} 1`,
		`tashkent_agent_streamed_certifications_total{outcome="commit"} 1`,
		"tashkent_agent_staged_bytes_total " + strconv.FormatFloat(float64(want.Bytes+uint64(len(fragments(t, 4, 1)[0]))), 'g', -1, 64),
	} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}

// A certifier that refuses the stage (a limit) aborts the transaction on
// the limit, with the certifier's words: the backend raises 54000. The
// backend's remaining fragments are read first, and nothing is certified.
func TestRefusedStageAbortsOnTheLimit(t *testing.T) {
	c, f := streamCluster(t)
	b := simulated(t, c, 0)
	const limit = "the staged writeset exceeds --stage-bytes-max (8 GiB)"
	f.RefuseStages(fakecert.Refused(limit))
	requests := len(f.Requests())
	d := b.certifyStreamed(c.Committed(0), fragments(t, 1, 4), tableWrite(t))
	if d.Kind != wire.Abort || d.AbortReason != uint8(pb.AbortReason_ABORT_REASON_LIMIT) || d.Detail != limit {
		t.Fatalf("decision %+v, want an abort on the limit saying %q", d, limit)
	}
	if n := len(f.Requests()); n != requests {
		t.Fatalf("%d certify requests after a refused stage, want %d", n, requests)
	}
	f.RefuseStages(nil)
	if d := b.certifyStreamed(c.Committed(0), fragments(t, 1, 1), tableWrite(t)); d.Kind != wire.Commit {
		t.Fatalf("the next streamed writeset on the connection: %+v, want a commit", d)
	}
}

// A streamed writeset whose fragments are not those the backend announces
// is refused as malformed, its stage cancelled, and nothing is certified;
// a backend that sends anything else inside a streamed writeset is
// disconnected.
func TestStreamedWritesetOutOfProtocolIsRefused(t *testing.T) {
	c, f := streamCluster(t)
	b := simulated(t, c, 0)
	requests := len(f.Requests())
	total := b.streamFragments(fragments(t, 1, 2))
	b.send(wire.CertifyStreamed{StartVersion: c.Committed(0), Fragments: 3, Bytes: total, Certified: tableWrite(t)})
	if d := b.read().(wire.Decision); d.Kind != wire.Abort || d.AbortReason != uint8(pb.AbortReason_ABORT_REASON_INVALID) {
		t.Fatalf("decision %+v, want an abort as invalid", d)
	}
	if err := awaitStageEnd(t, f, 0); status.Code(err) != codes.Canceled {
		t.Fatalf("the miscounted stage ended with %v, want cancelled", err)
	}
	b.send(wire.CertifyStreamed{StartVersion: c.Committed(0), Certified: tableWrite(t)})
	if d := b.read().(wire.Decision); d.Kind != wire.Abort || d.AbortReason != uint8(pb.AbortReason_ABORT_REASON_INVALID) {
		t.Fatalf("decision on no fragments %+v, want an abort as invalid", d)
	}
	if n := len(f.Requests()); n != requests {
		t.Fatalf("%d certify requests, want %d", n, requests)
	}
	b.streamFragments(fragments(t, 1, 1))
	b.send(wire.Sync{TimeoutMillis: 100})
	if !b.closedByAgent(time.Minute) {
		t.Fatal("the agent kept a backend that sent a sync inside a streamed writeset")
	}
}

// A backend whose connection closes mid-stream cancels its stage.
func TestClosedBackendCancelsItsStage(t *testing.T) {
	c, f := streamCluster(t)
	b := simulated(t, c, 0)
	changed := f.Changed()
	b.streamFragments(fragments(t, 1, 2))
	awaitStagedFragments(t, f, changed, 2)
	b.close()
	if err := awaitStageEnd(t, f, 0); status.Code(err) != codes.Canceled {
		t.Fatalf("the stage ended with %v, want cancelled", err)
	}
}

// awaitStagedFragments waits until the certifier's first stage holds n
// fragments; changed is f.Changed() from before they were sent.
func awaitStagedFragments(t *testing.T, f *fakecert.Certifier, changed <-chan struct{}, n int) {
	t.Helper()
	for len(f.Stages()) == 0 || len(f.Stages()[0].Fragments) < n {
		awaitChange(t, changed)
		changed = f.Changed()
	}
}

func awaitChange(t *testing.T, changed <-chan struct{}) {
	t.Helper()
	select {
	case <-changed:
	case <-time.After(time.Minute):
		t.Fatal("the certifier heard nothing more")
	}
}

// awaitStageEnd waits until the certifier's i-th stage has ended, and
// returns how.
func awaitStageEnd(t *testing.T, f *fakecert.Certifier, i int) error {
	t.Helper()
	for {
		changed := f.Changed()
		if s := f.Stages(); len(s) > i && s[i].Err != nil {
			return s[i].Err
		}
		awaitChange(t, changed)
	}
}

// With no certifier, a streamed writeset is answered Unavailable once
// the backend has sent all of it, and the connection goes on.
func TestStreamedWritesetWithoutCertifierIsUnavailable(t *testing.T) {
	c, f := streamCluster(t)
	b := simulated(t, c, 0)
	f.Stop()
	frags := fragments(t, 1, 3)
	total := b.streamFragments(frags)
	if !b.silentFor(200 * time.Millisecond) {
		t.Fatal("the agent answered before the streamed writeset ended")
	}
	b.send(wire.CertifyStreamed{StartVersion: c.Committed(0), Fragments: 3, Bytes: total, Certified: tableWrite(t)})
	if d := b.read().(wire.Decision); d.Kind != wire.Unavailable {
		t.Fatalf("decision %+v, want unavailable", d)
	}
	b.send(wire.Sync{TimeoutMillis: 100})
	if s, ok := b.read().(wire.Synced); !ok || s.Known {
		t.Fatalf("a sync after it: %+v, want an answer that the version is not known", s)
	}
}

// A streamed writeset certified by the real certifier commits at its
// span's last version, which the backend is told; a second one from the
// same snapshot conflicts with it on the table.
func TestStreamedSpanCommitsAtItsLastVersion(t *testing.T) {
	c, v0 := startWithSchema(t, 1, clustertest.Options{}, schema)
	b := simulated(t, c, 0)
	if d := b.certifyStreamed(v0, fragments(t, 1, 4), tableWrite(t)); d.Kind != wire.Commit || d.Version != v0+4 {
		t.Fatalf("first streamed writeset: %+v, want a commit at version %d", d, v0+4)
	}
	if d := b.certifyStreamed(v0, fragments(t, 5, 2), tableWrite(t)); d.Kind != wire.Abort || d.AbortReason != uint8(pb.AbortReason_ABORT_REASON_CONFLICT) {
		t.Fatalf("second streamed writeset from the same snapshot: %+v, want a conflict", d)
	}
}

// A backend that stops in the middle of its streamed writeset (a stopped
// process) does not hold its stage at the certifier: the agent waits for
// its next frame a bounded time, then closes the connection and cancels
// the stage.
func TestAStalledStreamIsCancelled(t *testing.T) {
	defer agent.SetStreamFrameWaitMax(time.Second)()
	c, f := streamCluster(t)
	b := simulated(t, c, 0)
	changed := f.Changed()
	b.streamFragments(fragments(t, 1, 2))
	awaitStagedFragments(t, f, changed, 2)
	if err := awaitStageEnd(t, f, 0); status.Code(err) != codes.Canceled {
		t.Fatalf("the stalled stage ended with %v, want cancelled", err)
	}
}
