package faults

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Failover pauses: how long the cluster went without acknowledging a
// commit around each fault — the figure the certifier group's own test
// reports (certifier/group_test.go), here measured from the clients'
// side, through agents, PostgreSQL and the group.

// commitTimes returns when each acknowledged list-append transaction that
// wrote (a read-only one never reaches the certifier) completed, since the
// history's start, in order.
func commitTimes(h *History) []time.Duration {
	var out []time.Duration
	for _, op := range h.Ops() {
		if op.Type != OK {
			continue
		}
		if slices.ContainsFunc(op.Value, func(m Mop) bool { return m.Kind == Append }) {
			out = append(out, op.Time)
		}
	}
	slices.Sort(out)
	return out
}

// withPauses sets each fault's Pause: the longest time without an
// acknowledged commit from its injection until observe after it healed
// (or the last commit of the run, if earlier).
func withPauses(faults []Fault, commits []time.Duration, observe time.Duration) []Fault {
	if len(commits) == 0 {
		return faults
	}
	last := commits[len(commits)-1]
	for i, f := range faults {
		if f.Kind == ClientDisconnect || f.Healed == 0 {
			continue
		}
		faults[i].Pause = longestGap(commits, f.At, min(f.Healed+observe, last))
	}
	return faults
}

// longestGap is the longest interval in [from, to] without a commit.
func longestGap(commits []time.Duration, from, to time.Duration) time.Duration {
	if to <= from {
		return 0
	}
	i := sort.Search(len(commits), func(i int) bool { return commits[i] > from })
	prev, gap := from, time.Duration(0)
	for ; i < len(commits) && commits[i] <= to; i++ {
		gap = max(gap, commits[i]-prev)
		prev = commits[i]
	}
	return max(gap, to-prev)
}

// PauseStats summarizes the pauses of one fault kind.
type PauseStats struct {
	Count  int           `json:"count"`
	Median time.Duration `json:"median_ns"`
	Max    time.Duration `json:"max_ns"`
}

// pausesByKind summarizes the pauses per fault kind.
func pausesByKind(faults []Fault) map[FaultKind]PauseStats {
	by := map[FaultKind][]time.Duration{}
	for _, f := range faults {
		if f.Pause > 0 {
			by[f.Kind] = append(by[f.Kind], f.Pause)
		}
	}
	out := map[FaultKind]PauseStats{}
	for k, ps := range by {
		slices.Sort(ps)
		out[k] = PauseStats{Count: len(ps), Median: ps[len(ps)/2], Max: ps[len(ps)-1]}
	}
	return out
}

func describePauses(p map[FaultKind]PauseStats) string {
	var parts []string
	for k, s := range p {
		parts = append(parts, fmt.Sprintf("%s: median %.2f s, max %.2f s (%d)", k, s.Median.Seconds(), s.Max.Seconds(), s.Count))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
