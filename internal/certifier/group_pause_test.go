package certifier_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestGroupLeaderPausedUnderLoad stops the leader with SIGSTOP, which
// leaves its connections open, and holds it. The other members elect a
// new leader and the clients must move to it while the old one is still
// stopped: commits resume within a few seconds, not when it wakes. (Found
// by the fault harness's pause-leader fault: every pause cost exactly its
// hold, because the clients waited on the stopped member's open stream.)
func TestGroupLeaderPausedUnderLoad(t *testing.T) {
	const hold = 10 * time.Second
	bin := testbin.Path(t)
	members, _, targets := startGroup(t, bin)
	acks := &acknowledgements{version: map[string]uint64{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { load(ctx, t, targets, 11, acks); close(done) }()
	if _, ok := waitProgress(acks, 0, 20*time.Second); !ok {
		t.Fatal("no commit acknowledged before the pause")
	}

	leader := waitLeader(t, members, 20*time.Second)
	pid := leader.proc.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Replies already on their way when it stopped may still arrive.
	const drain = 500 * time.Millisecond
	time.Sleep(drain)
	before := ackCount(acks)
	resumed, ok := waitProgress(acks, before, hold-drain)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("no commit acknowledged in the %v leader %d was stopped", hold, leader.id)
	}
	t.Logf("leader %d stopped: commits resumed %v after it stopped, while it was still stopped", leader.id, (drain + resumed).Round(time.Millisecond))
	cancel()
	<-done
	waitConverged(t, members, 20*time.Second)
	checkGroupLogs(t, members, acks)
}
