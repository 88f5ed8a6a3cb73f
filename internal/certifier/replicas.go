package certifier

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// knownReplicasMax bounds the replicas the certifier remembers. A record
// is a name and an address; the bound only matters for clients that open
// sessions under ever new names (the certifier benchmark does).
const knownReplicasMax = 256

// knownReplicas are the replicas that opened a session since this process
// started, with the address of their agent's HTTP listener: what a
// dashboard needs to find them all (StatusReply.replicas), and the
// tashkent_certifier_replica_connected metric. A replica whose session
// ended stays listed as disconnected, so that a replica that went away
// shows as such, until it is removed from the cluster (ForgetReplica);
// sessions without a status address are forgotten when they end (nothing
// could be asked of them).
type knownReplicas struct {
	mu     sync.Mutex
	byName map[string]*knownReplica
	now    func() time.Time
}

type knownReplica struct {
	statusAddr string
	sessions   int
	since      time.Time // when connected last changed
}

func newKnownReplicas(now func() time.Time) *knownReplicas {
	return &knownReplicas{byName: map[string]*knownReplica{}, now: now}
}

// opened records a session of name, reached at statusAddr; the returned
// function records its end.
func (k *knownReplicas) opened(name, statusAddr string) (closed func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.byName[name]
	if r == nil {
		if len(k.byName) >= knownReplicasMax && !k.forgetOldestDisconnected() {
			return func() {}
		}
		r = &knownReplica{}
		k.byName[name] = r
	}
	if r.sessions == 0 {
		r.since = k.now()
	}
	r.sessions++
	if statusAddr != "" {
		r.statusAddr = statusAddr
	}
	var once sync.Once
	return func() { once.Do(func() { k.closed(name, r) }) }
}

func (k *knownReplicas) closed(name string, r *knownReplica) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r.sessions--
	if r.sessions > 0 {
		return
	}
	r.since = k.now()
	if r.statusAddr == "" && k.byName[name] == r {
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
// this process lists (the replica remove command asks every member).
func (s *Service) ForgetReplica(_ context.Context, req *pb.ForgetReplicaRequest) (*pb.ForgetReplicaReply, error) {
	known, err := s.replicas.forget(req.GetName())
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.ForgetReplicaReply{Known: known}, nil
}

// forgetOldestDisconnected makes room; false when every replica is
// connected.
func (k *knownReplicas) forgetOldestDisconnected() bool {
	oldest := ""
	for name, r := range k.byName {
		if r.sessions == 0 && (oldest == "" || r.since.Before(k.byName[oldest].since)) {
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
		out = append(out, &pb.ReplicaSession{Name: name, StatusAddr: r.statusAddr, Connected: r.sessions > 0, SinceUnixMs: r.since.UnixMilli()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

var replicaConnectedDesc = prometheus.NewDesc("tashkent_certifier_replica_connected",
	"1 while a session of the replica is open, 0 once it ended (replicas that opened one since the certifier started, or, in a group, since this member led).",
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
