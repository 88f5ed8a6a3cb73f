package certifier_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestGroupMembershipUnderLoad: a 3-member group of real
// processes under a certify load whose clients only know the first three
// members. A 4th member is started empty with --join and added with
// `tashkent certifier members add` (a learner that catches up by the
// leader's snapshot plus log, then a voter); then the leader is removed
// with `members remove` (it hands its leadership over first); its process
// is killed, its directory wiped, and it joins again under a new id. Commits
// go on; every acknowledged commit is in the log; the members, the new ones
// included, end with equal logs; status lists the new members and no
// longer the removed one.
func TestGroupMembershipUnderLoad(t *testing.T) {
	bin := testbin.Path(t)
	members, peers, targets := startGroup(t, bin, tinySnapshots...)
	acks := &acknowledgements{version: map[string]uint64{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { load(ctx, t, targets, 13, acks); close(done) }()
	time.Sleep(time.Second)

	port, err := netutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	added := &groupMember{id: 4, dir: filepath.Join(filepath.Dir(members[0].dir), "4"), addr: "127.0.0.1:" + strconv.Itoa(port)}
	startMember(t, bin, added, peers+",4="+added.addr, append([]string{"--join"}, tinySnapshots...)...)
	out := runTashkent(t, bin, "certifier", "members", "add", "--certifier", targets, "--id", "4", "--addr", added.addr)
	if !strings.Contains(out, "voters [1 2 3 4]") {
		t.Fatalf("add: %s", out)
	}
	before := ackCount(acks)
	if _, ok := waitProgress(acks, before+500, 20*time.Second); !ok {
		t.Fatal("no progress after adding member 4")
	}

	leader := waitLeader(t, members, 20*time.Second)
	removedAt := time.Now()
	gap := make(chan time.Duration, 1)
	go func() { gap <- longestGap(acks, removedAt, pauseObservation) }()
	out = runTashkent(t, bin, "certifier", "members", "remove", "--certifier", targets, "--id", strconv.Itoa(leader.id))
	removal := time.Since(removedAt)
	voters := regexp.MustCompile(`voters \[([0-9 ]*)\]`).FindStringSubmatch(out)
	if voters == nil || len(strings.Fields(voters[1])) != 3 || slices.Contains(strings.Fields(voters[1]), strconv.Itoa(leader.id)) {
		t.Fatalf("remove %d: %s", leader.id, out)
	}
	before = ackCount(acks)
	if _, ok := waitProgress(acks, before+500, 20*time.Second); !ok {
		t.Fatalf("no progress after removing leader %d", leader.id)
	}
	pause := <-gap

	// The removed member's machine is reused: killed, its directory wiped,
	// it joins again under a new id (5) at the same address and catches up
	// by snapshot. (Under its old id it would have forgotten its vote and
	// log: Raft forbids that.)
	leader.proc.kill()
	if err := os.RemoveAll(leader.dir); err != nil {
		t.Fatal(err)
	}
	var remaining []*groupMember
	for _, m := range members {
		if m != leader {
			remaining = append(remaining, m)
		}
	}
	remaining = append(remaining, added)
	rejoined := &groupMember{id: 5, dir: leader.dir, addr: leader.addr}
	var peers5 []string
	for _, m := range append(remaining, rejoined) {
		peers5 = append(peers5, fmt.Sprintf("%d=%s", m.id, m.addr))
	}
	startMember(t, bin, rejoined, strings.Join(peers5, ","), append([]string{"--join"}, tinySnapshots...)...)
	out = runTashkent(t, bin, "certifier", "members", "add", "--certifier", added.addr, "--id", "5", "--addr", rejoined.addr)
	if !strings.Contains(out, "5]") {
		t.Fatalf("add 5: %s", out)
	}
	before = ackCount(acks)
	if _, ok := waitProgress(acks, before+300, 20*time.Second); !ok {
		t.Fatal("no progress after member 5 joined")
	}
	cancel()
	<-done
	remaining = append(remaining, rejoined)
	waitConverged(t, remaining, 30*time.Second)
	whole := checkGroupLogs(t, remaining, acks)

	st, err := memberStatus(added.addr)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, m := range st.Members {
		ids = append(ids, int(m.Id))
	}
	if !slices.Contains(ids, 4) || !slices.Contains(ids, 5) || slices.Contains(ids, leader.id) || len(ids) != 4 {
		t.Fatalf("member 4 lists members %v: want the 4 current ones, 4 and 5 included, %d not", ids, leader.id)
	}
	t.Logf("member 4 added under load; leader %d removed in %v (hand-over included), longest time without an acknowledged commit around it %v; "+
		"its machine wiped and re-added as member 5; %d versions, %d acknowledged commits; members now %v",
		leader.id, removal.Round(time.Millisecond), pause.Round(time.Millisecond), len(whole), len(acks.version), ids)
}

// runTashkent runs the tashkent binary and returns its output; a failure
// fails the test.
func runTashkent(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tashkent %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return fmt.Sprint(string(out))
}
