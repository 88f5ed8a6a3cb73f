package certifier_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// fragment encodes a Writeset of n upserts of table from primary key from:
// one fragment of a streamed writeset, rowBytes per row value.
func fragment(t testing.TB, table string, from, n, rowBytes int) []byte {
	t.Helper()
	ws := &pb.Writeset{}
	row := []byte(`{"v":"` + strings.Repeat("x", rowBytes) + `"}`)
	for pk := from; pk < from+n; pk++ {
		ws.Changes = append(ws.Changes, &pb.Change{Table: table, Op: pb.Op_OP_UPSERT, Key: []byte(fmt.Sprintf("[%d]", pk)), Row: row})
	}
	b, err := proto.Marshal(ws)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stage sends fragments for txn through Stage (the first message carries
// the transaction id and the first fragment) and returns the reply.
func stage(t testing.TB, addr string, txn *pb.TxnID, fragments ...[]byte) (*pb.StageReply, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := pb.NewCertifierClient(conn).Stage(ctx)
	if err != nil {
		return nil, err
	}
	for i, f := range fragments {
		msg := &pb.StageRequest{Fragment: f}
		if i == 0 {
			msg.Txn = txn
		}
		if err := stream.Send(msg); err != nil {
			break // the error comes with CloseAndRecv
		}
	}
	if len(fragments) == 0 {
		if err := stream.Send(&pb.StageRequest{Txn: txn}); err != nil {
			return nil, err
		}
	}
	return stream.CloseAndRecv()
}

// tableWrite is the certified writeset of a streamed transaction that
// wrote rows of table.
func tableWrite(table string) *pb.Change { return &pb.Change{Table: table, Op: pb.Op_OP_TABLE_WRITE} }

// certifyStreamed certifies r's transaction seq as streamed: fragments
// and bytes as staged, certified on changes.
func (r *replica) certifyStreamed(t *testing.T, seq, start uint64, staged *pb.StageReply, changes ...*pb.Change) *pb.CertifyReply {
	t.Helper()
	return certifyStreamed(t, r.client, &pb.TxnID{Origin: r.name, Seq: seq}, start, staged, changes...)
}

// certifyStreamed is the agent's certify request of a streamed
// transaction (an encoded request, as the agent sends it).
func certifyStreamed(t *testing.T, c *certclient.Client, txn *pb.TxnID, start uint64, staged *pb.StageReply, changes ...*pb.Change) *pb.CertifyReply {
	t.Helper()
	ws, err := proto.Marshal(&pb.Writeset{Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reply, err := c.CertifyEncoded(ctx, &pb.CertifyRequestEncoded{Txn: txn, StartVersion: start, Writeset: ws,
		Streamed: &pb.Streamed{Fragments: staged.GetFragments(), Bytes: staged.GetBytes()}})
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

// checkSpan checks entries, versions 1.. in order, against a log of one
// plain entry at 1, the span 2..4 of txn with frags, and a plain entry at 5.
func checkSpanEntries(t *testing.T, how string, entries []*pb.LogEntry, txn *pb.TxnID, frags [][]byte, certified *pb.Writeset) {
	t.Helper()
	if len(entries) != 5 {
		t.Fatalf("%s: %d entries, want 5", how, len(entries))
	}
	for i, e := range entries {
		v := uint64(i + 1)
		if e.Version != v {
			t.Fatalf("%s: entry %d has version %d", how, i, e.Version)
		}
		inSpan := v >= 2 && v <= 4
		if !inSpan {
			if e.SpanFirst != 0 || e.SpanLast != 0 || e.Certified != nil {
				t.Fatalf("%s: plain entry %d carries span %d..%d / certified %v", how, v, e.SpanFirst, e.SpanLast, e.Certified)
			}
			continue
		}
		want := &pb.Writeset{}
		if err := proto.Unmarshal(frags[v-2], want); err != nil {
			t.Fatal(err)
		}
		if e.SpanFirst != 2 || e.SpanLast != 4 || !proto.Equal(e.Txn, txn) || !proto.Equal(e.Writeset, want) {
			t.Fatalf("%s: entry %d: span %d..%d, txn %v, %d changes; want span 2..4, %v, fragment %d (%d changes)",
				how, v, e.SpanFirst, e.SpanLast, e.Txn, len(e.Writeset.GetChanges()), txn, v-2, len(want.Changes))
		}
		if (v == 4) != (e.Certified != nil) || (v == 4 && !proto.Equal(e.Certified, certified)) {
			t.Fatalf("%s: entry %d certified = %v; want the certified writeset on the last entry only", how, v, e.Certified)
		}
		checkSpanSizeAndChecksum(t, how, e, frags)
	}
}

// checkSpanSizeAndChecksum checks that e, an entry of the span of frags,
// carries their size and checksum if it is the span's last entry, and
// neither otherwise.
func checkSpanSizeAndChecksum(t *testing.T, how string, e *pb.LogEntry, frags [][]byte) {
	t.Helper()
	var bytes uint64
	var checksum uint32
	if e.Version == e.SpanLast {
		for _, f := range frags {
			bytes, checksum = bytes+uint64(len(f)), logentry.SpanChecksum(checksum, f)
		}
	}
	if e.SpanBytes != bytes || e.SpanChecksum != checksum {
		t.Fatalf("%s: entry %d of span %d..%d carries %d bytes, checksum %#x; want %d, %#x",
			how, e.Version, e.SpanFirst, e.SpanLast, e.SpanBytes, e.SpanChecksum, bytes, checksum)
	}
}

// A transaction staged in three fragments commits as three consecutive
// versions; every replica's stream and Fetch deliver them in order with
// their span, the certified writeset on the last, and the entries before
// and after the span as usual. Its spool file is gone afterwards.
func TestStreamedTransactionCommitsAsASpan(t *testing.T) {
	dir := t.TempDir()
	srv := listen(t, certifier.Config{DataDir: dir})
	a, b := connect(t, srv, "a", 0), connect(t, srv, "b", 0)
	if r := a.certify(t, 0, upsert("public.small", 1)); r.CommitVersion != 1 {
		t.Fatalf("first: %v", r)
	}
	frags := [][]byte{fragment(t, "public.big", 0, 100, 50), fragment(t, "public.big", 100, 100, 50), fragment(t, "public.big", 200, 7, 50)}
	txn := &pb.TxnID{Origin: "a", Seq: 100}
	staged, err := stage(t, srv.Addr().String(), txn, frags...)
	if err != nil {
		t.Fatal(err)
	}
	if staged.Fragments != 3 || staged.Bytes != uint64(len(frags[0])+len(frags[1])+len(frags[2])) {
		t.Fatalf("stage reply %v", staged)
	}
	certified := &pb.Writeset{Changes: []*pb.Change{tableWrite("public.big")}}
	reply := a.certifyStreamed(t, 100, 1, staged, certified.Changes...)
	if reply.Decision != pb.Decision_DECISION_COMMIT || reply.FirstVersion != 2 || reply.CommitVersion != 4 {
		t.Fatalf("streamed: %v, want versions 2..4", reply)
	}
	if r := b.certify(t, 4, upsert("public.small", 2)); r.CommitVersion != 5 {
		t.Fatalf("after the span: %v", r)
	}
	waitFor(t, func() bool {
		a.client.RequestCatchUp()
		return len(a.delivered()) == 5 && len(b.delivered()) == 5
	})
	checkSpanEntries(t, "replica a's stream", a.delivered(), txn, frags, certified)
	checkSpanEntries(t, "replica b's stream", b.delivered(), txn, frags, certified)
	checkSpanEntries(t, "Fetch", fetchAll(t, srv.Addr().String()), txn, frags, certified)
	if spools, _ := os.ReadDir(filepath.Join(dir, "stage")); len(spools) != 0 {
		t.Fatalf("stage/ holds %d files after the commit", len(spools))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A streamed transaction's OP_TABLE_WRITE is a write of the whole table:
// it conflicts with a concurrent row write of the table committed first,
// and a row write concurrent with it committed after it conflicts too. An
// aborted streamed transaction's stage is removed at once.
func TestStreamedTableWriteConflictsWithRowWritesInBothOrders(t *testing.T) {
	t.Run("row write first", func(t *testing.T) {
		dir := t.TempDir()
		srv := listen(t, certifier.Config{DataDir: dir})
		a, b := connect(t, srv, "a", 0), connect(t, srv, "b", 0)
		if r := b.certify(t, 0, upsert("public.big", 5)); r.CommitVersion != 1 {
			t.Fatalf("row write: %v", r)
		}
		staged, err := stage(t, srv.Addr().String(), &pb.TxnID{Origin: "a", Seq: 1}, fragment(t, "public.big", 0, 10, 10))
		if err != nil {
			t.Fatal(err)
		}
		r := a.certifyStreamed(t, 1, 0, staged, tableWrite("public.big"))
		if r.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || r.ConflictVersion != 1 ||
			!strings.Contains(r.Detail, "public.big (the whole table") {
			t.Fatalf("streamed after a concurrent row write: %v", r)
		}
		if spools, _ := os.ReadDir(filepath.Join(dir, "stage")); len(spools) != 0 {
			t.Fatalf("stage/ holds %d files after the abort", len(spools))
		}
	})
	t.Run("streamed first", func(t *testing.T) {
		srv := listen(t, certifier.Config{})
		a, b := connect(t, srv, "a", 0), connect(t, srv, "b", 0)
		staged, err := stage(t, srv.Addr().String(), &pb.TxnID{Origin: "a", Seq: 1},
			fragment(t, "public.big", 0, 10, 10), fragment(t, "public.big", 10, 10, 10))
		if err != nil {
			t.Fatal(err)
		}
		if r := a.certifyStreamed(t, 1, 0, staged, tableWrite("public.big")); r.CommitVersion != 2 {
			t.Fatalf("streamed: %v", r)
		}
		r := b.certify(t, 0, upsert("public.big", 5))
		if r.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || r.ConflictVersion != 2 {
			t.Fatalf("row write concurrent with the committed span: %v", r)
		}
		if r := b.certify(t, 2, upsert("public.big", 5)); r.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("row write after the span: %v", r)
		}
	})
}

// After a restart the certifier knows a committed span: a row write from
// a snapshot before it still conflicts with its table write, and a retry
// of the streamed request, whose stage is gone, gets the span back.
func TestRestartRestoresASpansConflictsAndItsDuplicateAnswer(t *testing.T) {
	dir := t.TempDir()
	srv := listen(t, certifier.Config{DataDir: dir})
	a := connect(t, srv, "a", 0)
	a.certify(t, 0, upsert("public.small", 1))
	staged, err := stage(t, srv.Addr().String(), &pb.TxnID{Origin: "a", Seq: 100},
		fragment(t, "public.big", 0, 10, 10), fragment(t, "public.big", 10, 10, 10))
	if err != nil {
		t.Fatal(err)
	}
	if r := a.certifyStreamed(t, 100, 1, staged, tableWrite("public.big")); r.FirstVersion != 2 || r.CommitVersion != 3 {
		t.Fatalf("streamed: %v", r)
	}
	a.client.Close()
	srv.Close()
	left := filepath.Join(dir, "stage", "61-9.spool") // a spool a crash left behind
	if err := os.WriteFile(left, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	srv = listen(t, certifier.Config{DataDir: dir})
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("the spool file left by the last run is still there (%v)", err)
	}
	if v := srv.Service.DurableVersion(); v != 3 {
		t.Fatalf("durable version %d after the restart, want 3", v)
	}
	b := connect(t, srv, "b", 0)
	r := b.certify(t, 1, upsert("public.big", 5))
	if r.AbortReason != pb.AbortReason_ABORT_REASON_CONFLICT || r.ConflictVersion != 3 {
		t.Fatalf("row write from before the span, after the restart: %v", r)
	}
	a = connect(t, srv, "a", 3)
	again := a.certifyStreamed(t, 100, 1, staged, tableWrite("public.big"))
	if again.Decision != pb.Decision_DECISION_COMMIT || again.FirstVersion != 2 || again.CommitVersion != 3 {
		t.Fatalf("retry of the streamed request after the restart: %v, want the span 2..3", again)
	}
}

// A crash while a span is copied into the log leaves its first entries
// without its last: the certifier cuts them at start, and the versions
// are given again.
func TestIncompleteSpanAtTheLogsEndIsCutAtStart(t *testing.T) {
	dir := t.TempDir()
	log, err := wal.Open(wal.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	txn := &pb.TxnID{Origin: "a", Seq: 7}
	plain := logentry.Encode(&pb.LogEntry{Version: 1, Txn: &pb.TxnID{Origin: "x", Seq: 1},
		Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.small", 1)}}})
	entries := []wal.Entry{{Version: 1, Payload: plain.Bytes}}
	for v := uint64(2); v <= 3; v++ { // of the span 2..4
		entries = append(entries, wal.Entry{Version: v, Payload: logentry.AppendSpanEntry(nil, logentry.SpanEntry{
			Version: v, Txn: txn, Fragment: fragment(t, "public.big", int(v)*10, 10, 10), First: 2, Last: 4})})
	}
	if err := log.Append(entries); err != nil {
		t.Fatal(err)
	}
	log.Close()

	srv := listen(t, certifier.Config{DataDir: dir})
	if v := srv.Service.DurableVersion(); v != 1 {
		t.Fatalf("durable version %d, want 1: the incomplete span cut", v)
	}
	a := connect(t, srv, "a", 0)
	if r := a.certify(t, 1, upsert("public.big", 5)); r.CommitVersion != 2 {
		t.Fatalf("after the cut: %v, want version 2 again", r)
	}
	got := fetchAll(t, srv.Addr().String())
	if len(got) != 2 || got[1].SpanLast != 0 {
		t.Fatalf("log after the cut: %v", got)
	}
}

// A streamed request must match its stage, fragments and bytes, or it is
// refused, and so is one with no stage.
func TestStreamedRequestWithoutAMatchingStageIsRefused(t *testing.T) {
	srv := listen(t, certifier.Config{})
	a := connect(t, srv, "a", 0)
	staged, err := stage(t, srv.Addr().String(), &pb.TxnID{Origin: "a", Seq: 1},
		fragment(t, "public.big", 0, 10, 10), fragment(t, "public.big", 10, 10, 10))
	if err != nil {
		t.Fatal(err)
	}
	wrong := &pb.StageReply{Fragments: 3, Bytes: staged.Bytes}
	r := a.certifyStreamed(t, 1, 0, wrong, tableWrite("public.big"))
	if r.AbortReason != pb.AbortReason_ABORT_REASON_INVALID || !strings.Contains(r.Detail, "does not match what was staged") ||
		!strings.Contains(r.Detail, "3 fragments") {
		t.Fatalf("mismatching fragments: %v", r)
	}
	r = a.certifyStreamed(t, 2, 0, staged, tableWrite("public.big"))
	if r.AbortReason != pb.AbortReason_ABORT_REASON_NOT_STAGED || !strings.Contains(r.Detail, "does not hold the transaction's streamed writeset") {
		t.Fatalf("nothing staged: %v", r)
	}
	if v := srv.Service.Version(); v != 0 {
		t.Fatalf("version %d after refusals", v)
	}
}

// Staging past --stage-bytes-max fails with ResourceExhausted naming it,
// and leaves nothing behind.
func TestStageOverItsLimitIsRefused(t *testing.T) {
	dir := t.TempDir()
	srv := listen(t, certifier.Config{DataDir: dir, StageBytesMax: 5000})
	_, err := stage(t, srv.Addr().String(), &pb.TxnID{Origin: "a", Seq: 1},
		fragment(t, "public.big", 0, 30, 50), fragment(t, "public.big", 30, 30, 50), fragment(t, "public.big", 60, 30, 50))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--stage-bytes-max") {
		t.Fatalf("stage over the limit: %v", err)
	}
	waitFor(t, func() bool { spools, _ := os.ReadDir(filepath.Join(dir, "stage")); return len(spools) == 0 })
	if _, err := stage(t, srv.Addr().String(), &pb.TxnID{Origin: "a", Seq: 2}, fragment(t, "public.big", 0, 30, 50)); err != nil {
		t.Fatalf("a stage within the limit after the refused one: %v", err)
	}
}

// Committing a streamed writeset holds a few fragments at a time, not the
// writeset: 128 MiB staged in 1 MiB fragments, the Go heap in use stays
// far below that while the fragments are spooled, copied into the log and
// delivered. The test sends one fragment 128 times and its replica counts
// the entries it is delivered without keeping them, so that what grows is
// the certifier's memory and both sides' gRPC buffers (about 40 MiB here,
// the same at 64 MiB staged: delivery's 4 MiB chunks and the transport's
// windows, on both ends of the stream, as this test runs both).
func TestStreamedCommitHoldsOneFragmentAtATime(t *testing.T) {
	const fragments = 128
	srv := listen(t, certifier.Config{NoSync: true})
	var delivered atomic.Uint64
	c, err := certclient.New(certclient.Options{Target: srv.Addr().String(), Replica: "a",
		OnEntries: func(entries []logentry.Entry, _ uint64) error { delivered.Add(uint64(len(entries))); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frag := fragment(t, "public.big", 0, 1000, 1<<20/1000-30)
	frags := make([][]byte, fragments)
	for i := range frags {
		frags[i] = frag
	}
	base, peakHeapInUse := heapInUseFromNow()
	staged, err := stage(t, srv.Addr().String(), &pb.TxnID{Origin: "a", Seq: 1}, frags...)
	if err != nil {
		t.Fatal(err)
	}
	reply := certifyStreamed(t, c, &pb.TxnID{Origin: "a", Seq: 1}, 0, staged, tableWrite("public.big"))
	waitFor(t, func() bool { return delivered.Load() == fragments })
	peak := peakHeapInUse()
	if reply.CommitVersion != fragments {
		t.Fatalf("streamed commit: %v", reply)
	}
	total := int64(staged.Bytes)
	grown := int64(peak) - int64(base)
	t.Logf("staged %d MiB; heap in use grew by at most %d MiB", total>>20, grown>>20)
	if grown > total/2 {
		t.Fatalf("heap in use grew by %d MiB while %d MiB were staged and committed: more than a few fragments at a time", grown>>20, total>>20)
	}
}

// A crash during the copy of the first transaction a certifier commits
// leaves a log of nothing but an incomplete span: it is emptied, and the
// versions start again at 1.
func TestIncompleteSpanThatIsTheWholeLogIsCut(t *testing.T) {
	dir := t.TempDir()
	log, err := wal.Open(wal.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var entries []wal.Entry
	for v := uint64(1); v <= 2; v++ { // of the span 1..3
		entries = append(entries, wal.Entry{Version: v, Payload: logentry.AppendSpanEntry(nil, logentry.SpanEntry{
			Version: v, Txn: &pb.TxnID{Origin: "x", Seq: 1}, Fragment: fragment(t, "public.big", int(v)*10, 10, 10), First: 1, Last: 3})})
	}
	if err := log.Append(entries); err != nil {
		t.Fatal(err)
	}
	log.Close()
	srv := listen(t, certifier.Config{DataDir: dir})
	if v := srv.Service.DurableVersion(); v != 0 {
		t.Fatalf("durable version %d, want 0", v)
	}
	if r := connect(t, srv, "a", 0).certify(t, 0, upsert("public.big", 5)); r.CommitVersion != 1 {
		t.Fatalf("after the cut: %v, want version 1", r)
	}
}
