package certifier

import (
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// Three segments of 100 bytes: versions 1-10, 11-20, 21-30.
var threeSegments = []wal.SegmentInfo{{FirstVersion: 1, LastVersion: 10, Bytes: 100}, {FirstVersion: 11, LastVersion: 20, Bytes: 100},
	{FirstVersion: 21, LastVersion: 30, Bytes: 100}}

func TestRetentionRule(t *testing.T) {
	start := time.Unix(10_000, 0)
	now := start.Add(time.Hour)
	noBound := RetentionPolicy{Bytes: -1, ReplicaTimeout: 10 * time.Minute}
	connected := func(name string, applied uint64) replicaProgress {
		return replicaProgress{name: name, applied: applied, heard: now, connected: true, reports: true}
	}
	away := func(name string, applied uint64, heard time.Time) replicaProgress {
		return replicaProgress{name: name, applied: applied, heard: heard, reports: true}
	}
	for _, c := range []struct {
		name     string
		policy   RetentionPolicy
		floor    uint64
		replicas []replicaProgress
		keepFrom uint64
		by, held string
	}{
		{name: "no replica needs anything", policy: noBound, replicas: []replicaProgress{connected("r1", 30)}, keepFrom: 31, by: limitedByNone},
		{name: "without a replica everything stays", policy: RetentionPolicy{Bytes: 50, Versions: 5, ReplicaTimeout: -1}, keepFrom: 1, by: limitedByDurable},
		{name: "the replica furthest behind holds the log", policy: noBound,
			replicas: []replicaProgress{connected("r1", 25), connected("r2", 7), connected("r3", 30)}, keepFrom: 8, by: limitedByReplica, held: "r2"},
		{name: "a tie goes to the first name", policy: noBound,
			replicas: []replicaProgress{connected("r3", 7), connected("r2", 7)}, keepFrom: 8, by: limitedByReplica, held: "r2"},
		{name: "a replica away within the timeout holds the log", policy: noBound,
			replicas: []replicaProgress{connected("r1", 25), away("r2", 4, now.Add(-9*time.Minute))}, keepFrom: 5, by: limitedByReplica, held: "r2"},
		{name: "a replica away longer than the timeout does not", policy: noBound,
			replicas: []replicaProgress{connected("r1", 25), away("r2", 4, now.Add(-11*time.Minute))}, keepFrom: 26, by: limitedByReplica, held: "r1"},
		{name: "silence counts from when the certifier could hear", policy: RetentionPolicy{Bytes: -1, ReplicaTimeout: 2 * time.Hour},
			replicas: []replicaProgress{away("r2", 4, start.Add(-10*time.Hour))}, keepFrom: 5, by: limitedByReplica, held: "r2"},
		{name: "a negative timeout waits for ever", policy: RetentionPolicy{Bytes: -1, ReplicaTimeout: -1},
			replicas: []replicaProgress{away("r2", 4, start.Add(-1000*time.Hour))}, keepFrom: 5, by: limitedByReplica, held: "r2"},
		{name: "a session that does not report holds the log while open", policy: noBound,
			replicas: []replicaProgress{{name: "bench", applied: 12, connected: true}, connected("r1", 20)}, keepFrom: 13, by: limitedByReplica, held: "bench"},
		{name: "a replica at or above the log's last version needs nothing", policy: noBound,
			replicas: []replicaProgress{connected("r1", 40)}, keepFrom: 31, by: limitedByNone},
		{name: "the byte bound cuts a replica off", policy: RetentionPolicy{Bytes: 250, ReplicaTimeout: -1},
			replicas: []replicaProgress{connected("r0", 30), connected("r1", 3)}, keepFrom: 11, by: limitedByBytes},
		{name: "the bounds keep what no replica holds durably", policy: RetentionPolicy{Bytes: 50, ReplicaTimeout: -1},
			replicas: []replicaProgress{connected("r0", 15), away("r1", 3, now.Add(-time.Hour))}, keepFrom: 16, by: limitedByDurable},
		{name: "within the byte bound the replica holds", policy: RetentionPolicy{Bytes: 300, ReplicaTimeout: -1},
			replicas: []replicaProgress{connected("r1", 3)}, keepFrom: 4, by: limitedByReplica, held: "r1"},
		{name: "the newest segment stays whatever its size", policy: RetentionPolicy{Bytes: 50, ReplicaTimeout: -1},
			replicas: []replicaProgress{connected("r0", 30), connected("r1", 3)}, keepFrom: 21, by: limitedByBytes},
		{name: "the version bound cuts a replica off", policy: RetentionPolicy{Bytes: -1, Versions: 15, ReplicaTimeout: -1},
			replicas: []replicaProgress{connected("r0", 30), connected("r1", 3)}, keepFrom: 16, by: limitedByVersions},
		{name: "the certification window stays whatever the bounds", policy: RetentionPolicy{Bytes: 50, ReplicaTimeout: -1}, floor: 12,
			replicas: []replicaProgress{connected("r0", 30), connected("r1", 3)}, keepFrom: 12, by: limitedByWindow},
		{name: "the window keeps more than the replicas need", policy: noBound, floor: 20,
			replicas: []replicaProgress{connected("r1", 25)}, keepFrom: 20, by: limitedByWindow},
		{name: "a replica further behind than the window holds the log", policy: noBound, floor: 20,
			replicas: []replicaProgress{connected("r1", 9)}, keepFrom: 10, by: limitedByReplica, held: "r1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := decideRetention(retentionInput{policy: c.policy, now: now, since: start, last: 30, segments: threeSegments,
				keepAtLeastFrom: c.floor, replicas: c.replicas})
			if d.KeepFrom != c.keepFrom || d.LimitedBy != c.by || d.HeldBy != c.held {
				t.Fatalf("keep from %d, limited by %q, held by %q; want %d, %q, %q", d.KeepFrom, d.LimitedBy, d.HeldBy, c.keepFrom, c.by, c.held)
			}
			if d.DecidedUnixMs != now.UnixMilli() {
				t.Errorf("decided at %d, want %d", d.DecidedUnixMs, now.UnixMilli())
			}
		})
	}
}

// The decision lists the replicas that report their progress, in name
// order, whether or not they hold the log: what is persisted and
// replicated.
func TestRetentionDecisionListsTheReplicasThatReport(t *testing.T) {
	now := time.Unix(50_000, 0)
	d := decideRetention(retentionInput{policy: RetentionPolicy{Bytes: -1, ReplicaTimeout: time.Minute}, now: now, since: now.Add(-time.Hour), last: 30,
		replicas: []replicaProgress{
			{name: "r2", applied: 9, heard: now.Add(-time.Hour), reports: true},
			{name: "bench", applied: 3, connected: true},
			{name: "r1", applied: 20, heard: now, connected: true, reports: true},
		}})
	want := []*pb.ReplicaProgress{{Name: "r1", AppliedVersion: 20, HeardUnixMs: now.UnixMilli()},
		{Name: "r2", AppliedVersion: 9, HeardUnixMs: now.Add(-time.Hour).UnixMilli()}}
	if len(d.Replicas) != len(want) {
		t.Fatalf("listed %v, want %v", d.Replicas, want)
	}
	for i := range want {
		if d.Replicas[i].String() != want[i].String() {
			t.Fatalf("listed %v, want %v", d.Replicas, want)
		}
	}
	if d.KeepFrom != 4 || d.HeldBy != "bench" {
		t.Fatalf("keep from %d held by %q: the open session that does not report holds the log", d.KeepFrom, d.HeldBy)
	}
}

// Progress reported on a session, kept when it ends, taken back from a
// decision after a restart, and forgotten where a later decision left it
// out.
func TestKnownReplicasProgress(t *testing.T) {
	now := time.Unix(1000, 0)
	k := newKnownReplicas(func() time.Time { return now })
	old := k.opened("old-agent", "", 40) // an agent that does not report
	r1 := k.opened("r1", "", 50)
	v := uint64(45)
	r1.report(&v, now)
	byName := func(k *knownReplicas) map[string]replicaProgress {
		out := map[string]replicaProgress{}
		for _, p := range k.progress() {
			out[p.name] = p
		}
		return out
	}
	if p := byName(k); p["r1"].applied != 45 || !p["r1"].reports || !p["r1"].connected || p["old-agent"].applied != 40 || p["old-agent"].reports {
		t.Fatalf("progress while connected: %+v", p)
	}
	now = now.Add(time.Minute)
	r1.close()
	old.close()
	p := byName(k)
	if _, listed := p["old-agent"]; listed || p["r1"].connected || !p["r1"].heard.Equal(now) || p["r1"].applied != 45 {
		t.Fatalf("progress after the sessions ended: %+v (r1 away since now, the old agent forgotten)", p)
	}

	d := decideRetention(retentionInput{policy: RetentionPolicy{Bytes: -1, ReplicaTimeout: -1}, now: now, last: 100, replicas: k.progress()})
	restarted := newKnownReplicas(func() time.Time { return now })
	restarted.adopt(d)
	if p := byName(restarted); p["r1"].applied != 45 || !p["r1"].reports || p["r1"].connected {
		t.Fatalf("progress taken back from the decision: %+v", p)
	}
	if l := restarted.list(); len(l) != 1 || l[0].AppliedVersion != 45 || l[0].HeardUnixMs != now.UnixMilli() {
		t.Fatalf("listed after a restart: %v", l)
	}

	// A replica connected here keeps its own figures; an older decision
	// changes nothing.
	r2 := restarted.opened("r2", "", 70)
	v = 71
	r2.report(&v, now)
	stale := &pb.LogRetention{DecidedUnixMs: now.Add(-time.Hour).UnixMilli(), Replicas: []*pb.ReplicaProgress{
		{Name: "r1", AppliedVersion: 10, HeardUnixMs: now.Add(-time.Hour).UnixMilli()},
		{Name: "r2", AppliedVersion: 10, HeardUnixMs: now.Add(-time.Hour).UnixMilli()}}}
	restarted.adopt(stale)
	if p := byName(restarted); p["r1"].applied != 45 || p["r2"].applied != 71 {
		t.Fatalf("after an older decision: %+v", p)
	}

	// A later decision without r1 (forgotten where it was taken) makes
	// it stop holding the log here too.
	now = now.Add(time.Minute)
	restarted.adopt(&pb.LogRetention{DecidedUnixMs: now.UnixMilli(), Replicas: []*pb.ReplicaProgress{{Name: "r2", AppliedVersion: 71, HeardUnixMs: now.UnixMilli()}}})
	if _, listed := byName(restarted)["r1"]; listed {
		t.Fatalf("r1 still holds the log after a decision that left it out: %+v", byName(restarted))
	}
}
