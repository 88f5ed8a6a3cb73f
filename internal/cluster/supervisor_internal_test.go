package cluster

import (
	"testing"
	"time"
)

func TestAutomaticRebuildsOfOneReplicaWaitLongerAndLonger(t *testing.T) {
	var w rebuildWait
	if !w.next.IsZero() {
		t.Fatal("the first rebuild waits")
	}
	now := time.Unix(1000, 0)
	var delays []time.Duration
	for range 10 {
		w.after(now)
		delays = append(delays, w.next.Sub(now))
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute,
		time.Hour, time.Hour, time.Hour, time.Hour}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("waits after each rebuild: %v, want %v", delays, want)
		}
	}
}
