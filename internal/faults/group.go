package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// A certifier group (`tashkent up --certifiers N`, Raft, Tashkent §7.3)
// under faults. `cluster.Up` starts the N members; the harness takes every
// one over (stops it and starts it again with the same data directory,
// ports and --peers) so that it can restart a killed member, restart the
// whole group for the self-test with the conflict check disabled on every
// member (the leader certifies, and any member may become leader), and cut
// members apart.
//
// Partitions between members use the group's transport fault point
// (--unsafe-fault-partition-file, certgroup/fault.go): while a member's
// file lists peer ids ("*": all), it drops every Raft message to and from
// them, as a network partition would. Network namespaces per member would
// cut agents too, but members and agents share 127.0.0.1 and the relay of
// netpart.go serves a single certifier address; the fault point is what
// the group's own real-process test (certifier/group_test.go) uses. What it
// does not cut: agents still reach an isolated leader, which must step
// down (Raft check-quorum) and refuse to certify — the harder case for the
// agents, which must not take a stale leader's word.

const (
	// memberReadyTimeout bounds a restarted member's start.
	memberReadyTimeout = 30 * time.Second
	// leaderWaitTimeout bounds the wait for a leader before a fault that
	// needs to know it (a fault right after the previous one heals may
	// find an election in progress).
	leaderWaitTimeout = 20 * time.Second
	// memberStopTimeout bounds a member's exit after SIGTERM.
	memberStopTimeout = 20 * time.Second
)

// member is one group member this harness runs.
type member struct {
	id   int
	cmd  *exec.Cmd
	done chan struct{}
}

// grouped reports whether the cluster has a certifier group.
func (c *control) grouped() bool { return c.certifiers > 1 }

// memberState returns member id's record in cluster.json (looked up each
// time: cluster.Up replaces the state after a restart).
func (c *control) memberState(id int) *cluster.Certifier {
	for _, m := range c.state().CertifierMembers() {
		if m.ID == id {
			return m
		}
	}
	return nil
}

func (c *control) memberIDs() []int {
	var ids []int
	for _, m := range c.state().CertifierMembers() {
		ids = append(ids, m.ID)
	}
	return ids
}

// memberAddr is where member id listens and where its peers dial it.
func memberAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func (c *control) peers() string {
	var parts []string
	for _, m := range c.state().CertifierMembers() {
		parts = append(parts, fmt.Sprintf("%d=%s", m.ID, memberAddr(m.Port)))
	}
	return strings.Join(parts, ",")
}

// partitionPath is member id's partition file (absent: no partition).
func (c *control) partitionPath(id int) string {
	return filepath.Join(c.dir, fmt.Sprintf("partition-member-%d", id))
}

// takeOverGroup stops every member `tashkent up` started and starts it
// again under this harness.
func (c *control) takeOverGroup(ctx context.Context) error {
	c.members = map[int]*member{}
	for _, id := range c.memberIDs() {
		pid := c.memberState(id).PID
		if err := signal([]int{pid}, syscall.SIGTERM); err != nil {
			return err
		}
		if !waitGone([]int{pid}, memberStopTimeout) {
			return fmt.Errorf("certifier member %d (pid %d) did not stop within %s of SIGTERM", id, pid, memberStopTimeout)
		}
	}
	return c.startGroup(ctx, false)
}

// startGroup starts every member, with the conflict check disabled when
// unsafe (the self-test).
func (c *control) startGroup(ctx context.Context, unsafe bool) error {
	for _, id := range c.memberIDs() {
		if err := c.startMember(ctx, id, unsafe); err != nil {
			return err
		}
	}
	return nil
}

// startMember starts member id with the partition fault point (and the
// unsafe conflict-check fault point when unsafe), records its PID in
// cluster.json and waits until it answers Status.
func (c *control) startMember(ctx context.Context, id int, unsafe bool) error {
	ms := c.memberState(id)
	logf, err := os.OpenFile(ms.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"certifier", "--data-dir", ms.DataDir, "--id", strconv.Itoa(id), "--peers", c.peers(),
		"--listen", memberAddr(ms.Port), "--metrics-listen", memberAddr(ms.MetricsPort),
		"--unsafe-fault-partition-file", c.partitionPath(id)}
	if unsafe {
		args = append(args, "--unsafe-fault-skip-conflict-check")
	}
	args = append(args, c.certArgs...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start certifier member %d: %w", id, err)
	}
	m := &member{id: id, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(m.done) }()
	c.mu.Lock()
	c.members[id] = m
	ms.PID = cmd.Process.Pid
	err = c.st.Save()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return waitMemberReady(ctx, memberAddr(ms.Port), m, ms.Log)
}

func waitMemberReady(ctx context.Context, addr string, m *member, log string) error {
	deadline := time.Now().Add(memberReadyTimeout)
	for {
		s, err := cluster.QueryCertifier(ctx, addr)
		if err == nil && s.Pid == int64(m.cmd.Process.Pid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("certifier member %d did not become ready within %s (last error: %v)", m.id, memberReadyTimeout, err)
		}
		select {
		case <-m.done:
			return fmt.Errorf("certifier member %d exited; see %s", m.id, log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// restartMember starts member id again after it was killed.
func (c *control) restartMember(ctx context.Context, id int) error {
	c.mu.Lock()
	m := c.members[id]
	c.mu.Unlock()
	if m != nil {
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("the killed certifier member %d has not exited", id)
		}
	}
	return c.startMember(ctx, id, false)
}

// stopGroup stops every member this harness started, by the PID it
// started, and records them stopped.
func (c *control) stopGroup() {
	c.mu.Lock()
	ms := c.members
	c.members = map[int]*member{}
	c.mu.Unlock()
	if len(ms) == 0 {
		return
	}
	for _, m := range ms {
		_ = m.cmd.Process.Signal(syscall.SIGCONT) // a paused member cannot stop
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, m := range ms {
		select {
		case <-m.done:
		case <-time.After(memberStopTimeout):
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	}
	c.mu.Lock()
	for _, m := range c.st.CertifierMembers() {
		if _, ok := ms[m.ID]; ok {
			m.PID = 0
		}
	}
	_ = c.st.Save()
	c.mu.Unlock()
}

// roles asks every member for its role and returns the leader of the
// highest term (0: none) and the others.
func (c *control) roles(ctx context.Context) (leader int, followers []int) {
	var term uint64
	for _, ms := range c.state().CertifierMembers() {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		s, err := cluster.QueryCertifier(qctx, memberAddr(ms.Port))
		cancel()
		if err == nil && s.Role == "leader" && s.Term >= term {
			leader, term = ms.ID, s.Term
		}
	}
	for _, id := range c.memberIDs() {
		if id != leader {
			followers = append(followers, id)
		}
	}
	return leader, followers
}

// waitRoles waits until the group has a leader.
func (c *control) waitRoles(ctx context.Context) (leader int, followers []int, err error) {
	deadline := time.Now().Add(leaderWaitTimeout)
	for {
		leader, followers = c.roles(ctx)
		if leader != 0 {
			return leader, followers, nil
		}
		if time.Now().After(deadline) || ctxtime.Sleep(ctx, 100*time.Millisecond) != nil {
			return 0, nil, fmt.Errorf("the certifier group had no leader for %s", leaderWaitTimeout)
		}
	}
}

// memberTarget names member id as a fault's target.
func (c *control) memberTarget(id int, role string) target {
	return target{name: fmt.Sprintf("certifier %d (%s)", id, role), pid: c.memberState(id).PID, member: id}
}

// cut writes the partition files: member id drops Raft messages to and
// from every member in cuts[id] ("*": all).
func (c *control) cut(cuts map[int][]string) error {
	var errs []error
	for id, peers := range cuts {
		errs = append(errs, os.WriteFile(c.partitionPath(id), []byte(strings.Join(peers, ",")+"\n"), 0o644))
	}
	return errors.Join(errs...)
}

// healCuts removes every partition file.
func (c *control) healCuts() error {
	var errs []error
	for _, id := range c.memberIDs() {
		if err := os.Remove(c.partitionPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// split divides the group's members at random into a minority and a
// majority and returns the cuts between them: each side drops the other's
// ids (explicit lists, not "*": the path a partial partition would take).
func split(ids []int, rng *rand.Rand) (minority []int, cuts map[int][]string) {
	shuffled := append([]int(nil), ids...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	k := (len(shuffled) - 1) / 2
	minority, majority := shuffled[:k], shuffled[k:]
	cuts = map[int][]string{}
	names := func(ids []int) []string {
		var out []string
		for _, id := range ids {
			out = append(out, strconv.Itoa(id))
		}
		return out
	}
	for _, id := range minority {
		cuts[id] = names(majority)
	}
	for _, id := range majority {
		cuts[id] = names(minority)
	}
	return minority, cuts
}
