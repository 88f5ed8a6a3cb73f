package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/order"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// spanWorld is one replica's database (with the extension and a stand-in
// for the agent's socket) and an agent run whose applier applies what a
// test delivers to its order by hand, as the certifier's stream would.
type spanWorld struct {
	t  *testing.T
	pg *agenttest.Agent
	a  *Agent
	r  *run
}

func newSpanWorld(t *testing.T) *spanWorld {
	pg := agenttest.Start(t)
	setup := pg.Connect("postgres")
	if _, err := setup.Exec(context.Background(), `SET tashkent.maintenance = on; CREATE TABLE kv (k int PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Name: "replica1", Certifier: "unused:1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w := &spanWorld{t: t, pg: pg, a: a}
	w.startRun()
	return w
}

// startRun starts a run from the database's version, its applier going.
func (w *spanWorld) startRun() {
	if w.r != nil {
		w.r.close()
	}
	r := newRun(w.a, context.Background())
	r.apply = w.pg.Connect("postgres")
	w.pg.RegisterApplier(r.apply)
	r.control.replace(context.Background(), w.pg.Connect("postgres"))
	committed, err := r.control.committedVersion(r.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	w.a.seq.do(func(o *order.Order) { o.Reset(committed) })
	r.spawn(r.applyLoop)
	w.t.Cleanup(r.close)
	w.r = r
}

func (w *spanWorld) deliver(es ...logentry.Entry) {
	w.t.Helper()
	if err := w.a.seq.deliver(w.a.seq.round(), es); err != nil {
		w.t.Fatal(err)
	}
}

// await waits until cond holds.
func (w *spanWorld) await(what string, cond func() bool) {
	w.t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.t.Fatalf("waited a minute for %s", what)
		}
	}
}

// rows reads kv as another session sees it.
func (w *spanWorld) rows() string {
	w.t.Helper()
	conn := w.pg.Connect("postgres")
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(string_agg(x::text, ' ' ORDER BY k), '') FROM kv AS x`).Scan(&s); err != nil {
		w.t.Fatal(err)
	}
	return s
}

func (w *spanWorld) version() uint64 {
	w.t.Helper()
	v, err := w.r.control.committedVersion(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return v
}

// ended waits for the run's end and returns why.
func (w *spanWorld) ended() error {
	w.t.Helper()
	select {
	case err := <-w.r.lost:
		return err
	case <-time.After(time.Minute):
		w.t.Fatal("the run did not end")
		return nil
	}
}

// kvEntry is version v of the transaction (origin, seq), in span
// first..last (0, 0: none), upserting row k.
func kvEntry(v, first, last uint64, origin string, seq uint64, k int) logentry.Entry {
	b, err := proto.Marshal(&pb.LogEntry{Version: v, Txn: &pb.TxnID{Origin: origin, Seq: seq}, SpanFirst: first, SpanLast: last,
		Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "public.kv", Op: pb.Op_OP_UPSERT,
			Key: []byte(fmt.Sprintf("[%d]", k)), Row: []byte(fmt.Sprintf("(%d,v%d)", k, v))}}}})
	if err != nil {
		panic(err)
	}
	return logentry.Entry{Version: v, Bytes: b}
}

// The applier applies a remote span as it is delivered, in one
// transaction: the fragments delivered so far run in it and their bytes
// are let go while the rest is not delivered yet, nothing shows and the
// replica's version stays before the span until its last fragment
// commits it; a version after it follows.
func TestTheApplierAppliesASpanAsItIsDelivered(t *testing.T) {
	w := newSpanWorld(t)
	const other = "replica2#other"
	w.deliver(kvEntry(1, 1, 3, other, 1, 1), kvEntry(2, 1, 3, other, 1, 2))
	w.await("the span's first two fragments applied", func() bool { return get(w.a.seq, (*order.Order).Applied) == 2 })
	if n := w.a.BacklogBytes(); n != 0 {
		t.Errorf("%d bytes held after the fragments were applied, want 0", n)
	}
	if v, rows := w.version(), w.rows(); v != 0 || rows != "" {
		t.Fatalf("mid-span the replica is at version %d with rows %q, want 0 and none", v, rows)
	}
	w.deliver(kvEntry(3, 1, 3, other, 1, 1), kvEntry(4, 0, 0, other, 2, 4))
	w.await("version 4 committed", func() bool { return w.a.CommittedVersion() == 4 })
	if v, rows := w.version(), w.rows(); v != 4 || rows != "(1,v3) (2,v2) (4,v4)" {
		t.Fatalf("the replica is at version %d with rows %q", v, rows)
	}
}

// A span whose transaction is lost midway (its connection's backend
// terminated) ends the run, leaving nothing of it behind; the next run
// applies it again from its first version. A local span given up by its
// backend once delivered ends the run as well, and the next run applies
// it as remote.
func TestASpanThatCannotGoOnEndsTheRun(t *testing.T) {
	w := newSpanWorld(t)
	const other = "replica2#other"
	span := []logentry.Entry{kvEntry(1, 1, 3, other, 1, 1), kvEntry(2, 1, 3, other, 1, 2), kvEntry(3, 1, 3, other, 1, 3)}
	w.deliver(span[0])
	w.await("the span's first fragment applied", func() bool { return get(w.a.seq, (*order.Order).Applied) == 1 })
	if err := w.r.control.exec(w.r.ctx, `SELECT pg_terminate_backend($1)`, int32(w.r.apply.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	w.deliver(span[1])
	if err := w.ended(); !errors.Is(err, errRestart) {
		t.Fatalf("the run ended with %v, want a restart", err)
	}
	if v, rows := w.version(), w.rows(); v != 0 || rows != "" {
		t.Fatalf("after a lost span the replica is at version %d with rows %q", v, rows)
	}
	w.startRun()
	w.deliver(span...)
	w.await("the span committed by the next run", func() bool { return w.a.CommittedVersion() == 3 })

	l := w.a.seq.register(7)
	local := []logentry.Entry{kvEntry(4, 4, 5, w.a.origin, 7, 4), kvEntry(5, 4, 5, w.a.origin, 7, 5)}
	w.deliver(local[0])
	if v := w.a.seq.versionOf(l); v != 5 {
		t.Fatalf("the local span's version is %d, want 5 (its last)", v)
	}
	w.a.seq.abandon(l)
	if err := w.ended(); !errors.Is(err, errRestart) {
		t.Fatalf("the run ended with %v, want a restart", err)
	}
	w.startRun()
	w.deliver(local...)
	w.await("the abandoned span applied by the next run", func() bool { return w.a.CommittedVersion() == 5 })
	if rows := w.rows(); rows != "(1,v1) (2,v2) (3,v3) (4,v4) (5,v5)" {
		t.Fatalf("rows %q", rows)
	}
}

// A fragment that cannot be applied halts the replica, as any version
// that cannot be applied, and the span's transaction is rolled back, not
// left open holding its rows' locks.
func TestAFragmentThatCannotBeAppliedHaltsAndRollsTheSpanBack(t *testing.T) {
	w := newSpanWorld(t)
	const other = "replica2#other"
	w.deliver(kvEntry(1, 1, 2, other, 1, 1))
	w.await("the span's first fragment applied", func() bool { return get(w.a.seq, (*order.Order).Applied) == 1 })
	bad, err := proto.Marshal(&pb.LogEntry{Version: 2, Txn: &pb.TxnID{Origin: other, Seq: 1}, SpanFirst: 1, SpanLast: 2,
		Writeset: &pb.Writeset{Changes: []*pb.Change{{Table: "public.missing", Op: pb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte("(1)")}}}})
	if err != nil {
		t.Fatal(err)
	}
	w.deliver(logentry.Entry{Version: 2, Bytes: bad})
	w.await("the replica halted", func() bool { s, _ := w.a.State(); return s == StateHalted })
	if st := w.r.apply.PgConn().TxStatus(); st != 'I' {
		t.Errorf("the applier's connection is in status %q after the halt, want idle", st)
	}
	conn := w.pg.Connect("postgres")
	if _, err := conn.Exec(context.Background(), `SET tashkent.maintenance = on; SET lock_timeout = '1s'; INSERT INTO kv VALUES (1, 'local')`); err != nil {
		t.Fatalf("the span's row is still locked after the halt: %v", err)
	}
}
