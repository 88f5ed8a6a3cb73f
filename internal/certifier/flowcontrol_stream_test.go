package certifier_test

import (
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/certifier"
)

// Flow control end to end over gRPC: while one replica's stream asks for
// the pause (certclient.SetPause), the others' requests are held, for at
// most half a second each; its own are not; and the pause ends when it
// says so or when its stream ends.
func TestFlowControlHoldsOtherStreamsUntilThePauseEnds(t *testing.T) {
	srv := listen(t, certifier.Config{})
	slow, fast := connect(t, srv, "slow", 0), connect(t, srv, "fast", 0)
	const held = 450 * time.Millisecond // the certifier holds a message for 500 ms at most
	timed := func(r *replica, pk int) time.Duration {
		start := time.Now()
		r.certify(t, 0, upsert("public.t", pk))
		return time.Since(start)
	}
	if took := timed(fast, 1); took >= held {
		t.Fatalf("a certification without a pause took %v", took)
	}
	slow.client.SetPause(true)
	time.Sleep(100 * time.Millisecond) // the pause reaches the certifier
	if took := timed(fast, 2); took < held {
		t.Errorf("while another replica asks for the pause, a certification took %v, want it held about 500 ms", took)
	}
	if took := timed(slow, 3); took >= held {
		t.Errorf("the replica that asks for the pause was held %v", took)
	}
	slow.client.SetPause(false)
	time.Sleep(100 * time.Millisecond)
	if took := timed(fast, 4); took >= held {
		t.Errorf("after the pause was released, a certification took %v", took)
	}
	slow.client.SetPause(true)
	time.Sleep(100 * time.Millisecond)
	slow.client.Close()
	time.Sleep(100 * time.Millisecond) // the stream's end reaches the certifier
	if took := timed(fast, 5); took >= held {
		t.Errorf("after the pausing replica's stream ended, a certification took %v", took)
	}
}
