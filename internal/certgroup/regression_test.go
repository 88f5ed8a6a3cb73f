package certgroup_test

// Regression tests for a member restarted empty under an id the group
// still counts (regression_internal_test.go has the other ways a member
// could lose or misread its state).

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

// quietRounds runs n fault-free rounds of the simulation, one new
// transaction per round when load.
func (s *sim) quietRounds(t *testing.T, n int, load bool) {
	t.Helper()
	for i := 0; i < n; i++ {
		s.now++
		if err := s.deliver(); err != nil {
			t.Fatal(err)
		}
		if err := s.tick(); err != nil {
			t.Fatal(err)
		}
		if load {
			if err := s.submit(s.newTxn(), s.target(), true); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The cause of "tocommit(N) is out of range [lastIndex(0)]": a member that
// the group still counts (the leader remembers how much of the log it
// acknowledged, Progress.Match) comes back with an empty Raft log and
// --join (its directory wiped, or a wrong --data-dir). The leader's next
// heartbeat carries commit = min(Match, committed) > 0 and Raft panics in
// the member. `certifier members add` of that id answers success without
// doing anything (Node.AddMember returns nil for an existing voter), so an
// operator who wipes a member and "re-adds" it under the same id gets
// exactly this panic. Wanted: a clear refusal, not a Raft panic.
func TestSameIDWipedRestartIsRefusedNotAPanic(t *testing.T) {
	s := newSim(11, false)
	s.tracing, s.settling = true, true
	s.cut, s.dropPct = map[[2]uint64]bool{}, 0
	s.quietRounds(t, 100, true)
	l := s.leader()
	var victim *member
	for _, m := range s.members {
		if m != l {
			victim = m
			break
		}
	}
	victim.core, victim.disk = nil, newSimDir()
	log, p, _, err := certgroup.OpenDiskLog(victim.disk)
	if err != nil {
		t.Fatal(err)
	}
	core, err := certgroup.NewCore(certgroup.Config{
		ID: victim.id, Join: true, ElectionTicks: 1 << 20, HeartbeatTicks: 2,
		WindowVersions: simWindowVersions, Decode: certifier.DecodeEntryKeys, DisableCheckQuorum: true,
		SnapshotEntries: s.snapEntries, CatchUpEntries: s.catchUp,
	}, p)
	if err != nil {
		t.Fatal(err)
	}
	victim.core, victim.log, victim.applied, victim.join = core, log, 0, true
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("member %d restarted empty with --join panics: %v", victim.id, r)
		}
	}()
	s.quietRounds(t, 50, true)
	if victim.core != nil || s.stats.LostLog == 0 {
		t.Fatalf("member %d, restarted empty under its old id, was not stopped on ErrLostLog", victim.id)
	}
}

// TestHeartbeatBeyondTheLogIsErrLostLog: the refusal Node stops the member
// on (the simulation above only checks that nothing panics).
func TestHeartbeatBeyondTheLogIsErrLostLog(t *testing.T) {
	core, err := certgroup.NewCore(certgroup.Config{ID: 2, Join: true, Decode: certifier.DecodeEntryKeys}, certgroup.Persisted{})
	if err != nil {
		t.Fatal(err)
	}
	hb := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2),
		Term: proto.Uint64(3), Commit: proto.Uint64(40)}
	if err := core.Step(hb); !errors.Is(err, certgroup.ErrLostLog) {
		t.Fatalf("heartbeat committing 40 to an empty log: %v, want ErrLostLog", err)
	}
	hb.Commit = proto.Uint64(0)
	if err := core.Step(hb); err != nil {
		t.Fatalf("heartbeat committing nothing: %v", err)
	}
}
