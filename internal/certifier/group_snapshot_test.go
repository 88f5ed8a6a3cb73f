package certifier_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// Snapshot settings of the real-process snapshot test: tiny, so that a
// few seconds of load take dozens of snapshots.
var tinySnapshots = []string{"--snapshot-entries", "500", "--snapshot-catch-up-entries", "100"}

// raftDirBoundBytes bounds a member's Raft directory with tinySnapshots:
// the snapshot (the conflict window of a few thousand versions of two keys
// each, well under 1 MiB) and at most a few segments of at most
// 600 entries of about 150 bytes. (The versioned log, which snapshots do
// not compact, is reported beside it.)
const raftDirBoundBytes = 4 << 20

// TestGroupSnapshotsUnderLoad (Tashkent §7.3 "state transfer"): a
// 3-member group of real processes with a tiny snapshot interval under a
// certify load. Every member's Raft directory stays under a bound while
// the versioned log grows. A follower is killed and started again once the
// leader's log no longer holds what it is missing: it catches up by the
// leader's snapshot plus the log after it. Every acknowledged commit is in
// the log, every member ends at the same version with equal entries, and
// the follower's versioned log restarts at the snapshot it installed.
//
// (A member whose directory is wiped must come back under a new id, after
// `certifier members remove` and `add`: Raft forbids a member to forget
// what it acknowledged; the membership test does that.)
func TestGroupSnapshotsUnderLoad(t *testing.T) {
	bin := testbin.Path(t)
	members, peers, targets := startGroup(t, bin, tinySnapshots...)
	acks := &acknowledgements{version: map[string]uint64{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { load(ctx, t, targets, 11, acks); close(done) }()
	largest := watchRaftDirs(ctx, members)

	time.Sleep(time.Second)
	leader := waitLeader(t, members, 20*time.Second)
	victim := members[0]
	if victim == leader {
		victim = members[1]
	}
	victim.proc.kill()
	victim.proc = nil
	before := ackCount(acks)
	if _, ok := waitProgress(acks, before+2000, 30*time.Second); !ok {
		t.Fatalf("fewer than 2000 commits acknowledged within 30 s with member %d down", victim.id)
	}
	startMember(t, bin, victim, peers, tinySnapshots...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range members {
				st, err := memberStatus(m.addr)
				t.Logf("member %d: %v %v", m.id, st, err)
			}
			if victim.proc != nil {
				t.Logf("member %d stderr (tail):\n%s", victim.id, process.OutputTail(victim.proc.stderr.String(), 4000))
			}
		}
	})
	time.Sleep(time.Second)
	cancel()
	<-done
	waitConverged(t, members, 30*time.Second)

	whole := checkGroupLogs(t, members, acks)
	base, _ := fetchMemberLog(t, victim.addr)
	if base == 0 {
		t.Fatalf("member %d, 2000 versions behind, holds the whole log: it did not catch up by snapshot", victim.id)
	}
	if !strings.Contains(victim.proc.stderr.String(), "installing the leader's snapshot") {
		t.Fatalf("member %d logged no snapshot install:\n%s", victim.id, victim.proc.stderr.String())
	}
	peak := <-largest
	if peak > raftDirBoundBytes {
		t.Fatalf("a Raft directory reached %d bytes, over the bound of %d", peak, raftDirBoundBytes)
	}
	versioned := dirBytes(members[2].dir) - dirBytes(filepath.Join(members[2].dir, "raft"))
	t.Logf("%d versions, %d acknowledged commits; largest Raft directory %d KiB (bound %d KiB), versioned log %d KiB; member %d killed, caught up by a snapshot of version %d",
		len(whole), len(acks.version), peak>>10, raftDirBoundBytes>>10, versioned>>10, victim.id, base)
}

// watchRaftDirs samples every member's Raft directory until ctx ends and
// then sends the largest size seen.
func watchRaftDirs(ctx context.Context, members []*groupMember) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		for ctx.Err() == nil {
			for _, m := range members {
				peak = max(peak, dirBytes(filepath.Join(m.dir, "raft")))
			}
			time.Sleep(20 * time.Millisecond)
		}
		out <- peak
	}()
	return out
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}
