package certifier

import (
	"sort"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// Log retention: how much of the versioned log to keep.
//
// The log is what a replica that was away catches up from (log replay, IST
// in Galera's words); a replica that needs versions the log no longer has
// must be rebuilt from a peer (state transfer, SST). The rule keeps every
// version a known replica still needs, within bounds:
//
//  1. Each replica's need is its durable version + 1, as it last reported it
//     (CertifyStreamRequest.applied_version). A replica holds the log while
//     its session is open, and while it is away for up to ReplicaTimeout
//     after it was last heard from. A removed replica (ForgetReplica) holds
//     nothing.
//  2. The log is never bigger than Bytes nor longer than Versions: past
//     them the oldest segments go even if a replica still needs them (it
//     then needs a state transfer), but never a version that no replica
//     has reported durable: in mw the log may be the only durable copy of
//     an acknowledged commit, and a replica rebuilt from a peer gets only
//     what the peer holds.
//  3. Versions from keepAtLeastFrom on always stay, whatever the bounds:
//     a single certifier restores its certification window from its log
//     on restart (Service.windowBase), so it keeps the window. A group
//     member restores the certification state from Raft (snapshot plus
//     log) and has no such floor.
//
// The decision is a pure function of its input (decideRetention); single.go
// applies it to its own log, a group's leader replicates it through Raft
// and every member applies it (group_retention.go).

// RetentionPolicy bounds the versioned log. Zero fields take the defaults
// (DefaultRetentionPolicy), except that a negative Bytes and a negative
// ReplicaTimeout mean no bound.
type RetentionPolicy struct {
	// Bytes bounds the size of the log's segment files, at segment
	// granularity.
	Bytes int64
	// Versions bounds the number of versions kept; 0: no bound.
	Versions uint64
	// ReplicaTimeout is how long a replica that is away still holds the
	// log after it was last heard from. The time counts only while this
	// certifier could hear it: from this process's start (a single
	// certifier), or from the start of this member's leadership.
	ReplicaTimeout time.Duration
	// Interval is how often the rule runs.
	Interval time.Duration
}

// DefaultRetentionPolicy: the log is bounded at 4 GiB (about 20 million
// versions of 200 bytes), and a replica away for a day no longer holds it.
var DefaultRetentionPolicy = RetentionPolicy{
	Bytes:          4 << 30,
	ReplicaTimeout: 24 * time.Hour,
	Interval:       5 * time.Second,
}

func (p RetentionPolicy) withDefaults() RetentionPolicy {
	if p.Bytes == 0 {
		p.Bytes = DefaultRetentionPolicy.Bytes
	}
	if p.ReplicaTimeout == 0 {
		p.ReplicaTimeout = DefaultRetentionPolicy.ReplicaTimeout
	}
	if p.Interval <= 0 {
		p.Interval = DefaultRetentionPolicy.Interval
	}
	return p
}

// What set a decision's keep_from (LogRetention.limited_by).
const (
	limitedByReplica  = "replica"
	limitedByWindow   = "window"
	limitedByBytes    = "bytes"
	limitedByVersions = "versions"
	limitedByDurable  = "durable"
	limitedByNone     = "none"
)

// replicaProgress is one replica as the rule sees it.
type replicaProgress struct {
	name      string
	applied   uint64    // its durable version
	heard     time.Time // when it was last heard from
	connected bool      // a session of it is open here
	// reports: it reports its durable version, and so holds the log
	// while it is away; a session that does not is not in the decision's
	// list (it is not remembered once it ends).
	reports bool
}

// retentionInput is everything the rule decides from.
type retentionInput struct {
	policy RetentionPolicy
	now    time.Time
	// since is when this process began to hear from replicas: a replica's
	// silence counts from no earlier (a certifier that was down, or a
	// member that did not lead, heard nothing).
	since    time.Time
	last     uint64            // the log's last version
	segments []wal.SegmentInfo // oldest first
	// keepAtLeastFrom: versions from here on always stay (the window a
	// single certifier restores); 0: no floor.
	keepAtLeastFrom uint64
	replicas        []replicaProgress
}

// decideRetention applies the rule. The decision lists the replicas of the
// input that report their progress, so that it can be persisted and
// replicated as it is.
func decideRetention(in retentionInput) *pb.LogRetention {
	d := &pb.LogRetention{KeepFrom: in.last + 1, LimitedBy: limitedByNone, DecidedUnixMs: in.now.UnixMilli()}
	replicas := append([]replicaProgress(nil), in.replicas...)
	sort.Slice(replicas, func(i, j int) bool { return replicas[i].name < replicas[j].name })
	durable := uint64(0) // the newest version some replica holds durably
	for _, r := range replicas {
		durable = max(durable, min(r.applied, in.last))
		if r.reports {
			d.Replicas = append(d.Replicas, &pb.ReplicaProgress{Name: r.name, AppliedVersion: r.applied, HeardUnixMs: r.heard.UnixMilli()})
		}
		if !holdsLog(r, in) {
			continue
		}
		if need := min(r.applied, in.last) + 1; need < d.KeepFrom {
			d.KeepFrom, d.LimitedBy, d.HeldBy = need, limitedByReplica, r.name
		}
	}
	if bound, by := retentionBound(in); bound > d.KeepFrom {
		d.KeepFrom, d.LimitedBy, d.HeldBy = bound, by, ""
	}
	if d.KeepFrom > durable+1 {
		d.KeepFrom, d.LimitedBy, d.HeldBy = durable+1, limitedByDurable, ""
	}
	if floor := in.keepAtLeastFrom; floor > 0 && d.KeepFrom > floor {
		d.KeepFrom, d.LimitedBy, d.HeldBy = floor, limitedByWindow, ""
	}
	return d
}

// holdsLog says whether r's need counts: its session is open, or it was
// heard from within the timeout (a negative timeout: always).
func holdsLog(r replicaProgress, in retentionInput) bool {
	if r.connected || in.policy.ReplicaTimeout < 0 {
		return true
	}
	heard := r.heard
	if heard.Before(in.since) {
		heard = in.since
	}
	return in.now.Sub(heard) <= in.policy.ReplicaTimeout
}

// retentionBound is the oldest version the bounds let the log keep (0:
// they let it keep everything) and which bound it is.
func retentionBound(in retentionInput) (uint64, string) {
	var bound uint64
	by := ""
	if v := in.policy.Versions; v > 0 && in.last > v {
		bound, by = in.last-v+1, limitedByVersions
	}
	if b := bytesBound(in.segments, in.policy.Bytes); b > bound {
		bound, by = b, limitedByBytes
	}
	return bound, by
}

// bytesBound is the first version of the oldest segment that, with every
// newer one, fits in maxBytes (the newest segment always stays); 0 when
// every segment fits or there is no bound.
func bytesBound(segments []wal.SegmentInfo, maxBytes int64) uint64 {
	if maxBytes < 0 {
		return 0
	}
	total := int64(0)
	for i := len(segments) - 1; i >= 0; i-- {
		total += segments[i].Bytes
		if total <= maxBytes {
			continue
		}
		if i == len(segments)-1 {
			return segments[i].FirstVersion
		}
		return segments[i+1].FirstVersion
	}
	return 0
}
