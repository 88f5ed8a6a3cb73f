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

func TestResourceErrorsAreTheHaltsOfClass53And58(t *testing.T) {
	for why, want := range map[string]string{
		`apply versions 7..7: ERROR: could not extend file "base/5/16390": No space left on device (SQLSTATE 53100)`: "53100",
		`apply versions 7..7: ERROR: out of memory (SQLSTATE 53200)`:                                                 "53200",
		`apply versions 2..2: ERROR: could not open file "base/5/16390": No such file or directory (SQLSTATE 58P01)`: "58P01",
		`apply versions 3..3: ERROR: duplicate key value violates unique constraint "t_pkey" (SQLSTATE 23505)`:       "",
		`apply versions 2..2: table public.halt_me does not exist on this replica`:                                   "",
		`apply versions 4..4: ERROR: a writeset limit (SQLSTATE 54000)`:                                              "",
	} {
		code, ok := resourceError(why)
		if code != want || ok != (want != "") {
			t.Errorf("resourceError(%q) = %q, %v; want %q", why, code, ok, want)
		}
	}
}
