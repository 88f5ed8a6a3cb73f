package faults

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// injectGroup injects one fault on the certifier group: it finds the
// leader first (a fault on "the leader" must hit the member that leads
// now), injects, holds, heals and returns the record.
func (n *nemesis) injectGroup(ctx context.Context, kind FaultKind) Fault {
	heal := context.WithoutCancel(ctx)
	f := Fault{Kind: kind, Target: "certifier group", At: n.log.since()}
	leader, followers, err := n.ctl.waitRoles(heal)
	if err != nil {
		f.Error = err.Error()
		f.Healed = n.log.since()
		n.logf("fault %s: %v", kind, err)
		return f
	}
	f.At = n.log.since()
	switch kind {
	case KillLeader, KillFollower:
		t := n.memberFor(kind, leader, followers)
		f.Target, f.PIDs = t.name, []int{t.pid}
		err = n.killMember(ctx, heal, t)
	case PauseLeader:
		t := n.ctl.memberTarget(leader, "leader")
		f.Target, f.PIDs = t.name, []int{t.pid}
		err = signal(f.PIDs, syscall.SIGSTOP)
		n.logf("fault: %s %s (pid %d)", kind, t.name, t.pid)
		_ = ctxtime.Sleep(ctx, n.hold)
		if cerr := signal(f.PIDs, syscall.SIGCONT); cerr != nil {
			err = cerr
		}
	case PartitionLeader, PartitionFollower:
		t := n.memberFor(kind, leader, followers)
		f.Target = t.name + " cut from every other member"
		err = n.partition(ctx, heal, kind, map[int][]string{t.member: {"*"}})
	case PartitionSplit:
		minority, cuts := split(n.ctl.memberIDs(), n.rng)
		slices.Sort(minority)
		f.Target = fmt.Sprintf("certifier members %v (minority; leader %d) cut from the rest", minority, leader)
		err = n.partition(ctx, heal, kind, cuts)
	default:
		err = fmt.Errorf("the nemesis cannot inject %s", kind)
	}
	if err == nil && n.ctl.mode == cluster.ModeED {
		// As after a single certifier's kill (awaitWhole): the versions
		// a lost leadership decided failed, and the next fault must not
		// find a replica that still holds them.
		err = n.ctl.awaitSessions(heal)
	}
	f.Healed = n.log.since()
	if err != nil {
		f.Error = err.Error()
		n.logf("fault %s %s: %v", kind, f.Target, err)
	}
	f.LeaderBefore = leader
	f.LeaderAfter, _ = n.ctl.roles(heal)
	return f
}

// memberFor picks the leader, or a follower at random.
func (n *nemesis) memberFor(kind FaultKind, leader int, followers []int) target {
	if kind == KillLeader || kind == PartitionLeader {
		return n.ctl.memberTarget(leader, "leader")
	}
	return n.ctl.memberTarget(followers[n.rng.IntN(len(followers))], "follower")
}

// killMember kills t with SIGKILL, holds, and restarts it.
func (n *nemesis) killMember(ctx, heal context.Context, t target) error {
	var err error
	if err = signal([]int{t.pid}, syscall.SIGKILL); err == nil && !waitGone([]int{t.pid}, 10*time.Second) {
		err = fmt.Errorf("still running 10 s after SIGKILL")
	}
	n.logf("fault: kill %s (pid %d)", t.name, t.pid)
	_ = ctxtime.Sleep(ctx, n.hold)
	if rerr := n.ctl.restartMember(heal, t.member); rerr != nil {
		err = fmt.Errorf("restart: %w", rerr)
	}
	return err
}

// partition writes the cuts, holds, and heals them.
func (n *nemesis) partition(ctx, heal context.Context, kind FaultKind, cuts map[int][]string) error {
	err := n.ctl.cut(cuts)
	n.logf("fault: %s (member -> peers dropped: %v)", kind, cuts)
	_ = ctxtime.Sleep(ctx, n.hold)
	if herr := n.ctl.healCuts(); herr != nil {
		err = herr
	}
	return err
}
