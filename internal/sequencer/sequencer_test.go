package sequencer

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

func entry(v uint64) logentry.Entry { return logentry.Entry{Version: v, Bytes: []byte{byte(v)}} }

func deliver(s *Sequencer, v uint64, origin string, seq uint64) {
	s.Deliver(s.Epoch(), []logentry.Entry{entry(v)}, []string{origin}, []uint64{seq})
}

// A replica where local and remote versions interleave commits every version
// exactly once, in order, whoever commits it.
func TestLocalAndRemoteVersionsCommitInOrder(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		s := New("me", 0)
		const versions = 300
		var mu sync.Mutex
		var order []uint64
		record := func(v uint64) {
			mu.Lock()
			order = append(order, v)
			mu.Unlock()
			s.Commit(v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var applier, sessions sync.WaitGroup
		applier.Add(1)
		go func() {
			defer applier.Done()
			for {
				batch, err := s.NextRemote(ctx, 1+int(seed%5))
				if err != nil {
					return // cancelled once every version committed
				}
				for _, e := range batch {
					record(e.Version)
				}
			}
		}()
		// Local sessions register before their version is delivered.
		for v := uint64(1); v <= versions; v++ {
			if rng.IntN(3) == 0 {
				deliver(s, v, "other", v)
				continue
			}
			l := s.Register(v)
			deliver(s, v, "me", v)
			abandon := rng.IntN(10) == 0 // its database commit failed: the applier takes it over
			sessions.Add(1)
			go func() {
				defer sessions.Done()
				if l.Version() != v {
					t.Errorf("local %d got version %d", v, l.Version())
					return
				}
				if abandon {
					s.Abandon(l)
					return
				}
				if err := s.WaitTurn(ctx, l); err != nil {
					t.Errorf("wait turn %d: %v", v, err)
					return
				}
				record(v)
			}()
		}
		sessions.Wait()
		for s.Committed() < versions && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
		applier.Wait()
		if len(order) != versions {
			t.Fatalf("seed %d: %d versions committed, want %d", seed, len(order), versions)
		}
		for i, v := range order {
			if v != uint64(i+1) {
				t.Fatalf("seed %d: position %d committed version %d", seed, i, v)
			}
		}
	}
}

func TestEntryOfUnregisteredOwnTransactionIsRemote(t *testing.T) {
	// After a restart of the replica's process, its own earlier
	// transactions arrive as entries nobody waits for: they must be
	// applied, not waited on forever.
	s := New("me", 0)
	deliver(s, 1, "me", 42)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	batch, err := s.NextRemote(ctx, 10)
	if err != nil || len(batch) != 1 || batch[0].Version != 1 {
		t.Fatalf("NextRemote = %v, %v; want version 1", batch, err)
	}
}

func TestRemoteWaitsForLocalBeforeIt(t *testing.T) {
	s := New("me", 0)
	l := s.Register(7)
	deliver(s, 1, "me", 7)
	deliver(s, 2, "other", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.NextRemote(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("remote version 2 became ready before local version 1 committed: %v", err)
	}
	if err := s.WaitTurn(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	s.Commit(1)
	batch, err := s.NextRemote(context.Background(), 10)
	if err != nil || len(batch) != 1 || batch[0].Version != 2 {
		t.Fatalf("after local commit: %v %v", batch, err)
	}
}

func TestResetWakesWaitersAndRedelivers(t *testing.T) {
	s := New("me", 5)
	l := s.Register(1)
	deliver(s, 6, "other", 1)
	deliver(s, 7, "me", 1)
	errc := make(chan error, 1)
	go func() { errc <- s.WaitTurn(context.Background(), l) }()
	time.Sleep(10 * time.Millisecond)
	s.Reset(4) // the database lost version 5 in a crash (synchronous_commit=off)
	if err := <-errc; !errors.Is(err, ErrReset) {
		t.Fatalf("waiter got %v, want ErrReset", err)
	}
	if s.Committed() != 4 || s.Delivered() != 4 {
		t.Fatalf("after reset: committed %d delivered %d", s.Committed(), s.Delivered())
	}
	deliver(s, 5, "other", 9)
	batch, err := s.NextRemote(context.Background(), 10)
	if err != nil || len(batch) != 1 || batch[0].Version != 5 {
		t.Fatalf("redelivered: %v %v", batch, err)
	}
}

// A stream opened before a reset goes on delivering for a moment (the
// caller closes it once it has reopened one); what it delivers is dropped,
// not taken for a gap.
func TestDeliveriesFromBeforeAResetAreDropped(t *testing.T) {
	s := New("me", 0)
	stale := s.Epoch()
	for v := uint64(1); v <= 4; v++ {
		s.Deliver(stale, []logentry.Entry{entry(v)}, []string{"other"}, []uint64{v})
	}
	s.Reset(2) // the database recovered to version 2
	s.Deliver(stale, []logentry.Entry{entry(5)}, []string{"other"}, []uint64{5})
	if s.Delivered() != 2 {
		t.Fatalf("a stale stream's delivery was taken: delivered %d", s.Delivered())
	}
	s.Deliver(s.Epoch(), []logentry.Entry{entry(3), entry(4)}, []string{"other", "other"}, []uint64{3, 4})
	if s.Delivered() != 4 {
		t.Fatalf("the new stream's deliveries: delivered %d, want 4", s.Delivered())
	}
}

func TestCommitOutOfOrderPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("commit of version 2 before 1 did not panic")
		}
	}()
	New("me", 0).Commit(2)
}

// A displaced local transaction stops waiting for its turn with
// ErrDisplaced, and once abandoned its version is applied as a remote one
// after the earlier versions. Displacing after the turn came changes
// nothing.
func TestDisplacedLocalGivesWayAndIsAppliedInItsPlace(t *testing.T) {
	s := New("me", 0)
	deliver(s, 1, "other", 1)
	l := s.Register(7)
	deliver(s, 2, "me", 7)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- s.WaitTurn(ctx, l) }()
	s.Displace(l)
	if err := <-waited; !errors.Is(err, ErrDisplaced) {
		t.Fatalf("WaitTurn of a displaced transaction: %v, want ErrDisplaced", err)
	}
	s.Abandon(l)
	batch, err := s.NextRemote(ctx, 10)
	if err != nil || len(batch) != 2 || batch[0].Version != 1 || batch[1].Version != 2 {
		t.Fatalf("remote batch %v (%v), want versions 1 and 2", batch, err)
	}
	s.CommitBatch(batch)

	late := s.Register(8)
	deliver(s, 3, "me", 8)
	s.Displace(late)
	if err := s.WaitTurn(ctx, late); err != nil {
		t.Fatalf("WaitTurn whose turn had come before Displace: %v, want nil", err)
	}
}

// A replica whose applier stopped for good (an uncertified unique-index
// collision, say) must not leave its sessions waiting for ever: every wait,
// current and future, ends with ErrHalted and the cause, and a wait already
// satisfied still succeeds.
func TestHaltEndsEveryWait(t *testing.T) {
	s := New("me", 0)
	mine := s.Register(1)
	deliver(s, 1, "other", 9)
	deliver(s, 2, "me", 1)
	s.Commit(1)
	cause := errors.New("duplicate key value violates unique constraint")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waiting := make(chan error, 1)
	go func() { waiting <- s.WaitCommitted(ctx, 3) }()
	time.Sleep(20 * time.Millisecond) // let it block
	s.Halt(cause)
	if err := <-waiting; !errors.Is(err, ErrHalted) || !errors.Is(err, cause) {
		t.Fatalf("a current wait returned %v, want ErrHalted wrapping the cause", err)
	}
	if err := s.WaitTurn(ctx, mine); err != nil {
		t.Fatalf("the turn of version 2 has come (1 committed), yet WaitTurn returned %v", err)
	}
	if _, err := s.NextRemote(ctx, 10); !errors.Is(err, ErrHalted) {
		t.Fatalf("a later wait returned %v, want ErrHalted", err)
	}
	s.Reset(1)
	if err := s.WaitCommitted(ctx, 2); !errors.Is(err, ErrHalted) {
		t.Fatalf("after a reset, a wait returned %v: halting is for good", err)
	}
}
