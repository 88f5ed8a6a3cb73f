package certifier_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// restartableGroup is a certifier group in this process whose members can
// be stopped and started again on their directories and addresses, each
// logging to a buffer of its own.
type restartableGroup struct {
	t       *testing.T
	core    certgroup.Config // ID and Decode set per member
	members map[uint64]string
	addrs   []string
	dirs    []string
	logs    []*testbin.Output
	servers []*certifier.Server
}

func startRestartableGroup(t *testing.T, n int, core certgroup.Config) *restartableGroup {
	t.Helper()
	g := &restartableGroup{t: t, core: core, members: map[uint64]string{}, servers: make([]*certifier.Server, n)}
	if g.core.ElectionTicks == 0 {
		g.core.ElectionTicks = 20
	}
	for id := 1; id <= n; id++ {
		port, err := netutil.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		g.members[uint64(id)] = fmt.Sprintf("127.0.0.1:%d", port)
		g.addrs = append(g.addrs, g.members[uint64(id)])
		g.dirs = append(g.dirs, t.TempDir())
		g.logs = append(g.logs, &testbin.Output{})
	}
	for i := range n {
		g.start(i)
	}
	t.Cleanup(func() {
		for i := range g.servers {
			g.stop(i)
		}
	})
	return g
}

// start starts member i (0-based) on its directory.
func (g *restartableGroup) start(i int) {
	g.t.Helper()
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(g.logs[i], os.Stderr), nil))
	core := g.core
	core.ID, core.Decode = uint64(i+1), certifier.DecodeEntryKeys
	node, err := certgroup.OpenNode(certgroup.NodeConfig{Core: core, DataDir: filepath.Join(g.dirs[i], "raft"), Members: g.members, Logger: logger})
	if err != nil {
		g.t.Fatal(err)
	}
	srv, err := certifier.Listen(certifier.Config{DataDir: g.dirs[i], Group: node, Logger: logger}, g.addrs[i], "")
	if err != nil {
		g.t.Fatal(err)
	}
	g.servers[i] = srv
}

func (g *restartableGroup) stop(i int) {
	if g.servers[i] != nil {
		g.servers[i].Close()
		g.servers[i] = nil
	}
}

// waitDurable waits until every running member has made version v durable.
func (g *restartableGroup) waitDurable(v uint64) {
	g.t.Helper()
	waitFor(g.t, func() bool {
		for _, s := range g.servers {
			if s != nil && s.Service.DurableVersion() < v {
				return false
			}
		}
		return true
	})
}

// stageThrough stages fragments as the agent does, through c.
func stageThrough(t *testing.T, c *certclient.Client, txn *pb.TxnID, frags [][]byte) (*pb.StageReply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := c.Stage(ctx, txn)
	if err != nil {
		return nil, err
	}
	for _, f := range frags {
		if err := st.Send(f); err != nil {
			return nil, err
		}
	}
	return st.Close()
}

// checkSameSpan checks that every running member's versioned log holds
// the span first..last of txn, its fragments frags, the same bytes.
func (g *restartableGroup) checkSameSpan(txn *pb.TxnID, first, last uint64, frags [][]byte) {
	g.t.Helper()
	var want [][]byte
	for i, s := range g.servers {
		if s == nil {
			continue
		}
		log := fetchRaw(g.t, g.addrs[i])
		if uint64(len(log)) < last {
			g.t.Fatalf("member %d serves %d versions, want at least %d", i+1, len(log), last)
		}
		span := log[first-1 : last]
		for k, b := range span {
			e, err := logentry.Decode(b)
			if err != nil {
				g.t.Fatal(err)
			}
			fragment, err := proto.Marshal(e.Writeset)
			if err != nil {
				g.t.Fatal(err)
			}
			if e.Version != first+uint64(k) || e.SpanFirst != first || e.SpanLast != last || !proto.Equal(e.Txn, txn) ||
				!bytes.Equal(fragment, frags[k]) || (e.Certified != nil) != (e.Version == last) {
				g.t.Fatalf("member %d, version %d: span %d..%d of %v, certified %v, fragment %d bytes; want fragment %d of %v's span %d..%d",
					i+1, e.Version, e.SpanFirst, e.SpanLast, e.Txn, e.Certified, len(fragment), k, txn, first, last)
			}
			checkSpanSizeAndChecksum(g.t, fmt.Sprintf("member %d", i+1), e, frags)
		}
		if want == nil {
			want = span
			continue
		}
		for k := range span {
			if !bytes.Equal(span[k], want[k]) {
				g.t.Fatalf("member %d's entry %d differs from another member's", i+1, first+uint64(k))
			}
		}
	}
}

// stageFiles lists member i's stage directory.
func (g *restartableGroup) stageFiles(i int) []string {
	entries, _ := os.ReadDir(filepath.Join(g.dirs[i], "stage"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// A streamed writeset staged through a client that starts at a follower
// (its Stage follows the leader) and certified commits as a span; every
// member's versioned log then holds the span, the same bytes, with the
// stages gone. The fragments never travel in Raft: each member's Raft
// directory stays far smaller than the writeset. And no member holds the
// writeset in memory: the heap in use grows by what the buffers of the
// stage, the copies and the writers take (60 to 90 MiB for three members
// in this process, whatever the size), so a writeset 48 MiB larger than
// another grows it by far less than 48 MiB more.
func TestGroupStreamedWritesetCommitsOnEveryMember(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{})
	leader := leaderOf(t, g.servers)
	c := clientAtFollower(t, g.addrs, leader)
	frag := fragment(t, "public.big", 0, 1000, 1<<20/1000-30)
	commit := func(seq uint64, fragments int) (grown int64) {
		frags := make([][]byte, fragments)
		for i := range frags {
			frags[i] = frag
		}
		start := c.Delivered()
		base, peakHeapInUse := heapInUseFromNow()
		txn := &pb.TxnID{Origin: "r1", Seq: seq}
		staged, err := stageThrough(t, c, txn, frags)
		if err != nil {
			t.Fatal(err)
		}
		reply := certifyStreamed(t, c, txn, start, staged, tableWrite("public.big"))
		first, last := start+1, start+uint64(fragments)
		if reply.Decision != pb.Decision_DECISION_COMMIT || reply.FirstVersion != first || reply.CommitVersion != last {
			t.Fatalf("streamed: %v, want versions %d..%d", reply, first, last)
		}
		g.waitDurable(last)
		grown = int64(peakHeapInUse()) - int64(base)
		t.Logf("staged %d MiB on 3 members; heap in use grew by at most %d MiB", staged.Bytes>>20, grown>>20)
		g.checkSameSpan(txn, first, last, frags)
		for i := range g.servers {
			if raft := dirBytes(filepath.Join(g.dirs[i], "raft")); raft > int64(staged.Bytes)/8 {
				t.Fatalf("member %d's Raft directory holds %d bytes for a %d-byte writeset: the fragments went through Raft", i+1, raft, staged.Bytes)
			}
			waitFor(t, func() bool { return len(g.stageFiles(i)) == 0 })
		}
		return grown
	}
	commit(1, 4) // the connections, windows and pools of a first stage
	small, large := commit(2, 8), commit(3, 56)
	if large-small > 24<<20 {
		t.Fatalf("heap in use grew by %d MiB for 56 MiB staged, %d MiB for 8 MiB: it grows with the writeset", large>>20, small>>20)
	}
	if r := certifyWith(t, c, 4, 68, upsert("public.small", 1)); r.CommitVersion != 69 {
		t.Fatalf("after the spans: %v", r)
	}
}

// heapInUseFromNow collects garbage often (so that the heap in use
// follows what is live rather than the garbage of fragments received and
// sent) and samples the heap in use every 2 ms: it returns the heap in
// use now, and the function that stops sampling, sets the collector back
// and gives the peak.
func heapInUseFromNow() (uint64, func() uint64) {
	gcPercent := debug.SetGCPercent(10)
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapInuse
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak.Store(max(peak.Load(), m.HeapInuse))
		}
	}()
	return base, func() uint64 {
		close(stop)
		<-done
		debug.SetGCPercent(gcPercent)
		return peak.Load()
	}
}

// certifyWith certifies one transaction of replica r1 through c.
func certifyWith(t *testing.T, c *certclient.Client, seq, start uint64, changes ...*pb.Change) *pb.CertifyReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := c.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: seq}, StartVersion: start, Writeset: &pb.Writeset{Changes: changes}})
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

// A follower stopped in the middle of a stage: the stage succeeds on the
// leader and the other follower (a majority), the transaction commits,
// and the follower, restarted, drops its partial spool, and writes the
// span fetched from another member's versioned log, the same bytes.
func TestGroupFollowerStoppedDuringAStageFetchesTheSpan(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{})
	leader := leaderOf(t, g.servers)
	follower := (leader + 1) % 3
	c := clientAtFollower(t, g.addrs, leader)
	var frags [][]byte
	for i := range 6 {
		frags = append(frags, fragment(t, "public.big", i*100, 100, 50))
	}
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Stage(ctx, txn)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frags {
		if i == 3 {
			waitFor(t, func() bool { return len(g.stageFiles(follower)) == 1 })
			g.stop(follower)
		}
		if err := st.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	staged, err := st.Close()
	if err != nil {
		t.Fatalf("stage with one follower stopped: %v", err)
	}
	reply := certifyStreamed(t, c, txn, 0, staged, tableWrite("public.big"))
	if reply.Decision != pb.Decision_DECISION_COMMIT || reply.CommitVersion != 6 {
		t.Fatalf("streamed: %v", reply)
	}
	if r := certifyWith(t, c, 2, 6, upsert("public.small", 1)); r.CommitVersion != 7 {
		t.Fatalf("after the span: %v", r)
	}
	g.start(follower)
	g.waitDurable(7)
	g.checkSameSpan(txn, 1, 6, frags)
	if !strings.Contains(g.logs[follower].String(), "fetching a committed span") {
		t.Fatal("the restarted follower did not say that it fetches the span")
	}
	if files := g.stageFiles(follower); len(files) != 0 {
		t.Fatalf("the restarted follower's stage directory holds %v", files)
	}
}

// With both followers down a stage reaches the leader alone, one of the
// two members a commit needs: it fails with Unavailable saying so, and
// leaves nothing staged. (CheckQuorum is off, so that the leader still
// leads when the stage arrives.) A follower down alone leaves a majority:
// the stage succeeds.
func TestGroupStageNeedsAMajority(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{DisableCheckQuorum: true})
	leader := leaderOf(t, g.servers)
	frags := [][]byte{fragment(t, "public.big", 0, 10, 10), fragment(t, "public.big", 10, 10, 10)}
	g.stop((leader + 1) % 3)
	if _, err := stage(t, g.addrs[leader], &pb.TxnID{Origin: "r1", Seq: 1}, frags...); err != nil {
		t.Fatalf("stage with one follower down: %v", err)
	}
	g.stop((leader + 2) % 3)
	_, err := stage(t, g.addrs[leader], &pb.TxnID{Origin: "r1", Seq: 2}, frags...)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "reached 1 of the 2 members a commit needs") {
		t.Fatalf("stage with both followers down: %v", err)
	}
	for _, name := range g.stageFiles(leader) {
		if strings.HasPrefix(name, fmt.Sprintf("%x-2.", "r1")) {
			t.Fatalf("the failed stage left %s", name)
		}
	}
}

// A member that does not lead refuses a Stage at once with Unavailable
// and the leader's address in the tashkent-leader trailer.
func TestGroupFollowerRefusesStageNamingTheLeader(t *testing.T) {
	servers, addrs := inProcessGroup(t, 3)
	leader := leaderOf(t, servers)
	conn, err := grpc.NewClient(addrs[(leader+1)%3], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pb.NewCertifierClient(conn).Stage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&pb.StageRequest{Txn: &pb.TxnID{Origin: "r1", Seq: 1}, Fragment: fragment(t, "public.big", 0, 10, 10)})
	_, err = stream.CloseAndRecv()
	trailer := stream.Trailer()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not the leader") {
		t.Fatalf("Stage at a follower: %v", err)
	}
	if got := trailer.Get(certifier.LeaderTrailer); len(got) != 1 || got[0] != addrs[leader] {
		t.Fatalf("leader trailer %v, want %s", got, addrs[leader])
	}
}

// A complete stage survives its members' restarts: both followers are
// restarted after the stage, then the leader is stopped; the new leader
// certifies the transaction from its own copy, kept across its restart,
// and every member, the old leader restarted too, writes the span.
func TestGroupStageKeptAcrossRestartsCommitsAtTheNextLeader(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{})
	leader := leaderOf(t, g.servers)
	c := clientAtFollower(t, g.addrs, leader)
	frags := [][]byte{fragment(t, "public.big", 0, 50, 20), fragment(t, "public.big", 50, 50, 20), fragment(t, "public.big", 100, 5, 20)}
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	staged, err := stageThrough(t, c, txn, frags)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []int{(leader + 1) % 3, (leader + 2) % 3} {
		g.stop(f)
		g.start(f)
		if files := g.stageFiles(f); len(files) != 2 {
			t.Fatalf("member %d's stage directory after its restart: %v, want the spool and its completion record", f+1, files)
		}
		waitFor(t, func() bool { return g.servers[f].Service.StatusNow().LeaderId != 0 }) // back in the group
	}
	g.stop(leader)
	reply := certifyStreamed(t, c, txn, 0, staged, tableWrite("public.big"))
	if reply.Decision != pb.Decision_DECISION_COMMIT || reply.FirstVersion != 1 || reply.CommitVersion != 3 {
		t.Fatalf("streamed, at the new leader: %v", reply)
	}
	g.start(leader)
	g.waitDurable(3)
	g.checkSameSpan(txn, 1, 3, frags)
	for i := range g.servers {
		if strings.Contains(g.logs[i].String(), "fetching a committed span") {
			t.Fatalf("member %d fetched the span although it kept its stage", i+1)
		}
		waitFor(t, func() bool { return len(g.stageFiles(i)) == 0 })
	}
}
