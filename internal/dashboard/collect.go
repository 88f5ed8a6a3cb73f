package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

const (
	// peerTimeout bounds each question to another process: the page
	// polls every second, and a peer that does not answer in it is
	// reported as unreachable rather than holding the page up.
	peerTimeout = 800 * time.Millisecond
	// statusBytesMax bounds an agent's /api/status answer (a few hundred
	// bytes in practice).
	statusBytesMax = 64 << 10
	// peersMax bounds the certifier addresses and replicas asked in one
	// gathering: a group has at most a handful of members, a cluster some
	// tens of replicas.
	peersMax = 256
)

// Config says what one process knows of the cluster.
type Config struct {
	// ServedBy names this process on the page.
	ServedBy string
	// Self is this process's own status, for /api/status.
	Self func() any
	// Replica is, for an agent, its own status: it answers for itself
	// without a request to itself. Nil for a certifier.
	Replica func() ReplicaStatus
	// Certifiers are the certifier addresses this process knows: an
	// agent's --certifier list; a member's own address and its peers'.
	Certifiers func() []string
	// LocalCertifier is, for a certifier, its own Status, answered in
	// process for the address LocalCertifierAddr. Nil for an agent.
	LocalCertifier     func() *pb.StatusReply
	LocalCertifierAddr string
	// DialOptions dial the certifiers (their TLS); none: plaintext.
	DialOptions []grpc.DialOption
	// Thresholds of the alerts; zero: DefaultThresholds.
	Thresholds *AlertThresholds
}

// Viewer gathers the cluster for /api/cluster.
type Viewer struct {
	cfg  Config
	http *http.Client

	connsMu sync.Mutex
	conns   map[string]*grpc.ClientConn

	mu   sync.Mutex // one gathering at a time; guards last and at
	last *Cluster
	at   time.Time
}

// NewViewer makes the viewer of one process. Close it when the process
// stops serving.
func NewViewer(cfg Config) *Viewer {
	if cfg.Thresholds == nil {
		cfg.Thresholds = &DefaultThresholds
	}
	return &Viewer{cfg: cfg, http: &http.Client{Timeout: peerTimeout}, conns: map[string]*grpc.ClientConn{}}
}

// Close closes the connections to the certifiers.
func (v *Viewer) Close() {
	v.connsMu.Lock()
	defer v.connsMu.Unlock()
	for addr, c := range v.conns {
		c.Close()
		delete(v.conns, addr)
	}
	v.http.CloseIdleConnections()
}

// cacheFor is how long one gathering serves every request.
const cacheFor = 500 * time.Millisecond

// Cluster gathers the cluster, or returns the gathering of less than
// cacheFor ago.
func (v *Viewer) Cluster(ctx context.Context) *Cluster {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last != nil && time.Since(v.at) < cacheFor {
		return v.last
	}
	// The gathering serves every request within cacheFor: the first
	// requester going away must not cut it short.
	ctx = context.WithoutCancel(ctx)
	c := &Cluster{ServedBy: v.cfg.ServedBy, Time: time.Now().UTC(), Thresholds: *v.cfg.Thresholds}
	replies := v.gatherCertifier(ctx, &c.Certifier)
	c.Replicas = v.gatherReplicas(ctx, replies, c.Certifier.Leader)
	c.Alerts = alertsOf(c, *v.cfg.Thresholds)
	v.last, v.at = c, time.Now()
	return c
}

// gatherCertifier asks every certifier address known, and then every
// member a reply names that was not asked yet. It returns the replies.
func (v *Viewer) gatherCertifier(ctx context.Context, cv *CertifierView) []*pb.StatusReply {
	asked := map[string]bool{}
	var replies []*pb.StatusReply
	next := v.cfg.Certifiers()
	for len(next) > 0 && len(asked) < peersMax {
		var round []string
		for _, addr := range next {
			if !asked[addr] && len(asked) < peersMax {
				asked[addr] = true
				round = append(round, addr)
			}
		}
		next = nil
		for i, r := range v.askCertifiers(ctx, round) {
			m := MemberView{Addr: round[i], Reachable: r.err == nil}
			if r.err != nil {
				m.Error = r.err.Error()
				cv.Members = append(cv.Members, m)
				continue
			}
			m.MemberStatus = MemberFromStatus(round[i], r.reply)
			cv.Members = append(cv.Members, m)
			replies = append(replies, r.reply)
			for _, peer := range r.reply.Members {
				next = append(next, peer.Addr)
			}
		}
	}
	// An address that did not answer is named by the id the group gives it.
	idOf := map[string]uint64{}
	for _, r := range replies {
		for _, peer := range r.Members {
			idOf[peer.Addr] = peer.Id
		}
	}
	for i, m := range cv.Members {
		if !m.Reachable {
			cv.Members[i].ID = idOf[m.Addr]
		}
	}
	cv.Members = sortMembers(cv.Members)
	for _, m := range cv.Members {
		cv.Reachable = cv.Reachable || m.Reachable
		if m.Reachable && (m.Role == "leader" || m.Role == "single") && (cv.Leader == nil || m.Term > cv.Leader.Term) {
			leader := m.MemberStatus
			cv.Leader = &leader
		}
	}
	return replies
}

// sortMembers orders members by id, then address (a single certifier
// and unanswered addresses have id 0), and keeps one answer of a member
// known under two addresses (a name and an IP).
func sortMembers(ms []MemberView) []MemberView {
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].ID != ms[j].ID {
			return ms[i].ID < ms[j].ID
		}
		return ms[i].Addr < ms[j].Addr
	})
	var out []MemberView
	for _, m := range ms {
		if len(out) > 0 && m.ID != 0 && m.ID == out[len(out)-1].ID {
			continue
		}
		out = append(out, m)
	}
	return out
}

type certifierAnswer struct {
	reply *pb.StatusReply
	err   error
}

// askCertifiers asks each address for its Status, concurrently.
func (v *Viewer) askCertifiers(ctx context.Context, addrs []string) []certifierAnswer {
	out := make([]certifierAnswer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { out[i].reply, out[i].err = v.askCertifier(ctx, addr) })
	}
	wg.Wait()
	return out
}

func (v *Viewer) askCertifier(ctx context.Context, addr string) (*pb.StatusReply, error) {
	if v.cfg.LocalCertifier != nil && addr == v.cfg.LocalCertifierAddr {
		return v.cfg.LocalCertifier(), nil
	}
	conn, err := v.conn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	return pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{})
}

// conn is the kept connection to a certifier address.
func (v *Viewer) conn(addr string) (*grpc.ClientConn, error) {
	v.connsMu.Lock()
	defer v.connsMu.Unlock()
	if c := v.conns[addr]; c != nil {
		return c, nil
	}
	if len(v.conns) >= peersMax {
		return nil, fmt.Errorf("more than %d certifier addresses", peersMax)
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, v.cfg.DialOptions...)...)
	if err != nil {
		return nil, err
	}
	v.conns[addr] = c
	return c, nil
}

// gatherReplicas lists every replica some certifier reply names, and
// this agent itself, and asks each for its status.
func (v *Viewer) gatherReplicas(ctx context.Context, replies []*pb.StatusReply, leader *MemberStatus) []ReplicaView {
	byName := map[string]*ReplicaView{}
	for _, reply := range replies {
		for _, s := range reply.Replicas {
			r := byName[s.Name]
			if r == nil {
				r = &ReplicaView{ReplicaStatus: ReplicaStatus{Name: s.Name}}
				byName[s.Name] = r
			}
			since := time.UnixMilli(s.SinceUnixMs).UTC()
			// The member that holds its session knows best.
			if s.Connected || (!r.Connected && since.After(r.Since)) {
				r.StatusAddr, r.Since = s.StatusAddr, since
			}
			r.Connected = r.Connected || s.Connected
		}
	}
	var self *ReplicaStatus
	if v.cfg.Replica != nil {
		st := v.cfg.Replica()
		self = &st
		if byName[st.Name] == nil {
			byName[st.Name] = &ReplicaView{ReplicaStatus: ReplicaStatus{Name: st.Name}}
		}
	}
	out := make([]ReplicaView, 0, len(byName))
	for _, r := range byName {
		if len(out) < peersMax {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() { v.fillReplica(ctx, &out[i], self, leader) })
	}
	wg.Wait()
	return out
}

// fillReplica asks one replica's agent for its status.
func (v *Viewer) fillReplica(ctx context.Context, r *ReplicaView, self *ReplicaStatus, leader *MemberStatus) {
	var st ReplicaStatus
	var err error
	switch {
	case self != nil && self.Name == r.Name:
		st = *self
	case r.StatusAddr == "":
		err = fmt.Errorf("its agent serves no HTTP listener")
	default:
		st, err = v.askReplica(ctx, r.StatusAddr)
	}
	if err != nil {
		r.State, r.Error = StateUnreachable, err.Error()
		return
	}
	if st.Name != r.Name {
		r.State, r.Error = StateUnreachable, fmt.Sprintf("%s answers as replica %q", r.StatusAddr, st.Name)
		return
	}
	r.ReplicaStatus, r.Reachable, r.Lag = st, true, st.LagVersions
	if leader != nil {
		r.Lag = 0
		if leader.DurableVersion > st.Version {
			r.Lag = leader.DurableVersion - st.Version
		}
	}
}

// askReplica fetches an agent's /api/status.
func (v *Viewer) askReplica(ctx context.Context, addr string) (ReplicaStatus, error) {
	var st ReplicaStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := v.http.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET http://%s/api/status: %s", addr, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, statusBytesMax)).Decode(&st); err != nil {
		return st, fmt.Errorf("GET http://%s/api/status: %w", addr, err)
	}
	return st, nil
}
