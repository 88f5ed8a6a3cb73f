package order

import (
	"testing"

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
	if err := o.Deliver(o.Epoch(), es); err != nil {
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
				if o.Abandon(l) {
					t.Fatal("cancel for an undelivered local")
				}
			}
			mustDeliver(t, o, entry(1, me, 7), remote(2), remote(3))
			var cancel bool
			switch c.abandonAt {
			case "delivered":
				cancel = o.Abandon(l)
			case "in flight before":
				if got := span(o.Next(10)); got != [2]uint64{2, 3} {
					t.Fatalf("batch %v, want 2..3", got)
				}
				cancel = o.Abandon(l)
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
	if o.Abandon(b) {
		t.Fatal("abandoning 3 cancelled the batch 2..2")
	}
	if !o.Abandon(a) {
		t.Fatal("abandoning 1 did not cancel the batch 2..2")
	}
	if o.Abandon(a) {
		t.Fatal("a second abandon of 1 asked again")
	}
	o.Done(false)
	if got := span(o.Next(10)); got != [2]uint64{1, 4} {
		t.Fatalf("batch %v, want 1..4", got)
	}
	o.Done(true)
	if o.Abandon(b) {
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
	if o.Abandon(seven) {
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
func TestResetForgetsTheOldEpoch(t *testing.T) {
	o := New(me, 0)
	l := o.Register(1)
	old := o.Epoch()
	o.Reset(0)
	if err := o.Deliver(old, []logentry.Entry{entry(1, me, 1)}); err != nil {
		t.Fatal(err)
	}
	if o.Delivered() != 0 {
		t.Fatal("a delivery of the old epoch was taken")
	}
	mustDeliver(t, o, entry(1, me, 1))
	if o.IsLocal(1) || l.Version() != 0 {
		t.Fatal("a Local of the old epoch got a version")
	}
	if o.Abandon(l) {
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
