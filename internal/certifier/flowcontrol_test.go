package certifier

import (
	"context"
	"testing"
	"time"
)

func TestFlowControlHoldsOthersWhileAReplicaIsBehind(t *testing.T) {
	f := newFlowControl(newMetrics(nil, nil))
	f.waitMax = time.Minute
	behind, other := &streamState{}, &streamState{}
	ctx := context.Background()

	if err := f.hold(ctx, other); err != nil {
		t.Fatal(err)
	}
	f.set(behind, true)
	if err := f.hold(ctx, behind); err != nil {
		t.Fatalf("the replica that asked for the pause was held: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.hold(ctx, other) }()
	select {
	case err := <-done:
		t.Fatalf("another replica's requests were not held (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.set(behind, false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hold did not end with the pause")
	}
}

// Two replicas behind at once do not hold each other: the transactions
// whose requests would wait may hold the row locks their applies need.
func TestFlowControlNeverHoldsAReplicaThatIsBehind(t *testing.T) {
	f := newFlowControl(newMetrics(nil, nil))
	f.waitMax = time.Minute
	a, b := &streamState{}, &streamState{}
	f.set(a, true)
	f.set(b, true)
	for _, st := range []*streamState{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := f.hold(ctx, st)
		cancel()
		if err != nil {
			t.Fatalf("a replica that is behind was held: %v", err)
		}
	}
}

func TestFlowControlHoldIsBounded(t *testing.T) {
	f := newFlowControl(newMetrics(nil, nil))
	f.waitMax = 100 * time.Millisecond
	f.set(&streamState{}, true)
	start := time.Now()
	if err := f.hold(context.Background(), &streamState{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < f.waitMax || took > 10*f.waitMax {
		t.Errorf("held %v, want about %v", took, f.waitMax)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.hold(ctx, &streamState{}); err == nil {
		t.Error("a hold whose stream ended returned no error")
	}
}
