package certifier_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/netutil"
)

// inProcessGroup starts n members in this process (real gRPC on loopback,
// real Raft logs in temp dirs): the race detector then sees the Node, the
// transport and the service's group paths.
func inProcessGroup(t *testing.T, n int) ([]*certifier.Server, []string) {
	t.Helper()
	return inProcessGroupWith(t, n, certifier.Config{})
}

// inProcessGroupWith is inProcessGroup with every member configured as
// cfg says, but for its directory and its group.
func inProcessGroupWith(t *testing.T, n int, cfg certifier.Config) ([]*certifier.Server, []string) {
	t.Helper()
	members := map[uint64]string{}
	var addrs []string
	for id := 1; id <= n; id++ {
		port, err := netutil.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		members[uint64(id)] = fmt.Sprintf("127.0.0.1:%d", port)
		addrs = append(addrs, members[uint64(id)])
	}
	servers := make([]*certifier.Server, n)
	for id := 1; id <= n; id++ {
		dir := t.TempDir()
		node, err := certgroup.OpenNode(certgroup.NodeConfig{
			Core:    certgroup.Config{ID: uint64(id), Decode: certifier.DecodeEntryKeys, ElectionTicks: 20},
			DataDir: dir + "/raft", Members: members,
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg.DataDir, cfg.Group = dir, node
		srv, err := certifier.Listen(cfg, members[uint64(id)], "")
		if err != nil {
			t.Fatal(err)
		}
		servers[id-1] = srv
		t.Cleanup(func() { srv.Close() })
	}
	return servers, addrs
}

func leaderOf(t *testing.T, servers []*certifier.Server) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, s := range servers {
			if s != nil && s.Service.StatusNow().Role == "leader" {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader")
	return -1
}

// clientAtFollower is a client for replica r1 that starts at a follower
// of the group led by member leader: it must be redirected.
func clientAtFollower(t *testing.T, addrs []string, leader int) *certclient.Client {
	t.Helper()
	order := append([]string{addrs[(leader+1)%3]}, addrs[leader], addrs[(leader+2)%3])
	c, err := certclient.New(certclient.Options{Target: strings.Join(order, ","), Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGroupInProcessFollowsTheLeaderAndKeepsEveryCommit: a follower refuses
// Certify and names the leader, the client follows; closing the leader
// moves the group to a new one, and every acknowledged version is served
// (Fetch) by every live member, identically.
func TestGroupInProcessFollowsTheLeaderAndKeepsEveryCommit(t *testing.T) {
	servers, addrs := inProcessGroup(t, 3)
	leader := leaderOf(t, servers)
	c := clientAtFollower(t, addrs, leader)
	acked := map[uint64]uint64{} // seq -> version
	certify := func(seq uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		reply, err := c.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: seq}, StartVersion: c.Delivered(),
			Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", int(seq))}}})
		if err != nil {
			t.Fatalf("certify %d: %v", seq, err)
		}
		if reply.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("certify %d: %v", seq, reply)
		}
		acked[seq] = reply.CommitVersion
	}
	for seq := uint64(1); seq <= 50; seq++ {
		certify(seq)
	}
	servers[leader].Close()
	servers[leader] = nil
	for seq := uint64(51); seq <= 100; seq++ {
		certify(seq)
	}
	newLeader := leaderOf(t, servers)
	if newLeader == leader {
		t.Fatal("the closed member still leads")
	}
	// A retry of an acknowledged transaction gets its version back.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := c.Certify(ctx, &pb.CertifyRequest{Txn: &pb.TxnID{Origin: "r1", Seq: 7}, StartVersion: c.Delivered(),
		Writeset: &pb.Writeset{Changes: []*pb.Change{upsert("public.t", 7)}}})
	if err != nil || reply.CommitVersion != acked[7] {
		t.Fatalf("retry of seq 7 (version %d): %v %v", acked[7], reply, err)
	}
	for i, s := range servers {
		if s == nil {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for s.Service.DurableVersion() < 100 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		log := fetchAll(t, addrs[i])
		if len(log) != 100 {
			t.Fatalf("member %d serves %d versions, want 100", i+1, len(log))
		}
		for _, e := range log {
			if acked[e.Txn.Seq] != e.Version {
				t.Fatalf("member %d has seq %d at version %d, acknowledged at %d", i+1, e.Txn.Seq, e.Version, acked[e.Txn.Seq])
			}
		}
	}
}
