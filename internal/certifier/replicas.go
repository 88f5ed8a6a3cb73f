package certifier

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// knownReplicasMax bounds the replicas the certifier remembers. A record
// is a name, an address and a version; the bound only matters for clients
// that open sessions under ever new names (the certifier benchmark does).
const knownReplicasMax = 256

// knownReplicas are the replicas that opened a session with this process,
// with the address of their agent's HTTP listener and their progress: what
// a dashboard needs to find them all (StatusReply.replicas), the
// tashkent_certifier_replica_* metrics, and what log retention weighs
// (retention.go). A replica whose session ended stays listed as
// disconnected, so that a replica that went away shows as such, until it
// is removed from the cluster (ForgetReplica). A session that neither
// gave a status address nor reports its durable version is forgotten when
// it ends: nothing could be asked of it, and it holds no log.
//
// Replicas that report their durable version are also the ones retention
// waits for while they are away: a single certifier persists them
// (retention.pb), a group replicates them through Raft; adopt takes them
// back.
type knownReplicas struct {
	mu     sync.Mutex
	byName map[string]*knownReplica
	now    func() time.Time
}

type knownReplica struct {
	statusAddr string
	sessions   int
	since      time.Time // when connected last changed
	// Progress. applied is the replica's durable version as it last
	// reported it (or, while a session that does not report it is open,
	// the version the session opened at); heard is when it was last heard
	// from, in Unix nanoseconds; reports says it reports applied
	// versions, and so holds the log while it is away. Atomic: each
	// stream's reader updates them with every message.
	applied atomic.Uint64
	heard   atomic.Int64
	reports atomic.Bool
}

func newKnownReplicas(now func() time.Time) *knownReplicas {
	return &knownReplicas{byName: map[string]*knownReplica{}, now: now}
}

// replicaSession is one open session of a known replica.
type replicaSession struct {
	k    *knownReplicas
	name string
	r    *knownReplica // nil: not recorded (every listed replica is connected)
	once sync.Once
}

// opened records a session of name, reached at statusAddr, that opened at
// version openVersion.
func (k *knownReplicas) opened(name, statusAddr string, openVersion uint64) *replicaSession {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.byName[name]
	if r == nil {
		if len(k.byName) >= knownReplicasMax && !k.forgetOldestDisconnected() {
			return &replicaSession{k: k, name: name}
		}
		r = &knownReplica{}
		k.byName[name] = r
	}
	now := k.now()
	if r.sessions == 0 {
		r.since = now
	}
	r.sessions++
	if statusAddr != "" {
		r.statusAddr = statusAddr
	}
	if !r.reports.Load() {
		r.applied.Store(openVersion)
	}
	r.heard.Store(now.UnixNano())
	return &replicaSession{k: k, name: name, r: r}
}

// report records what a message of the session says of the replica's
// progress: applied, its durable version, when the agent reports it.
func (s *replicaSession) report(applied *uint64, now time.Time) {
	if s.r == nil {
		return
	}
	if applied != nil {
		s.r.applied.Store(*applied)
		s.r.reports.Store(true)
	}
	s.r.heard.Store(now.UnixNano())
}

// close records the end of the session; calls after the first do nothing.
func (s *replicaSession) close() {
	if s.r != nil {
		s.once.Do(func() { s.k.closed(s.name, s.r) })
	}
}

func (k *knownReplicas) closed(name string, r *knownReplica) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r.sessions--
	if r.sessions > 0 {
		return
	}
	now := k.now()
	r.since = now
	r.heard.Store(now.UnixNano())
	if r.statusAddr == "" && !r.reports.Load() && k.byName[name] == r {
		delete(k.byName, name)
	}
}

// forget removes a replica that left the cluster; known is false when it
// was not listed. A replica with a session open stays.
func (k *knownReplicas) forget(name string) (known bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.byName[name]
	if r == nil {
		return false, nil
	}
	if r.sessions > 0 {
		return true, fmt.Errorf("replica %s has a session open: stop its agent first", name)
	}
	delete(k.byName, name)
	return true, nil
}

// ForgetReplica removes a replica that left the cluster from the replicas
// this process lists (the replica remove command asks every member), and
// so from the replicas log retention waits for.
func (s *Service) ForgetReplica(_ context.Context, req *pb.ForgetReplicaRequest) (*pb.ForgetReplicaReply, error) {
	known, err := s.replicas.forget(req.GetName())
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.ForgetReplicaReply{Known: known}, nil
}

// forgetOldestDisconnected makes room: the replica gone for the longest
// among those that hold no log, else among all that are gone; false when
// every replica is connected.
func (k *knownReplicas) forgetOldestDisconnected() bool {
	oldest := ""
	before := func(r *knownReplica) bool { // r goes before the oldest found so far
		o := k.byName[oldest]
		if o.reports.Load() != r.reports.Load() {
			return o.reports.Load()
		}
		return r.since.Before(o.since)
	}
	for name, r := range k.byName {
		if r.sessions == 0 && (oldest == "" || before(r)) {
			oldest = name
		}
	}
	if oldest == "" {
		return false
	}
	delete(k.byName, oldest)
	return true
}

// list is every known replica, sorted by name.
func (k *knownReplicas) list() []*pb.ReplicaSession {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*pb.ReplicaSession, 0, len(k.byName))
	for name, r := range k.byName {
		s := &pb.ReplicaSession{Name: name, StatusAddr: r.statusAddr, Connected: r.sessions > 0, SinceUnixMs: r.since.UnixMilli()}
		if r.reports.Load() {
			s.AppliedVersion, s.HeardUnixMs = r.applied.Load(), time.Unix(0, r.heard.Load()).UnixMilli()
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// progress is what retention weighs: every replica that reports its
// durable version, and the sessions open now that do not (at the version
// they opened at).
func (k *knownReplicas) progress() []replicaProgress {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]replicaProgress, 0, len(k.byName))
	for name, r := range k.byName {
		if r.reports.Load() || r.sessions > 0 {
			out = append(out, replicaProgress{name: name, applied: r.applied.Load(), heard: time.Unix(0, r.heard.Load()),
				connected: r.sessions > 0, reports: r.reports.Load()})
		}
	}
	return out
}

// adopt takes in the replicas' progress from a retention decision: the
// one a single certifier persisted, or one a group applied. A replica with
// a session open here keeps what it says itself; others take the
// decision's figures when they are newer. A replica that reports and is
// away, absent from a decision taken after it was last heard from, was
// forgotten where the decision was taken: it no longer holds the log.
func (k *knownReplicas) adopt(d *pb.LogRetention) {
	k.mu.Lock()
	defer k.mu.Unlock()
	listed := make(map[string]bool, len(d.GetReplicas()))
	for _, p := range d.GetReplicas() {
		listed[p.GetName()] = true
		r := k.byName[p.GetName()]
		if r == nil {
			if len(k.byName) >= knownReplicasMax && !k.forgetOldestDisconnected() {
				continue
			}
			r = &knownReplica{since: time.UnixMilli(p.GetHeardUnixMs())}
			k.byName[p.GetName()] = r
		}
		heard := time.UnixMilli(p.GetHeardUnixMs()).UnixNano()
		if r.sessions > 0 || r.reports.Load() && heard <= r.heard.Load() {
			continue
		}
		r.applied.Store(p.GetAppliedVersion())
		r.heard.Store(heard)
		r.reports.Store(true)
	}
	decided := time.UnixMilli(d.GetDecidedUnixMs()).UnixNano()
	for name, r := range k.byName {
		if listed[name] || r.sessions > 0 || !r.reports.Load() || r.heard.Load() > decided {
			continue
		}
		r.reports.Store(false)
		if r.statusAddr == "" {
			delete(k.byName, name)
		}
	}
}

var replicaConnectedDesc = prometheus.NewDesc("tashkent_certifier_replica_connected",
	"1 while a session of the replica is open, 0 once it ended (replicas that opened one since the certifier started, and those log retention waits for).",
	[]string{"replica"}, nil)

// Describe and Collect make knownReplicas the collector of
// tashkent_certifier_replica_connected.
func (k *knownReplicas) Describe(ch chan<- *prometheus.Desc) { ch <- replicaConnectedDesc }

func (k *knownReplicas) Collect(ch chan<- prometheus.Metric) {
	for _, r := range k.list() {
		v := 0.0
		if r.Connected {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(replicaConnectedDesc, prometheus.GaugeValue, v, r.Name)
	}
}

// sessionStatusAddr is the status address a session gave, its host
// filled in from the session's peer address when it is unspecified.
func sessionStatusAddr(ctx context.Context, given string) string {
	if given == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(given)
	if err != nil {
		return given
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return given
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return given
	}
	peerHost, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return given
	}
	return net.JoinHostPort(peerHost, port)
}
