package faults

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestGroupShortProfile is the short profile against a 3-member certifier
// group (Tashkent §7.3): kill -9 of the leader and of a follower, SIGSTOP
// of the leader, the leader and a follower cut off, a majority/minority
// split, beside the replica faults; the same checkers and the self-test
// with the conflict check disabled on every member.
func TestGroupShortProfile(t *testing.T) {
	cfg := GroupShortProfile()
	cfg.Duration = 30 * time.Second
	cfg.FaultHold = 1200 * time.Millisecond
	cfg.FaultGap = 1200 * time.Millisecond
	cfg.SelfTestDuration = 6 * time.Second
	if testing.Short() {
		cfg.Duration = 25 * time.Second
	}
	sum := runProfile(t, cfg, GroupFaults)
	if sum.Pauses[KillLeader].Count == 0 {
		t.Errorf("no failover pause measured after killing the leader: %v", sum.Pauses)
	}
	if sum.SelfTest == nil || !sum.SelfTest.Detected {
		t.Error("the self-test did not run or did not detect the disabled conflict check on the group")
	}
}

func TestLongestGap(t *testing.T) {
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	commits := []time.Duration{s(1), s(2), s(2.5), s(6), s(6.2), s(9)}
	for _, c := range []struct {
		from, to, want time.Duration
	}{
		{s(2.2), s(7), s(3.5)}, // 2.5 -> 6
		{s(0), s(1.5), s(1)},   // 0 -> 1
		{s(6.1), s(8.5), s(2.3)},
		{s(3), s(3), 0},
	} {
		if got := longestGap(commits, c.from, c.to); got != c.want {
			t.Errorf("longestGap(%v, %v) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

func TestSplitIsAMajorityAgainstAMinority(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{3, 5} {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i + 1
		}
		for range 20 {
			minority, cuts := split(ids, rng)
			if len(minority) != (n-1)/2 || len(cuts) != n {
				t.Fatalf("%d members: minority %v, cuts %v", n, minority, cuts)
			}
			for _, id := range minority {
				if len(cuts[id]) != n-len(minority) {
					t.Errorf("%d members: minority member %d drops %v, want the whole majority", n, id, cuts[id])
				}
			}
		}
	}
}

func TestFaultKindsMatchTheCertifiers(t *testing.T) {
	cfg := GroupShortProfile()
	cfg.Dir, cfg.Binary = "x", "y"
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Faults = append(cfg.Faults, KillCertifier)
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "single certifier") {
		t.Errorf("kill-certifier with a group: %v", err)
	}
	single := ShortProfile()
	single.Dir, single.Binary = "x", "y"
	single.Faults = []FaultKind{KillLeader}
	if err := single.validate(); err == nil || !strings.Contains(err.Error(), "needs a certifier group") {
		t.Errorf("kill-leader without a group: %v", err)
	}
	if ks, err := ParseFaults("kill-leader,partition-split", 3); err != nil || len(ks) != 2 {
		t.Errorf("ParseFaults with a group: %v %v", ks, err)
	}
	if _, err := ParseFaults("kill-leader", 1); err == nil || !strings.Contains(err.Error(), "--certifiers 3") {
		t.Errorf("kill-leader with a single certifier: %v", err)
	}
}
