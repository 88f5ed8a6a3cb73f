package certifier_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// Removing a voter while another one is down would leave voters without a
// reachable majority, and the group would stop taking updates: the leader
// refuses, and says why.
func TestGroupRefusesARemovalThatLeavesNoReachableMajority(t *testing.T) {
	bin := testbin.Path(t)
	members, _, targets := startGroup(t, bin)
	leader := waitLeader(t, members, 20*time.Second)
	var followers []*groupMember
	for _, m := range members {
		if m != leader {
			followers = append(followers, m)
		}
	}
	followers[0].proc.kill()
	followers[0].proc = nil
	time.Sleep(2 * time.Second) // more than an election timeout: the leader sees it gone

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "certifier", "members", "remove", "--certifier", targets,
		"--id", strconv.Itoa(followers[1].id)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "fewer than a majority") {
		t.Fatalf("removing member %d with member %d down: %v\n%s\nwant a refusal naming the missing majority", followers[1].id, followers[0].id, err, out)
	}
	acks := &acknowledgements{version: map[string]uint64{}}
	loadCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() { load(loadCtx, t, targets, 3, acks); close(done) }()
	if _, ok := waitProgress(acks, 100, 20*time.Second); !ok {
		t.Fatal("the group stopped taking updates after the refused removal")
	}
	stop()
	<-done
}
