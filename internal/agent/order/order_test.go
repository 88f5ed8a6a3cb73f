package order

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

const me = "replica1#run"

func entry(v uint64, origin string, seq uint64) logentry.Entry {
	return logentry.Encode(&pb.LogEntry{Version: v, Txn: &pb.TxnID{Origin: origin, Seq: seq}, Writeset: &pb.Writeset{}})
}

func remote(v uint64) logentry.Entry { return entry(v, "replica2#other", v) }

func mustDeliver(t *testing.T, o *Order, es ...logentry.Entry) {
	t.Helper()
	if err := o.Deliver(o.Round(), es); err != nil {
		t.Fatal(err)
	}
}

func span(b *Batch) [2]uint64 {
	if b == nil {
		return [2]uint64{}
	}
	return [2]uint64{b.First, b.Last}
}

// A batch is a run of consecutive remote versions from the lowest remote
// one above the committed version; it may start after local versions not
// committed yet (pipelined apply), and ends before the next local one.
func TestNextPlansRunsOfRemoteVersions(t *testing.T) {
	o := New(me, 10)
	l := o.Register(1)
	mustDeliver(t, o, remote(11), remote(12), entry(13, me, 1), remote(14), remote(15), remote(16))
	if l.Version() != 13 {
		t.Fatalf("local got version %d, want 13", l.Version())
	}
	if got := span(o.Next(100)); got != [2]uint64{11, 12} {
		t.Fatalf("first batch %v, want 11..12", got)
	}
	if o.Next(100) != nil {
		t.Fatal("a second batch while one is in flight")
	}
	o.Done(true)
	if o.Committed() != 12 {
		t.Fatalf("committed %d, want 12", o.Committed())
	}
	// 14.. waits behind local 13, which its backend commits: planned now.
	if got := span(o.Next(2)); got != [2]uint64{14, 15} {
		t.Fatalf("second batch %v, want 14..15 (max 2)", got)
	}
	o.Done(false) // e.g. a deadlock: planned again
	if got := span(o.Next(100)); got != [2]uint64{14, 16} {
		t.Fatalf("batch after a failure %v, want 14..16", got)
	}
	o.Done(true)
	if o.Committed() != 16 || o.Waiting() != 0 {
		t.Fatalf("committed %d waiting %d, want 16 and 0", o.Committed(), o.Waiting())
	}
}

func TestAbandonMakesAVersionRemote(t *testing.T) {
	cases := []struct {
		name       string
		abandonAt  string // "pending", "delivered", "in flight before"
		wantCancel bool
		wantNext   [2]uint64
	}{
		{"before its entry arrives", "pending", false, [2]uint64{1, 3}},
		{"after delivery, nothing in flight", "delivered", false, [2]uint64{1, 3}},
		{"with a later batch in flight", "in flight before", true, [2]uint64{1, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := New(me, 0)
			l := o.Register(7)
			if c.abandonAt == "pending" {
				if o.Abandon(l) != Nothing {
					t.Fatal("cancel for an undelivered local")
				}
			}
			mustDeliver(t, o, entry(1, me, 7), remote(2), remote(3))
			var cancel bool
			switch c.abandonAt {
			case "delivered":
				cancel = o.Abandon(l) == Cancel
			case "in flight before":
				if got := span(o.Next(10)); got != [2]uint64{2, 3} {
					t.Fatalf("batch %v, want 2..3", got)
				}
				cancel = o.Abandon(l) == Cancel
				if !o.CancelWanted() {
					t.Fatal("CancelWanted false after a cancelling abandon")
				}
				o.Done(false) // the cancelled batch
			}
			if cancel != c.wantCancel {
				t.Fatalf("cancel %v, want %v", cancel, c.wantCancel)
			}
			if got := span(o.Next(10)); got != c.wantNext {
				t.Fatalf("next %v, want %v", got, c.wantNext)
			}
		})
	}
}

// Next looks past the local versions it found once (Order.localThrough);
// one of them abandoned afterwards is the next batch, and remote versions
// delivered after them are found.
func TestNextFindsAVersionAbandonedBehindLocalOnes(t *testing.T) {
	o := New(me, 0)
	var ls []*Local
	for seq := uint64(1); seq <= 3; seq++ {
		ls = append(ls, o.Register(seq))
		mustDeliver(t, o, entry(seq, me, seq))
	}
	if b := o.Next(10); b != nil {
		t.Fatalf("batch %v while every version is local", span(b))
	}
	o.Abandon(ls[1])
	if got := span(o.Next(10)); got != [2]uint64{2, 2} {
		t.Fatalf("batch %v, want the abandoned 2..2", got)
	}
	o.Done(true)
	mustDeliver(t, o, remote(4))
	if got := span(o.Next(10)); got != [2]uint64{4, 4} {
		t.Fatalf("batch %v, want 4..4 after local 3", got)
	}
}

// An abandoned version after the batch in flight does not cancel it; a
// second abandon reports nothing new; an abandon of a committed version
// is a no-op.
func TestAbandonOnlyCancelsABatchThatWaitsForIt(t *testing.T) {
	o := New(me, 0)
	a, b := o.Register(1), o.Register(2)
	mustDeliver(t, o, entry(1, me, 1), remote(2), entry(3, me, 2), remote(4))
	if got := span(o.Next(10)); got != [2]uint64{2, 2} {
		t.Fatalf("batch %v, want 2..2", got)
	}
	if o.Abandon(b) != Nothing {
		t.Fatal("abandoning 3 cancelled the batch 2..2")
	}
	if o.Abandon(a) != Cancel {
		t.Fatal("abandoning 1 did not cancel the batch 2..2")
	}
	if o.Abandon(a) != Nothing {
		t.Fatal("a second abandon of 1 asked again")
	}
	o.Done(false)
	if got := span(o.Next(10)); got != [2]uint64{1, 4} {
		t.Fatalf("batch %v, want 1..4", got)
	}
	o.Done(true)
	if o.Abandon(b) != Nothing {
		t.Fatal("abandon of a committed version")
	}
}

// Versions a backend held at start are local; they become remote when
// given up, and drop out when the database shows them committed, also
// before the stream delivered them.
func TestInheritedVersions(t *testing.T) {
	o := New(me, 5)
	if o.Inherit(5) != nil {
		t.Fatal("inherited a committed version")
	}
	six, seven := o.Inherit(6), o.Inherit(7)
	mustDeliver(t, o, entry(6, "replica1#before", 40), entry(7, "replica1#before", 41), remote(8))
	if !o.IsLocal(6) || !six.Inherited() || six.Version() != 6 {
		t.Fatal("inherited 6 is not local")
	}
	o.Observe(7) // 6 and 7 committed by their backends
	if o.Delivered() != 8 || o.Committed() != 7 {
		t.Fatalf("delivered %d committed %d", o.Delivered(), o.Committed())
	}
	if o.Abandon(seven) != Nothing {
		t.Fatal("abandon of a committed inherited version")
	}
	nine := o.Inherit(9)
	o.Abandon(nine)
	mustDeliver(t, o, remote(9))
	if got := span(o.Next(10)); got != [2]uint64{8, 9} {
		t.Fatalf("batch %v, want 8..9", got)
	}
}

// A stale read of the database's version changes nothing.
func TestObserveNeverGoesBack(t *testing.T) {
	o := New(me, 9)
	o.Observe(8)
	if o.Committed() != 9 {
		t.Fatalf("committed %d after observing 8, want 9", o.Committed())
	}
	o.Observe(11)
	if o.Committed() != 11 || o.Delivered() != 11 {
		t.Fatalf("committed %d delivered %d after observing 11", o.Committed(), o.Delivered())
	}
}

// After a reset, Locals of before and streams of before count for
// nothing.
func TestResetForgetsTheOldRound(t *testing.T) {
	o := New(me, 0)
	l := o.Register(1)
	old := o.Round()
	o.Reset(0)
	if err := o.Deliver(old, []logentry.Entry{entry(1, me, 1)}); err != nil {
		t.Fatal(err)
	}
	if o.Delivered() != 0 {
		t.Fatal("a delivery of the old round was taken")
	}
	mustDeliver(t, o, entry(1, me, 1))
	if o.IsLocal(1) || l.Version() != 0 {
		t.Fatal("a Local of the old round got a version")
	}
	if o.Abandon(l) != Nothing {
		t.Fatal("abandon of an old Local")
	}
}

func TestForeignOriginWithTheSameSeqIsRemote(t *testing.T) {
	o := New(me, 0)
	o.Register(1)
	mustDeliver(t, o, entry(1, "replica1#earlier-run", 1))
	if o.IsLocal(1) {
		t.Fatal("an entry of another run of the agent was taken as local")
	}
}

// RemoteWaiting is the applier's backlog: remote versions delivered and
// not committed, whatever local versions sit between them.
func TestRemoteWaitingCountsOnlyRemoteVersions(t *testing.T) {
	o := New(me, 10)
	o.Register(1)
	mustDeliver(t, o, remote(11), entry(12, me, 1), remote(13), remote(14))
	if got := o.RemoteWaiting(); got != 3 {
		t.Fatalf("remote waiting %d, want 3 (11, 13, 14)", got)
	}
	o.Next(100)
	o.Done(true) // 11
	if got := o.RemoteWaiting(); got != 2 {
		t.Fatalf("after applying 11: remote waiting %d, want 2", got)
	}
	o.Observe(14)
	if got := o.RemoteWaiting(); got != 0 {
		t.Fatalf("after 14 committed: remote waiting %d, want 0", got)
	}
}

// A hold stops the applier's batches after its version, and starts after
// what is already under way (the batch in flight); it only moves forward.
func TestHoldStopsBatchesAfterItsVersion(t *testing.T) {
	o := New(me, 10)
	o.Register(1)
	mustDeliver(t, o, remote(11), remote(12), entry(13, me, 1), remote(14), remote(15))
	if got := o.Hold(0); got != 10 {
		t.Fatalf("Hold(0) with nothing under way = %d, want 10 (the committed version)", got)
	}
	if b := o.Next(100); b != nil {
		t.Fatalf("Next planned %v past the hold", span(b))
	}
	if got := o.Hold(14); got != 14 {
		t.Fatalf("Hold(14) = %d, want 14", got)
	}
	if b := o.Next(100); span(b) != [2]uint64{11, 12} {
		t.Fatalf("Next = %v, want [11 12]", span(b))
	}
	o.Done(true)
	o.Observe(13)
	if b := o.Next(100); span(b) != [2]uint64{14, 14} {
		t.Fatalf("Next = %v, want [14 14]: the batch stops at the hold", span(b))
	}
	if got := o.Hold(0); got != 14 {
		t.Fatalf("Hold(0) with batch [14 14] in flight = %d, want 14", got)
	}
	if got := o.Hold(5); got != 14 {
		t.Fatalf("a hold never moves back: Hold(5) = %d, want 14", got)
	}
	o.Done(true)
	if b := o.Next(100); b != nil {
		t.Fatalf("Next planned %v past the hold", span(b))
	}
	o.Release()
	if b := o.Next(100); span(b) != [2]uint64{15, 15} {
		t.Fatalf("Next after Release = %v, want [15 15]", span(b))
	}
}

// The order counts the bytes of the versions it holds; it is full past a
// limit, but not while the batch in flight waits for a backend whose
// certification is undecided (its decision comes after the next delivery).
func TestFullOnlyWhenTheApplierCanMakeRoom(t *testing.T) {
	o := New(me, 10)
	o.Register(1)
	es := []logentry.Entry{remote(11), remote(12), entry(13, me, 1), remote(14)}
	mustDeliver(t, o, es...)
	total := 0
	for _, e := range es {
		total += len(e.Bytes)
	}
	if o.WaitingBytes() != total {
		t.Fatalf("WaitingBytes = %d, want %d", o.WaitingBytes(), total)
	}
	if o.Full(total) || !o.Full(1) {
		t.Fatalf("Full(%d) = %v, Full(1) = %v; want false, true", total, o.Full(total), o.Full(1))
	}
	o.AwaitDecision()
	if !o.Full(1) {
		t.Fatal("AwaitDecision without a batch in flight changed Full")
	}
	o.Next(100)
	o.AwaitDecision()
	if o.Full(1) {
		t.Fatal("full while the batch in flight waits for an undecided backend")
	}
	o.Done(true)
	if want := len(es[2].Bytes) + len(es[3].Bytes); o.WaitingBytes() != want || !o.Full(1) {
		t.Fatalf("after batch 11..12: WaitingBytes %d (want %d), Full(1) %v (want true)", o.WaitingBytes(), want, o.Full(1))
	}
	o.Reset(20)
	if o.WaitingBytes() != 0 || o.Full(0) {
		t.Fatalf("after Reset: WaitingBytes %d, Full(0) %v", o.WaitingBytes(), o.Full(0))
	}
}

// fragment is entry v of the span first..last of the transaction
// (origin, seq), its writeset n bytes long.
func fragment(v, first, last uint64, origin string, seq uint64, n int) logentry.Entry {
	b, err := proto.Marshal(&pb.LogEntry{Version: v, Txn: &pb.TxnID{Origin: origin, Seq: seq}, SpanFirst: first, SpanLast: last,
		Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_INSERT_ROW, Row: bytes.Repeat([]byte{'x'}, n)}}}})
	if err != nil {
		panic(err)
	}
	return logentry.Entry{Version: v, Bytes: b}
}

// spanOf is the entries of the span first..last of (origin, seq).
func spanOf(first, last uint64, origin string, seq uint64, n int) []logentry.Entry {
	var es []logentry.Entry
	for v := first; v <= last; v++ {
		es = append(es, fragment(v, first, last, origin, seq, n))
	}
	return es
}

func remoteSpan(first, last uint64) []logentry.Entry {
	return spanOf(first, last, "replica2#other", first, 100)
}

func sizeOf(es ...logentry.Entry) int {
	n := 0
	for _, e := range es {
		n += len(e.Bytes)
	}
	return n
}

// A remote span goes to the applier one fragment at a time, as it is
// delivered, never with versions outside it; each applied fragment's
// bytes are let go, and the committed version jumps from before the span
// to its last version.
func TestRemoteSpanIsAppliedFragmentByFragment(t *testing.T) {
	o := New(me, 10)
	sp := remoteSpan(12, 14)
	mustDeliver(t, o, remote(11), sp[0], sp[1])
	if got := span(o.Next(100)); got != [2]uint64{11, 11} {
		t.Fatalf("first batch %v, want 11..11: a batch never runs into a span", got)
	}
	o.Done(true)
	b := o.Next(100)
	if span(b) != [2]uint64{12, 12} || !b.BeginsSpan() || b.EndsSpan() || b.SpanFirst != 12 || b.SpanLast != 14 {
		t.Fatalf("batch %+v, want fragment 12 beginning span 12..14", b)
	}
	o.Done(true)
	if o.Committed() != 11 || o.Applied() != 12 {
		t.Fatalf("after fragment 12: committed %d applied %d, want 11 and 12", o.Committed(), o.Applied())
	}
	if o.WaitingBytes() != sizeOf(sp[1]) {
		t.Fatalf("WaitingBytes %d, want %d: the applied fragment's bytes are let go", o.WaitingBytes(), sizeOf(sp[1]))
	}
	if got := span(o.Next(100)); got != [2]uint64{13, 13} {
		t.Fatalf("batch %v, want 13", got)
	}
	o.Done(false) // rolled back to its savepoint: planned again
	if b := o.Next(100); span(b) != [2]uint64{13, 13} || b.BeginsSpan() || b.EndsSpan() {
		t.Fatalf("batch after a failure %+v, want 13 again, inside the span", b)
	}
	o.Done(true)
	if b := o.Next(100); b != nil {
		t.Fatalf("planned %v before the span's last fragment was delivered", span(b))
	}
	mustDeliver(t, o, sp[2], remote(15))
	if got := o.Hold(0); got != 14 {
		t.Fatalf("Hold(0) with the span under way = %d, want 14", got)
	}
	o.Release()
	b = o.Next(100)
	if span(b) != [2]uint64{14, 14} || !b.EndsSpan() {
		t.Fatalf("batch %+v, want 14 ending the span", b)
	}
	o.Done(true)
	if o.Committed() != 14 || o.WaitingBytes() != sizeOf(remote(15)) {
		t.Fatalf("committed %d WaitingBytes %d, want 14 and %d", o.Committed(), o.WaitingBytes(), sizeOf(remote(15)))
	}
	if got := span(o.Next(100)); got != [2]uint64{15, 15} {
		t.Fatalf("batch %v, want 15", got)
	}
}

// A local span's Local has the span's last version from its first
// entry, no bytes are kept for it, and remote versions after it are
// planned while its backend commits it.
func TestLocalSpanKeepsNoBytes(t *testing.T) {
	o := New(me, 10)
	l := o.Register(3)
	sp := spanOf(11, 13, me, 3, 1000)
	mustDeliver(t, o, sp[0])
	if l.Version() != 13 {
		t.Fatalf("local span's version %d after its first entry, want 13 (its last)", l.Version())
	}
	mustDeliver(t, o, sp[1], sp[2], remote(14))
	if o.WaitingBytes() != sizeOf(remote(14)) {
		t.Fatalf("WaitingBytes %d, want %d: a local span's bytes are not kept", o.WaitingBytes(), sizeOf(remote(14)))
	}
	for v := uint64(11); v <= 13; v++ {
		if !o.IsLocal(v) {
			t.Fatalf("version %d of the local span is not local", v)
		}
	}
	if got := span(o.Next(100)); got != [2]uint64{14, 14} {
		t.Fatalf("batch %v, want 14", got)
	}
	if o.Abandon(l) != Restart {
		t.Fatal("abandoning a delivered local span did not ask for a restart")
	}
}

// A local span abandoned before its entries come is remote; abandoned
// once one came, it cannot be applied (its bytes are gone): the run must
// end, and nothing is planned meanwhile. A second abandon asks nothing
// new; Reset starts afresh.
func TestAbandonedLocalSpan(t *testing.T) {
	o := New(me, 0)
	early := o.Register(1)
	if o.Abandon(early) != Nothing {
		t.Fatal("abandoning an undelivered span asked for something")
	}
	mustDeliver(t, o, spanOf(1, 2, me, 1, 10)...)
	if b := o.Next(10); !b.BeginsSpan() || o.IsLocal(1) {
		t.Fatalf("an abandoned undelivered span is not remote: batch %+v", b)
	}
	o.Done(true)
	if b := o.Next(10); !b.EndsSpan() {
		t.Fatalf("batch %+v, want the span's last fragment", b)
	}
	o.Done(true)
	l := o.Register(2)
	mustDeliver(t, o, fragment(3, 3, 5, me, 2, 10))
	if o.Abandon(l) != Restart || !o.RestartWanted() {
		t.Fatal("abandoning a partly delivered local span did not ask for a restart")
	}
	if o.Abandon(l) != Nothing {
		t.Fatal("a second abandon asked again")
	}
	mustDeliver(t, o, fragment(4, 3, 5, me, 2, 10), fragment(5, 3, 5, me, 2, 10), remote(6))
	if b := o.Next(10); b != nil {
		t.Fatalf("planned %v while a restart is wanted", span(b))
	}
	o.Reset(2)
	if o.RestartWanted() {
		t.Fatal("Reset kept the restart")
	}
	mustDeliver(t, o, spanOf(3, 5, me, 2, 10)...)
	if b := o.Next(10); span(b) != [2]uint64{3, 3} || !b.BeginsSpan() {
		t.Fatalf("after the restart the span is not remote: %+v", b)
	}
}

// A version before a span abandoned while the span's first fragment is
// in flight cancels it, as any batch; abandoned once a fragment ran in
// the span's transaction, it asks for a restart: the open transaction
// keeps the applier from it, and the fragments applied are gone.
func TestAbandonBeforeASpan(t *testing.T) {
	for _, c := range []struct {
		name    string
		applied bool
		want    Abandonment
	}{{"first fragment in flight", false, Cancel}, {"span's transaction open", true, Restart}} {
		t.Run(c.name, func(t *testing.T) {
			o := New(me, 0)
			l := o.Register(1)
			mustDeliver(t, o, entry(1, me, 1))
			mustDeliver(t, o, remoteSpan(2, 4)...)
			o.Next(10)
			if c.applied {
				o.Done(true)
				o.Next(10)
			}
			if got := o.Abandon(l); got != c.want {
				t.Fatalf("Abandon = %v, want %v", got, c.want)
			}
		})
	}
	// The first fragment, which waits for no turn, ran to its end before
	// the cancel reached it: its transaction is open, and the version
	// before it can only be applied in a new run.
	o := New(me, 0)
	l := o.Register(1)
	mustDeliver(t, o, entry(1, me, 1))
	mustDeliver(t, o, remoteSpan(2, 4)...)
	o.Next(10)
	if o.Abandon(l) != Cancel {
		t.Fatal("no cancel for the span's first fragment in flight")
	}
	o.Done(true)
	if !o.RestartWanted() || o.Next(10) != nil {
		t.Fatal("a fragment applied despite its cancel did not ask for a restart")
	}
}

// A hold never falls inside a span: one asked inside a delivered span
// moves to its last version; a span passes a hold whole or not at all.
func TestHoldNeverFallsInsideASpan(t *testing.T) {
	o := New(me, 10)
	sp := remoteSpan(12, 14)
	mustDeliver(t, o, remote(11), sp[0], sp[1])
	if got := o.Hold(13); got != 14 {
		t.Fatalf("Hold(13) = %d, want 14 (the span's last)", got)
	}
	o.Release()
	if got := o.Hold(11); got != 11 {
		t.Fatalf("Hold(11) = %d, want 11", got)
	}
	o.Next(10)
	o.Done(true)
	if b := o.Next(10); b != nil {
		t.Fatalf("span fragment %v planned past the hold at 11", span(b))
	}
	if got := o.Hold(12); got != 14 {
		t.Fatalf("Hold(12) = %d, want 14", got)
	}
	if b := o.Next(10); !b.BeginsSpan() {
		t.Fatalf("batch %+v, want the span's first fragment once the hold covers it", b)
	}
}

// A span larger than the backlog bound flows through it: the agent
// delivers while the order is not Full, the applier lets each fragment go
// once applied, and the held bytes stay within the bound and one
// delivery.
func TestSpanLargerThanTheBacklogBound(t *testing.T) {
	const fragments, bound = 40, 5000
	o := New(me, 0)
	sp := spanOf(1, fragments, "replica2#other", 1, 1000)
	next, most := 0, 0
	for o.Committed() < fragments {
		if next < len(sp) && !o.Full(bound) {
			mustDeliver(t, o, sp[next])
			next++
			most = max(most, o.WaitingBytes())
			continue
		}
		if o.Next(10) == nil {
			t.Fatalf("stuck: %d fragments delivered, committed %d, %d bytes held", next, o.Committed(), o.WaitingBytes())
		}
		o.Done(true)
	}
	if limit := bound + len(sp[0].Bytes); most > limit {
		t.Fatalf("held %d bytes, more than the bound %d and one fragment", most, limit)
	}
	if o.WaitingBytes() != 0 || o.RemoteWaiting() != 0 {
		t.Fatalf("after the span: WaitingBytes %d, RemoteWaiting %d", o.WaitingBytes(), o.RemoteWaiting())
	}
}

// Flow control counts a span as one transaction.
func TestRemoteWaitingCountsASpanAsOne(t *testing.T) {
	o := New(me, 0)
	o.Register(1)
	mustDeliver(t, o, remote(1))
	mustDeliver(t, o, remoteSpan(2, 5)...)
	mustDeliver(t, o, spanOf(6, 8, me, 1, 10)...)
	mustDeliver(t, o, remote(9))
	if got := o.RemoteWaiting(); got != 3 {
		t.Fatalf("RemoteWaiting %d, want 3 (1, the span 2..5, 9)", got)
	}
}

// Entries that break a span's shape are refused.
func TestDeliverRefusesBrokenSpans(t *testing.T) {
	cases := []struct {
		name      string
		committed uint64
		entries   []logentry.Entry
	}{
		{"a fragment without its span's first", 1, []logentry.Entry{fragment(2, 1, 3, "r", 1, 1)}},
		{"another entry inside a span", 0, []logentry.Entry{fragment(1, 1, 3, "r", 1, 1), remote(2)}},
		{"a fragment outside its span", 0, []logentry.Entry{fragment(1, 2, 3, "r", 1, 1)}},
		{"a fragment of another span inside a span", 0, []logentry.Entry{fragment(1, 1, 3, "r", 1, 1), fragment(2, 2, 3, "r", 1, 1)}},
	}
	for _, c := range cases {
		o := New(me, c.committed)
		if err := o.Deliver(o.Round(), c.entries); err == nil {
			t.Errorf("%s: delivered", c.name)
		}
	}
}
