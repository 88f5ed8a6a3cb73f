package certclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certclient/fakecert"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

func fakeClient(t *testing.T, target string, opts certclient.Options) *certclient.Client {
	t.Helper()
	opts.Target, opts.Replica = target, "r1"
	c, err := certclient.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func fragment(i int) []byte {
	b, err := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_UPSERT,
		Key: []byte(fmt.Sprintf("[%d]", i)), Row: []byte(fmt.Sprintf("(%d,x)", i))}}})
	if err != nil {
		panic(err)
	}
	return b
}

// A stage sends the transaction id with the first fragment only, the
// fragments in order, and returns what the certifier confirmed.
func TestStageSendsFragmentsInOrder(t *testing.T) {
	f := fakecert.Start(t)
	c := fakeClient(t, f.Addr(), certclient.Options{})
	txn := &pb.TxnID{Origin: "r1#x", Seq: 7}
	st, err := c.Stage(context.Background(), txn)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for i := range 5 {
		if err := st.Send(fragment(i)); err != nil {
			t.Fatalf("fragment %d: %v", i, err)
		}
		total += uint64(len(fragment(i)))
	}
	reply, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if reply.Fragments != 5 || reply.Bytes != total {
		t.Fatalf("stage reply %v, want 5 fragments of %d bytes", reply, total)
	}
	stages := f.Stages()
	if len(stages) != 1 || !proto.Equal(stages[0].Txn, txn) || stages[0].Err != nil {
		t.Fatalf("stages %+v, want one of %v that ended well", stages, txn)
	}
	for i, got := range stages[0].Fragments {
		if string(got) != string(fragment(i)) {
			t.Fatalf("fragment %d arrived as %x, want %x", i, got, fragment(i))
		}
	}
}

// A certifier's refusal (a limit, a group, an older release) is a
// StageRefusedError with its detail; no certifier at all is
// ErrStageUnavailable.
func TestStageErrorsTellRefusedFromUnavailable(t *testing.T) {
	limit, invalid := pb.AbortReason_ABORT_REASON_LIMIT, pb.AbortReason_ABORT_REASON_INVALID
	for _, tc := range []struct {
		name   string
		err    error
		reason pb.AbortReason
		detail string
	}{
		{"limit", status.Error(codes.ResourceExhausted, "staged writeset over --stage-bytes-max (8 GiB)"), limit, "staged writeset over --stage-bytes-max (8 GiB)"},
		{"precondition", status.Error(codes.FailedPrecondition, "this certifier does not stage streamed writesets"), limit, "this certifier does not stage streamed writesets"},
		{"malformed", status.Error(codes.InvalidArgument, "fragment 1: malformed writeset"), invalid, "fragment 1: malformed writeset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakecert.Start(t)
			f.RefuseStages(tc.err)
			c := fakeClient(t, f.Addr(), certclient.Options{})
			st, err := c.Stage(context.Background(), &pb.TxnID{Origin: "r1#x", Seq: 1})
			if err != nil {
				t.Fatal(err)
			}
			err = sendUntilFailure(st)
			var refused *certclient.StageRefusedError
			if !errors.As(err, &refused) || refused.Detail != tc.detail || refused.Reason != tc.reason {
				t.Fatalf("got %v, want a refusal (%v) saying %q", err, tc.reason, tc.detail)
			}
		})
	}
	t.Run("older certifier", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		pb.RegisterCertifierServer(srv, pb.UnimplementedCertifierServer{})
		go srv.Serve(ln)
		defer srv.Stop()
		c := fakeClient(t, ln.Addr().String(), certclient.Options{})
		st, err := c.Stage(context.Background(), &pb.TxnID{Origin: "r1#x", Seq: 1})
		if err == nil {
			err = sendUntilFailure(st)
		}
		var refused *certclient.StageRefusedError
		if !errors.As(err, &refused) || refused.Reason != limit {
			t.Fatalf("got %v, want a refusal on a limit", err)
		}
	})
	t.Run("no certifier", func(t *testing.T) {
		f := fakecert.Start(t)
		f.Stop()
		c := fakeClient(t, f.Addr(), certclient.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := c.Stage(ctx, &pb.TxnID{Origin: "r1#x", Seq: 1})
		if err == nil {
			err = sendUntilFailure(st)
		}
		if !errors.Is(err, certclient.ErrStageUnavailable) {
			t.Fatalf("got %v, want ErrStageUnavailable", err)
		}
	})
}

// sendUntilFailure sends fragments until the stage fails, then closes it;
// it returns the first error.
func sendUntilFailure(st *certclient.Stage) error {
	for i := range 1000 {
		if err := st.Send(fragment(i)); err != nil {
			return err
		}
	}
	_, err := st.Close()
	return err
}

// Cancel ends the call at the certifier.
func TestStageCancelEndsTheCall(t *testing.T) {
	f := fakecert.Start(t)
	c := fakeClient(t, f.Addr(), certclient.Options{})
	st, err := c.Stage(context.Background(), &pb.TxnID{Origin: "r1#x", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(fragment(0)); err != nil {
		t.Fatal(err)
	}
	st.Cancel()
	deadline := time.After(10 * time.Second)
	for {
		changed := f.Changed()
		if s := f.Stages(); len(s) == 1 && status.Code(s[0].Err) == codes.Canceled {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("stages %+v: the call did not end cancelled", f.Stages())
		}
	}
}

// A streamed request goes as it is: its Streamed reaches the certifier,
// and the size of its fragments is not held against the client's message
// limit (its own writeset is small). Settled from the delivered entries
// (its reply lost), it is answered at the span's last version, with its
// first.
func TestCertifyStreamedPassesThroughAndSettlesAtTheSpansEnd(t *testing.T) {
	f := fakecert.Start(t)
	var delivered []uint64
	c := fakeClient(t, f.Addr(), certclient.Options{MessageBytesMax: 1 << 20,
		OnEntries: func(entries []logentry.Entry, _ uint64) error {
			for _, e := range entries {
				delivered = append(delivered, e.Version)
			}
			return nil
		}})
	ctx := context.Background()
	if r, err := c.CertifyEncoded(ctx, &pb.CertifyRequestEncoded{Txn: &pb.TxnID{Origin: "r1#x", Seq: 1}, Writeset: fragment(100)}); err != nil || r.CommitVersion != 1 {
		t.Fatalf("a first transaction: %v, %v; want version 1", r, err)
	}
	txn := &pb.TxnID{Origin: "r1#x", Seq: 2}
	st, err := c.Stage(ctx, txn)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := st.Send(fragment(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Close(); err != nil {
		t.Fatal(err)
	}
	certified, _ := proto.Marshal(&pb.Writeset{Changes: []*pb.Change{{Table: "public.t", Op: pb.Op_OP_TABLE_WRITE}}})
	streamed := &pb.Streamed{Fragments: 3, Bytes: 8 << 30} // as if it were 8 GiB: not counted
	f.DropReplies(true)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	reply, err := c.CertifyEncoded(cctx, &pb.CertifyRequestEncoded{Txn: txn, StartVersion: 1, Writeset: certified, Streamed: streamed})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Decision != pb.Decision_DECISION_COMMIT || reply.FirstVersion != 2 || reply.CommitVersion != 4 {
		t.Fatalf("reply %v, want a commit of versions 2..4", reply)
	}
	if fmt.Sprint(delivered) != "[1 2 3 4]" {
		t.Fatalf("delivered %v, want 1..4", delivered)
	}
	reqs := f.Requests()
	if len(reqs) != 2 || !proto.Equal(reqs[1].Streamed, streamed) || string(reqs[1].Writeset) != string(certified) {
		t.Fatalf("the certifier got %v, want the request with %v and the certified writeset", reqs, streamed)
	}
}
