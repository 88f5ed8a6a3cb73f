package certifier_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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
	service certifier.Config // DataDir, Group and Logger set per member
	members map[uint64]string
	addrs   []string
	dirs    []string
	logs    []*testbin.Output
	servers []*certifier.Server
}

// groupAtFollower starts a restartable group of three and a client whose
// first address is a follower's, and returns them with the leader's index.
func groupAtFollower(t *testing.T) (*restartableGroup, *certclient.Client, int) {
	t.Helper()
	g := startRestartableGroup(t, 3, certgroup.Config{})
	leader := leaderOf(t, g.servers)
	return g, clientAtFollower(t, g.addrs, leader), leader
}

func startRestartableGroup(t *testing.T, n int, core certgroup.Config) *restartableGroup {
	t.Helper()
	return startRestartableGroupWith(t, n, core, certifier.Config{})
}

// startRestartableGroupWith is startRestartableGroup with every member's
// service configured as service says, but for its directory, group and
// logger.
func startRestartableGroupWith(t *testing.T, n int, core certgroup.Config, service certifier.Config) *restartableGroup {
	t.Helper()
	g := &restartableGroup{t: t, core: core, service: service, members: map[uint64]string{}, servers: make([]*certifier.Server, n)}
	if g.core.ElectionTicks == 0 {
		// 0.6 to 1.2 s: a loaded machine running the race detector
		// delays heartbeats by hundreds of ms, and an election in the
		// middle of a stage fails it.
		g.core.ElectionTicks = 60
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
	node, err := certgroup.OpenNode(certgroup.NodeConfig{Core: core, DataDir: filepath.Join(g.dirs[i], "raft"), Members: g.members, Logger: logger,
		UnsafeFaultPartitionFile: g.partitionFile(i)})
	if err != nil {
		g.t.Fatal(err)
	}
	cfg := g.service
	cfg.DataDir, cfg.Group, cfg.Logger = g.dirs[i], node, logger
	srv, err := certifier.Listen(cfg, g.addrs[i], "")
	if err != nil {
		g.t.Fatal(err)
	}
	g.servers[i] = srv
}

// partitionFile is member i's fault point (isolate).
func (g *restartableGroup) partitionFile(i int) string { return filepath.Join(g.dirs[i], "partition") }

// isolate cuts member i off from every other member, both ways, until
// heal.
func (g *restartableGroup) isolate(i int) {
	g.t.Helper()
	for j := range g.servers {
		cut := "*"
		if j != i {
			cut = strconv.Itoa(i + 1)
		}
		if err := os.WriteFile(g.partitionFile(j), []byte(cut), 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
}

// heal ends every partition.
func (g *restartableGroup) heal() {
	g.t.Helper()
	for j := range g.servers {
		if err := os.Remove(g.partitionFile(j)); err != nil && !os.IsNotExist(err) {
			g.t.Fatal(err)
		}
	}
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
// waitStageComplete waits until member i holds a complete copy of the one
// stage (its spool and completion record): Stage answers once a majority
// holds it, and a copy beyond the majority finishes on its own.
func (g *restartableGroup) waitStageComplete(t *testing.T, i int) {
	t.Helper()
	waitFor(t, func() bool { return len(g.stageFiles(i)) == 2 })
}

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
	g, c, _ := groupAtFollower(t)
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
	g, c, leader := groupAtFollower(t)
	follower := (leader + 1) % 3
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
	g, c, leader := groupAtFollower(t)
	frags := [][]byte{fragment(t, "public.big", 0, 50, 20), fragment(t, "public.big", 50, 50, 20), fragment(t, "public.big", 100, 5, 20)}
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	staged, err := stageThrough(t, c, txn, frags)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []int{(leader + 1) % 3, (leader + 2) % 3} {
		g.waitStageComplete(t, f)
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

// knownLeader is svc's status once it knows a leader (a follower learns
// it from the leader's first message after an election).
func knownLeader(t *testing.T, svc *certifier.Service) *pb.StatusReply {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := svc.StatusNow()
		if st.LeaderId != 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %d knows no leader within 10 s", st.MemberId)
		}
	}
}

// stageCopyAs opens a StageCopy to member i in the name of the leader
// member i knows, in its term, as the leader does.
func (g *restartableGroup) stageCopyAs(i int) (pb.Certifier_StageCopyClient, func()) {
	g.t.Helper()
	st := knownLeader(g.t, g.servers[i].Service)
	conn, err := grpc.NewClient(g.addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		g.t.Fatal(err)
	}
	md := metadata.Pairs("tashkent-member", strconv.FormatUint(st.LeaderId, 10), "tashkent-term", strconv.FormatUint(st.Term, 10))
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	sc, err := pb.NewCertifierClient(conn).StageCopy(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	return sc, func() { cancel(); conn.Close() }
}

// A member keeps a StageCopy only when it ends with the StageEnd that
// says the leader's stage completed, and that StageEnd matches what
// arrived: a copy whose stream simply closes (a stage the leader gave
// up) or whose count differs is refused and leaves nothing.
func TestGroupStageCopyIsKeptOnlyWithAMatchingStageEnd(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{})
	leader := leaderOf(t, g.servers)
	follower := (leader + 1) % 3
	frags := [][]byte{fragment(t, "public.big", 0, 50, 20), fragment(t, "public.big", 50, 50, 20)}
	bytes := uint64(len(frags[0]) + len(frags[1]))
	for _, tc := range []struct {
		name string
		end  *pb.StageEnd
		code codes.Code
	}{
		{"no StageEnd", nil, codes.Aborted},
		{"a StageEnd that counts one fragment more", &pb.StageEnd{Fragments: 3, Bytes: bytes}, codes.DataLoss},
		{"a StageEnd that counts other bytes", &pb.StageEnd{Fragments: 2, Bytes: bytes + 1}, codes.DataLoss},
		{"the matching StageEnd", &pb.StageEnd{Fragments: 2, Bytes: bytes}, codes.OK},
	} {
		sc, done := g.stageCopyAs(follower)
		for k, f := range frags {
			m := &pb.StageRequest{Fragment: f}
			if k == 0 {
				m.Txn = &pb.TxnID{Origin: "r1", Seq: 1}
			}
			if err := sc.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		if tc.end != nil {
			if err := sc.Send(&pb.StageRequest{End: tc.end}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := sc.CloseAndRecv()
		done()
		if status.Code(err) != tc.code {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.code)
		}
		if files := g.stageFiles(follower); (tc.code == codes.OK) != (len(files) == 2) {
			t.Fatalf("%s: the member's stage directory holds %v", tc.name, files)
		}
	}
}

// Stages the agent cancels half way leave nothing on any member: the
// copies end without a StageEnd, and no follower seals a part of a stage
// as a whole one.
func TestGroupCancelledStagesLeaveNoCopy(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{})
	leader := leaderOf(t, g.servers)
	frag := fragment(t, "public.big", 0, 100, 50)
	conn, err := grpc.NewClient(g.addrs[leader], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for seq := uint64(1); seq <= 20; seq++ {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := pb.NewCertifierClient(conn).Stage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			m := &pb.StageRequest{Fragment: frag}
			if i == 0 {
				m.Txn = &pb.TxnID{Origin: "r1", Seq: seq}
			}
			if err := stream.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
		cancel()
	}
	for i := range g.servers {
		waitFor(t, func() bool { return len(g.stageFiles(i)) == 0 })
	}
	time.Sleep(time.Second) // a copy sealed late would show now
	for i := range g.servers {
		if files := g.stageFiles(i); len(files) != 0 {
			t.Errorf("member %d (the leader is %d) holds %v after every stage was cancelled", i+1, leader+1, files)
		}
	}
}

// An aborted streamed writeset leaves its stage on no member: the leader
// removes its own and tells the followers to remove their copies, which
// would otherwise hold their --stage-bytes-max (here room for one and a
// half such stages) and refuse the next stage.
func TestGroupAbortedStreamedWritesetLeavesNoCopy(t *testing.T) {
	frags := [][]byte{fragment(t, "public.big", 0, 50, 20), fragment(t, "public.big", 50, 50, 20)}
	size := int64(len(frags[0]) + len(frags[1]) + 8)
	g := startRestartableGroupWith(t, 3, certgroup.Config{}, certifier.Config{StageBytesMax: size * 3 / 2})
	leader := leaderOf(t, g.servers)
	c := clientAtFollower(t, g.addrs, leader)
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	staged, err := stageThrough(t, c, txn, frags)
	if err != nil {
		t.Fatal(err)
	}
	if r := certifyWith(t, c, 2, 0, upsert("public.big", 1)); r.CommitVersion != 1 {
		t.Fatalf("row write: %v", r)
	}
	if r := certifyStreamed(t, c, txn, 0, staged, tableWrite("public.big")); r.Decision != pb.Decision_DECISION_ABORT {
		t.Fatalf("want abort: %v", r)
	}
	for i := range g.servers {
		waitFor(t, func() bool { return len(g.stageFiles(i)) == 0 })
	}
	if _, err := stageThrough(t, c, &pb.TxnID{Origin: "r1", Seq: 3}, frags); err != nil {
		t.Fatalf("the next stage of the same size after an abort: %v", err)
	}
}

// A stage that reaches too few members fails, and the copies that did
// complete are removed from their members before the agent hears: with
// three of five members down, the one follower left has its copy
// removed, and the failure's "nothing was staged" is true.
func TestGroupFailedStageLeavesNoCopy(t *testing.T) {
	g := startRestartableGroup(t, 5, certgroup.Config{DisableCheckQuorum: true})
	leader := leaderOf(t, g.servers)
	kept := (leader + 1) % 5
	for k := 2; k <= 4; k++ {
		g.stop((leader + k) % 5)
	}
	frags := [][]byte{fragment(t, "public.big", 0, 10, 10), fragment(t, "public.big", 10, 10, 10)}
	_, err := stage(t, g.addrs[leader], &pb.TxnID{Origin: "r1", Seq: 1}, frags...)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "reached 2 of the 3 members a commit needs") {
		t.Fatalf("stage with three of five members down: %v", err)
	}
	for _, i := range []int{leader, kept} {
		if files := g.stageFiles(i); len(files) != 0 {
			t.Errorf("member %d holds %v after the stage failed", i+1, files)
		}
	}
}

// A copy kept across a restart waits its full idle time from the
// member's start, however old its files: a member that was down longer
// than that may still learn of the commit that needs it.
func TestGroupKeptCopyWaitsFromTheMembersStart(t *testing.T) {
	g, c, leader := groupAtFollower(t)
	follower := (leader + 1) % 3
	if _, err := stageThrough(t, c, &pb.TxnID{Origin: "r1", Seq: 1}, [][]byte{fragment(t, "public.big", 0, 50, 20)}); err != nil {
		t.Fatal(err)
	}
	g.waitStageComplete(t, follower)
	g.stop(follower)
	long := time.Now().Add(-3 * 10 * time.Minute) // over 2×stageIdleMax
	dir := filepath.Join(g.dirs[follower], "stage")
	for _, n := range g.stageFiles(follower) {
		if err := os.Chtimes(filepath.Join(dir, n), long, long); err != nil {
			t.Fatal(err)
		}
	}
	g.start(follower)
	time.Sleep(2 * time.Second) // two expiry rounds
	if files := g.stageFiles(follower); len(files) != 2 {
		t.Fatalf("member %d's kept copy after two seconds: %v, want its spool and completion record", follower+1, files)
	}
}

// stalledMember stands at a stopped member's address: it takes Raft
// messages and drops them, and takes StageCopy streams without reading
// them, as a member that stopped keeping up does.
type stalledMember struct {
	pb.UnimplementedCertifierServer
	pb.UnimplementedRaftServer
}

func (stalledMember) Send(stream pb.Raft_SendServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

func (stalledMember) StageCopy(stream pb.Certifier_StageCopyServer) error {
	<-stream.Context().Done()
	return stream.Context().Err()
}

// stall replaces member i, stopped, with a stalledMember.
func (g *restartableGroup) stall(i int) {
	g.t.Helper()
	g.stop(i)
	ln, err := net.Listen("tcp", g.addrs[i])
	if err != nil {
		g.t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterCertifierServer(srv, stalledMember{})
	pb.RegisterRaftServer(srv, stalledMember{})
	go srv.Serve(ln)
	g.t.Cleanup(srv.Stop)
}

// droppedAfter reads how long the leader waited for a member's copy
// before dropping it, from the leader's log.
func droppedAfter(t *testing.T, log string) time.Duration {
	t.Helper()
	_, rest, ok := strings.Cut(log, "dropped from this stage")
	if !ok {
		t.Fatal("the leader did not drop the stalled member from the stage")
	}
	_, rest, _ = strings.Cut(rest, "waited=")
	waited, err := time.ParseDuration(strings.Fields(rest)[0])
	if err != nil {
		t.Fatal(err)
	}
	return waited
}

// A follower that stops taking a stage's copy is dropped from the stage
// once the leader waited stageCopyStallMax (a second) for room in its
// queue: in a group of three the other follower and the leader make a
// majority but no spare, so the leader does not drop it at once; the
// stage succeeds without it. With the other follower stalled too, the
// leader drops them the same way, and the stage fails Unavailable.
func TestGroupStageDropsAStalledFollower(t *testing.T) {
	g := startRestartableGroup(t, 3, certgroup.Config{DisableCheckQuorum: true})
	leader := leaderOf(t, g.servers)
	stalled, other := (leader+1)%3, (leader+2)%3
	g.stall(stalled)
	frag := fragment(t, "public.big", 0, 1000, 1<<20/1000-30)
	frags := make([][]byte, 48) // past the queue and the stream's flow-control window
	for i := range frags {
		frags[i] = frag
	}
	if _, err := stage(t, g.addrs[leader], &pb.TxnID{Origin: "r1", Seq: 1}, frags...); err != nil {
		t.Fatalf("stage with one follower stalled: %v", err)
	}
	if waited := droppedAfter(t, g.logs[leader].String()); waited < time.Second || waited > 5*time.Second {
		t.Fatalf("the leader dropped the stalled follower after %v, want stageCopyStallMax (1s)", waited)
	}
	if files := g.stageFiles(other); len(files) != 2 {
		t.Fatalf("the follower that kept up holds %v", files)
	}

	g.stall(other)
	mark := len(g.logs[leader].String())
	_, err := stage(t, g.addrs[leader], &pb.TxnID{Origin: "r1", Seq: 2}, frags...)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "reached 1 of the 2 members a commit needs") {
		t.Fatalf("stage with the needed follower stalled: %v", err)
	}
	if waited := droppedAfter(t, g.logs[leader].String()[mark:]); waited < time.Second {
		t.Fatalf("the leader dropped a follower a majority needed after %v, before stageCopyStallMax", waited)
	}
}

// A committed span that no running member can produce: the stage reached
// the leader and one follower, that follower is down, and the leader's
// spool is lost. The leader and the other follower say which span they
// wait for (Status missing_span_first..last) and keep asking; once the
// follower that holds a copy is back, every member writes the span and
// the wait is over.
func TestGroupMissingSpanIsReportedUntilAMemberHoldingItIsBack(t *testing.T) {
	g, c, leader := groupAtFollower(t)
	lacking, holding := (leader+1)%3, (leader+2)%3
	frags := [][]byte{fragment(t, "public.big", 0, 50, 20), fragment(t, "public.big", 50, 50, 20)}
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	g.stop(lacking)
	staged, err := stageThrough(t, c, txn, frags)
	if err != nil {
		t.Fatal(err)
	}
	g.stop(holding)
	g.start(lacking)
	for _, name := range g.stageFiles(leader) {
		if err := os.Remove(filepath.Join(g.dirs[leader], "stage", name)); err != nil {
			t.Fatal(err)
		}
	}
	replied := make(chan *pb.CertifyReply, 1)
	go func() {
		ws, _ := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{tableWrite("public.big")}})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		reply, _ := c.CertifyEncoded(ctx, &pb.CertifyRequestEncoded{Txn: txn, Writeset: ws,
			Streamed: &pb.Streamed{Fragments: staged.Fragments, Bytes: staged.Bytes}})
		replied <- reply
	}()
	for _, i := range []int{leader, lacking} {
		waitFor(t, func() bool {
			st := g.servers[i].Service.StatusNow()
			return st.MissingSpanFirst == 1 && st.MissingSpanLast == 2
		})
	}
	if !strings.Contains(g.logs[leader].String(), "bring back a member that holds it") {
		t.Fatal("the leader's log does not say what to do about the missing span")
	}
	g.start(holding)
	reply := <-replied
	if reply.GetDecision() != pb.Decision_DECISION_COMMIT || reply.GetCommitVersion() != 2 {
		t.Fatalf("streamed: %v", reply)
	}
	g.waitDurable(2)
	g.checkSameSpan(txn, 1, 2, frags)
	for i, s := range g.servers {
		if st := s.Service.StatusNow(); st.MissingSpanFirst != 0 || st.MissingSpanLast != 0 {
			t.Fatalf("member %d still reports span %d..%d missing", i+1, st.MissingSpanFirst, st.MissingSpanLast)
		}
	}
}

// A member that finds, after a restart, a span already in its versioned
// log and a kept stage of it (it stopped after writing the span, before
// removing the stage) removes the stage when it applies the span again.
func TestGroupSpanWrittenBeforeARestartDropsItsKeptStage(t *testing.T) {
	g, c, leader := groupAtFollower(t)
	follower := (leader + 1) % 3
	frags := [][]byte{fragment(t, "public.big", 0, 50, 20), fragment(t, "public.big", 50, 50, 20)}
	txn := &pb.TxnID{Origin: "r1", Seq: 1}
	staged, err := stageThrough(t, c, txn, frags)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(g.dirs[follower], "stage")
	g.waitStageComplete(t, follower)
	kept := map[string][]byte{}
	for _, name := range g.stageFiles(follower) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		kept[name] = b
	}
	if len(kept) != 2 {
		t.Fatalf("the follower's stage: %v", g.stageFiles(follower))
	}
	if r := certifyStreamed(t, c, txn, 0, staged, tableWrite("public.big")); r.CommitVersion != 2 {
		t.Fatalf("streamed: %v", r)
	}
	g.waitDurable(2)
	g.stop(follower)
	for name, b := range kept {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	g.start(follower) // it may apply the span again before the next line: no check of the stage in between
	waitFor(t, func() bool { return len(g.stageFiles(follower)) == 0 })
	g.checkSameSpan(txn, 1, 2, frags)
}
