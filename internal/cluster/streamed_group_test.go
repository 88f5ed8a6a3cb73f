package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A certifier group commits streamed writesets as a single certifier does
// (docs/GUARANTEES.md, "Large transactions"): the leader stages the
// fragments and copies them to the other members, Raft orders only the
// decision, and every member copies the span into its versioned log from
// its own stage, or fetches it from another member when it has none.
// Every member's memory stays under the certifier's bound, and kill -9
// of the leader or of a follower in the middle of the commit leaves every
// replica and every member with the transaction whole or not at all.
func TestLargeTransactionsStreamThroughACertifierGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and applies hundreds of MiB; not in -short")
	}
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 3, "--certifiers", "3",
		fmt.Sprintf("--agent-arg=--apply-backlog-bytes=%d", streamedBacklog),
		fmt.Sprintf("--certifier-arg=--memory-limit=%d", certifierMemoryLimit))
	groupLeader(t, dir)
	t.Run("COPY", func(t *testing.T) {
		copyStreams(t, bin, dir, st, envInt(t, "TASHKENT_STREAMED_GROUP_COPY_MIB", 160))
		checkMembersAgree(t, dir)
	})
	for _, k := range groupStreamedKills {
		t.Run(k.name, func(t *testing.T) {
			st = killedMidStream(t, bin, dir, st, k)
			checkMembersAgree(t, dir)
		})
	}
}

var groupStreamedKills = []streamedKill{
	{name: "leader killed while staging", victim: leaderPID,
		due: func(staged, _, total int64) bool { return staged > total/4 }},
	{name: "follower killed while staging", victim: followerPID,
		due: func(staged, _, total int64) bool { return staged > total/4 }, commits: true},
	// The span is written only once Raft committed its decision: the new
	// leader answers the agent's retry from its log.
	{name: "leader killed while logging the span", victim: leaderPID,
		due: func(_, logGrowth, total int64) bool { return logGrowth > total/3 }, commits: true},
}

// leaderPID is the PID of the member that says it leads (0: none does).
func leaderPID(st *cluster.State, _ int) int {
	for _, m := range st.CertifierMembers() {
		if memberRole(m) == "leader" {
			return m.PID
		}
	}
	return 0
}

// followerPID is the PID of a member that says it follows.
func followerPID(st *cluster.State, _ int) int {
	for _, m := range st.CertifierMembers() {
		if memberRole(m) == "follower" {
			return m.PID
		}
	}
	return 0
}

func memberRole(m *cluster.Certifier) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rep, err := cluster.QueryCertifier(ctx, fmt.Sprintf("127.0.0.1:%d", m.Port))
	if err != nil || int(rep.Pid) != m.PID {
		return ""
	}
	return rep.Role
}

// checkMembersAgree waits until every member of the group has the same
// durable version in its versioned log, which a member that lacked a
// span's stage reaches only by fetching the span from another member.
func checkMembersAgree(t *testing.T, dir string) {
	t.Helper()
	st := load(t, dir)
	var durable []uint64
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		durable = durable[:0]
		for _, m := range st.CertifierMembers() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			rep, err := cluster.QueryCertifier(ctx, fmt.Sprintf("127.0.0.1:%d", m.Port))
			cancel()
			if err == nil {
				durable = append(durable, rep.DurableVersion)
			}
		}
		if len(durable) == len(st.CertifierMembers()) && slices.Min(durable) == slices.Max(durable) {
			t.Logf("every certifier member's versioned log is at version %d", durable[0])
			return
		}
	}
	t.Fatalf("the certifier members' durable versions did not meet within 2 minutes: %v", durable)
}
