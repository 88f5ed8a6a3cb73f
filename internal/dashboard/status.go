package dashboard

import (
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// ReplicaStatus is what an agent says of itself (/api/status).
type ReplicaStatus struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	// State is the agent's state (starting, catching_up, serving,
	// recovering, halted); Why says why when it is not serving.
	State string `json:"state"`
	Why   string `json:"why,omitempty"`
	// Version is the replica's committed version; DeliveredVersion the
	// highest the certifier delivered; CertifierDurableVersion the
	// certifier's durable version as the agent last heard it, and
	// LagVersions how far Version is below it.
	Version                 uint64 `json:"version"`
	DeliveredVersion        uint64 `json:"delivered_version"`
	CertifierDurableVersion uint64 `json:"certifier_durable_version"`
	LagVersions             uint64 `json:"lag_versions"`
	// FlowControlPausing: the replica fell behind and asks the certifier
	// to hold the other replicas' commits.
	FlowControlPausing bool `json:"flow_control_pausing"`
	// ApplyStalledSeconds: how long remote versions have waited without
	// the apply making progress (0 while none waits).
	ApplyStalledSeconds float64 `json:"apply_stalled_seconds"`
	// Commits and Aborts count the certifications of the replica's own
	// transactions since the agent started; RemoteApplied the other
	// replicas' versions it applied.
	Commits       uint64 `json:"commits"`
	Aborts        uint64 `json:"aborts"`
	RemoteApplied uint64 `json:"remote_applied"`
	Backends      int    `json:"backends"`
}

// MemberStatus is what a certifier (single, or a group member) says of
// itself: its Status RPC.
type MemberStatus struct {
	ID              uint64 `json:"id"` // 0: a single certifier
	Addr            string `json:"addr"`
	Role            string `json:"role"` // leader, follower, candidate, single
	Term            uint64 `json:"term"`
	LeaderID        uint64 `json:"leader_id"`
	Version         uint64 `json:"version"`
	DurableVersion  uint64 `json:"durable_version"`
	LowWaterMark    uint64 `json:"low_water_mark"`
	LogFirstVersion uint64 `json:"log_first_version"`
	LogBytes        uint64 `json:"log_bytes"`
	// LogKeptFor says what the log's retention keeps its oldest versions
	// for: a replica's name, or "window", "bytes", "versions", "durable", "none"
	// (certifier.RetentionPolicy); empty before its first decision.
	LogKeptFor      string  `json:"log_kept_for"`
	RaftIndex       uint64  `json:"raft_index"`
	AppliedIndex    uint64  `json:"applied_index"`
	EntriesPerFsync float64 `json:"entries_per_fsync"` // since start
	Fsyncs          uint64  `json:"fsyncs"`
	Certifications  uint64  `json:"certifications"`
	Aborts          uint64  `json:"aborts"`
	// CertificationsPerSecond is over the last few seconds.
	CertificationsPerSecond float64 `json:"certifications_per_second"`
}

// MemberFromStatus is the MemberStatus of a certifier at addr.
func MemberFromStatus(addr string, r *pb.StatusReply) MemberStatus {
	return MemberStatus{
		ID: r.MemberId, Addr: addr, Role: r.Role, Term: r.Term, LeaderID: r.LeaderId,
		Version: r.Version, DurableVersion: r.DurableVersion, LowWaterMark: r.LowWaterMark,
		LogFirstVersion: r.LogFirstVersion, LogBytes: r.LogBytes, RaftIndex: r.RaftIndex, AppliedIndex: r.AppliedIndex,
		EntriesPerFsync: r.EntriesPerFsync, Fsyncs: r.Fsyncs, Certifications: r.Certifications, Aborts: r.Aborts,
		CertificationsPerSecond: r.CertificationsPerSecond, LogKeptFor: logKeptFor(r.GetRetention()),
	}
}

// logKeptFor is MemberStatus.LogKeptFor.
func logKeptFor(d *pb.LogRetention) string {
	if d.GetHeldBy() != "" {
		return d.GetHeldBy()
	}
	return d.GetLimitedBy()
}

// Cluster is /api/cluster: the cluster as one process sees it.
type Cluster struct {
	// ServedBy names the process that gathered it ("agent replica1",
	// "certifier member 2").
	ServedBy   string          `json:"served_by"`
	Time       time.Time       `json:"time"`
	Certifier  CertifierView   `json:"certifier"`
	Replicas   []ReplicaView   `json:"replicas"`
	Alerts     []Alert         `json:"alerts"`
	Thresholds AlertThresholds `json:"thresholds"`
}

// CertifierView is the certifier, or the group: the leader's figures and
// every member.
type CertifierView struct {
	// Reachable: some member answered. Leader is the answer of the one
	// that certifies (the leader, or the single certifier), nil when none
	// answered as such.
	Reachable bool          `json:"reachable"`
	Leader    *MemberStatus `json:"leader"`
	Members   []MemberView  `json:"members"`
}

// MemberView is one certifier address and what it answered.
type MemberView struct {
	Addr      string `json:"addr"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	MemberStatus
}

// ReplicaView is one replica: what the certifier knows of its session
// and what its agent answered.
type ReplicaView struct {
	ReplicaStatus
	StatusAddr string `json:"status_addr"`
	// Connected: the certifier holds a session of it. Since is when that
	// last changed (zero when no certifier listed it).
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since"`
	// Reachable: its agent answered; State is then the agent's, and
	// "unreachable" otherwise, with Error saying why.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Lag is the leader's durable version minus the replica's version,
	// when both are known; otherwise the agent's own LagVersions.
	Lag uint64 `json:"lag"`
}

// StateUnreachable is a replica's State when its agent did not answer.
const StateUnreachable = "unreachable"
