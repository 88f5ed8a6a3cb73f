package certifier_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// certifierProcess is a real `tashkent certifier` process.
type certifierProcess struct {
	cmd    *exec.Cmd
	stderr *testbin.Output
	addr   string
}

func startCertifier(t *testing.T, bin, dir, addr string) *certifierProcess {
	t.Helper()
	p := &certifierProcess{stderr: &testbin.Output{}, addr: addr}
	p.cmd = exec.Command(bin, "certifier", "--data-dir", dir, "--listen", addr, "--metrics-listen", "", "--segment-mib", "1")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill() })
	if err := netutil.WaitListening(addr, 20*time.Second); err != nil {
		t.Fatalf("certifier did not start: %v\n%s", err, p.stderr.String())
	}
	for !strings.Contains(p.stderr.String(), "certifier ready") {
		time.Sleep(10 * time.Millisecond)
	}
	return p
}

// kill sends SIGKILL to the process this test started, by PID.
func (p *certifierProcess) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
}

// acknowledgements records every commit a client was told about.
type acknowledgements struct {
	mu      sync.Mutex
	version map[string]uint64 // txn id -> acknowledged commit version
	aborts  int
}

func (a *acknowledgements) commit(id *pb.TxnID, v uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := id.Origin + "/" + strconv.FormatUint(id.Seq, 10)
	if prev, ok := a.version[key]; ok && prev != v {
		return fmt.Errorf("transaction %s acknowledged at version %d and at %d", key, prev, v)
	}
	a.version[key] = v
	return nil
}

// load runs clients against the certifier until ctx ends. Requests whose
// reply never came are outcome-unknown, which is allowed. The clients
// report that they applied nothing (version 0), as replicas would, so that
// log retention keeps the whole log for the tests to check.
func load(ctx context.Context, t *testing.T, addr string, round int, acks *acknowledgements) {
	var wg sync.WaitGroup
	applied := uint64(0)
	for s := range 3 {
		client, err := certclient.New(certclient.Options{Target: addr, Replica: fmt.Sprintf("round%d-r%d", round, s), ReplicaVersion: 0,
			AppliedVersion: &applied, OnEntries: func([]logentry.Entry, uint64) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		for c := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(s*100+c)))
				for seq := uint64(1); ctx.Err() == nil; seq++ {
					id := &pb.TxnID{Origin: fmt.Sprintf("round%d-s%d-c%d", round, s, c), Seq: seq}
					reply, err := client.Certify(ctx, &pb.CertifyRequest{Txn: id, StartVersion: client.Delivered(),
						Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", rng.IntN(2000)), upsert("public.u", rng.IntN(2000))}}})
					if err != nil {
						return // the certifier died: outcome unknown
					}
					if reply.Decision == pb.Decision_DECISION_COMMIT {
						if err := acks.commit(id, reply.CommitVersion); err != nil {
							t.Error(err)
						}
					} else {
						acks.mu.Lock()
						acks.aborts++
						acks.mu.Unlock()
					}
				}
			}()
		}
		defer client.Close()
	}
	wg.Wait()
}

// tearLastSegment appends half a record to the newest segment, as a crash in
// the middle of a write would leave it.
func tearLastSegment(t *testing.T, dir string) {
	segments, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segments) == 0 {
		return
	}
	sort.Strings(segments)
	f, err := os.OpenFile(segments[len(segments)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7}) // a length, a checksum, no body
}

func TestKill9UnderLoadLosesNoAcknowledgedCommit(t *testing.T) {
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	if n, err := strconv.Atoi(os.Getenv("TASHKENT_CRASH_ROUNDS")); err == nil {
		rounds = n
	}
	bin := testbin.Path(t)
	dir := t.TempDir()
	port, _ := netutil.FreePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	acks := &acknowledgements{version: map[string]uint64{}}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	tornRounds := 0
	for round := range rounds {
		proc := startCertifier(t, bin, dir, addr)
		if round > 0 && round%2 == 0 && !strings.Contains(proc.stderr.String(), "torn") {
			t.Fatalf("round %d: the torn tail left before the restart was not reported:\n%s", round, proc.stderr.String())
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { load(ctx, t, addr, round, acks); close(done) }()
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		proc.kill()
		cancel()
		<-done
		if round%2 == 1 {
			tearLastSegment(t, dir)
			tornRounds++
		}
	}
	proc := startCertifier(t, bin, dir, addr)
	log := fetchAll(t, addr)
	checkLog(t, log, acks)
	t.Logf("%d rounds of kill -9 (%d torn tails): %d acknowledged commits, %d aborts, %d versions in the log, all acknowledged present",
		rounds, tornRounds, len(acks.version), acks.aborts, len(log))
	if len(acks.version) < rounds {
		t.Fatalf("only %d commits were acknowledged: the load did not run", len(acks.version))
	}
	// Retrying every acknowledged transaction gets its version back and
	// commits nothing new.
	before := len(log)
	client, err := certclient.New(certclient.Options{Target: addr, Replica: "retry", ReplicaVersion: uint64(before)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	checked := 0
	for key, v := range acks.version {
		if checked == 200 {
			break
		}
		checked++
		origin, seq := splitKey(key)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reply, err := client.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: origin, Seq: seq}, StartVersion: uint64(before),
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 1)}}})
		cancel()
		if err != nil || reply.Decision != pb.Decision_DECISION_COMMIT || reply.CommitVersion != v {
			t.Fatalf("retry of %s acknowledged at %d: %v %v", key, v, reply, err)
		}
	}
	if after := fetchAll(t, addr); len(after) != before {
		t.Fatalf("retries of committed transactions added %d versions", len(after)-before)
	}
	_ = proc
}

func splitKey(key string) (string, uint64) {
	i := len(key) - 1
	for key[i] != '/' {
		i--
	}
	seq, _ := strconv.ParseUint(key[i+1:], 10, 64)
	return key[:i], seq
}

func fetchAll(t *testing.T, addr string) []*pb.LogEntry {
	t.Helper()
	var all []*pb.LogEntry
	for _, b := range fetchRaw(t, addr) {
		e, err := logentry.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e)
	}
	return all
}

// fetchRaw fetches a certifier's log, the entries as stored.
func fetchRaw(t *testing.T, addr string) [][]byte {
	t.Helper()
	// The certifier packs up to 4 MiB of entries per message
	// (messageEntryBytesMax), which with its framing is over gRPC's default
	// 4 MiB receive limit: accept what certclient accepts.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(certclient.DefaultMessageBytesMax)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := pb.NewCertifierClient(conn).Fetch(ctx, &pb.FetchRequest{AfterVersion: 0})
	if err != nil {
		t.Fatal(err)
	}
	var all [][]byte
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return all
		}
		if err != nil {
			t.Fatalf("fetch from %s: %v", addr, err)
		}
		all = append(all, msg.Entries...)
	}
}

// checkLog: versions are 1..n without a gap, no transaction is in the log
// twice, and every acknowledged commit is there at its version.
func checkLog(t *testing.T, log []*pb.LogEntry, acks *acknowledgements) {
	t.Helper()
	inLog := map[string]uint64{}
	for i, e := range log {
		if e.Version != uint64(i+1) {
			t.Fatalf("log position %d holds version %d", i, e.Version)
		}
		key := e.Txn.Origin + "/" + strconv.FormatUint(e.Txn.Seq, 10)
		if prev, dup := inLog[key]; dup {
			t.Fatalf("transaction %s committed twice, at %d and %d", key, prev, e.Version)
		}
		inLog[key] = e.Version
	}
	for key, v := range acks.version {
		if got, ok := inLog[key]; !ok || got != v {
			t.Fatalf("acknowledged commit %s at version %d is missing (log has %d, present=%v)", key, v, got, ok)
		}
	}
}
