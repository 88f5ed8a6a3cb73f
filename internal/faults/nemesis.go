package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FaultKind names a fault the harness injects.
type FaultKind string

const (
	// KillPostgres: SIGKILL to a replica's postmaster and all its backends
	// (shared memory, with the WAL not yet written under
	// synchronous_commit=off, is lost: Tashkent §7.1 case 2), then restart.
	KillPostgres FaultKind = "kill-postgres"
	// KillProxy: SIGKILL to a proxy, then restart.
	KillProxy FaultKind = "kill-proxy"
	// KillCertifier: SIGKILL to the certifier, then restart (it recovers
	// its log; proxies reconnect and re-send).
	KillCertifier FaultKind = "kill-certifier"
	// PausePostgres, PauseProxy, PauseCertifier: SIGSTOP, then SIGCONT.
	PausePostgres  FaultKind = "pause-postgres"
	PauseProxy     FaultKind = "pause-proxy"
	PauseCertifier FaultKind = "pause-certifier"
	// ClientDisconnect: a client closes its connection in the middle of a
	// transaction (injected by the list-append clients themselves).
	ClientDisconnect FaultKind = "client-disconnect"
	// PartitionCertifier: the certifier is cut from every replica by
	// setting their veths down (netpart.go), then healed.
	PartitionCertifier FaultKind = "partition-certifier"
	// PartitionReplica: one replica is cut from the certifier (and so from
	// the rest of the cluster), then healed: a minority of one.
	PartitionReplica FaultKind = "partition-replica"
)

// AllFaults lists every kind, in the order the nemesis cycles through them.
var AllFaults = []FaultKind{KillPostgres, PauseProxy, KillCertifier, PartitionCertifier, PausePostgres, KillProxy, PauseCertifier,
	PartitionReplica, ClientDisconnect}

// ParseFaults reads a comma-separated list of kinds ("all" for AllFaults,
// "none" or "" for none).
func ParseFaults(s string) ([]FaultKind, error) {
	switch s {
	case "all":
		return append([]FaultKind(nil), AllFaults...), nil
	case "", "none":
		return nil, nil
	}
	var out []FaultKind
	for _, part := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(part))
		found := false
		for _, a := range AllFaults {
			found = found || a == k
		}
		if !found {
			return nil, fmt.Errorf("unknown fault %q (known: %s, all, none)", k, joinKinds(AllFaults))
		}
		out = append(out, k)
	}
	return out, nil
}

func joinKinds(ks []FaultKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Fault records one injected fault.
type Fault struct {
	Kind   FaultKind `json:"kind"`
	Target string    `json:"target"`
	PIDs   []int     `json:"pids,omitempty"`
	// At and Healed are since the start of the workload.
	At     time.Duration `json:"at_ns"`
	Healed time.Duration `json:"healed_ns,omitempty"`
	Error  string        `json:"error,omitempty"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("%8.3fs %-17s %s", f.At.Seconds(), f.Kind, f.Target)
	if f.Healed > 0 {
		s += fmt.Sprintf(" (healed at %.3fs)", f.Healed.Seconds())
	}
	if f.Error != "" {
		s += ": " + f.Error
	}
	return s
}

// faultLog is the record of every fault, shared by the nemesis and the
// clients.
type faultLog struct {
	start  time.Time
	mu     sync.Mutex
	faults []Fault
}

func (l *faultLog) since() time.Duration { return time.Since(l.start) }

func (l *faultLog) add(f Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, f)
}

func (l *faultLog) all() []Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]Fault(nil), l.faults...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// nemesis injects process faults one at a time: inject, hold, heal, rest.
type nemesis struct {
	ctl   *control
	log   *faultLog
	kinds []FaultKind
	hold  time.Duration
	gap   time.Duration
	rng   *rand.Rand
	logf  func(format string, args ...any)
}

// run cycles through the process fault kinds until ctx ends. Every fault
// is healed before it returns, also when ctx ends during the hold.
// cycled is closed once every kind was injected once.
func (n *nemesis) run(ctx context.Context, cycled chan<- struct{}) {
	var kinds []FaultKind
	for _, k := range n.kinds {
		if k != ClientDisconnect {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		close(cycled)
		return
	}
	for i := 0; ; i++ {
		if !sleepCtx(ctx, n.gap) {
			return
		}
		n.inject(ctx, kinds[i%len(kinds)])
		if i == len(kinds)-1 {
			close(cycled)
		}
	}
}

func (n *nemesis) inject(ctx context.Context, kind FaultKind) {
	t := n.pick(kind)
	f := Fault{Kind: kind, Target: t.name, PIDs: t.pids(), At: n.log.since()}
	heal := context.WithoutCancel(ctx)
	var err error
	switch kind {
	case KillPostgres, KillProxy, KillCertifier:
		err = signal(f.PIDs, syscall.SIGKILL)
		if err == nil && !waitGone(f.PIDs, 10*time.Second) {
			err = fmt.Errorf("still running 10 s after SIGKILL")
		}
		n.logf("fault: %s %s (pids %v)", kind, t.name, f.PIDs)
		sleepCtx(ctx, n.hold)
		restart := n.ctl.up
		if kind == KillCertifier {
			restart = n.ctl.restartCertifier
		}
		if uerr := restart(heal); uerr != nil {
			err = fmt.Errorf("restart: %w", uerr)
		}
	case PausePostgres, PauseProxy, PauseCertifier:
		err = signal(f.PIDs, syscall.SIGSTOP)
		n.logf("fault: %s %s (pids %v)", kind, t.name, f.PIDs)
		sleepCtx(ctx, n.hold)
		if cerr := signal(f.PIDs, syscall.SIGCONT); cerr != nil {
			err = cerr
		}
	case PartitionCertifier, PartitionReplica:
		f.PIDs = nil
		if n.ctl.net == nil {
			err = fmt.Errorf("the certifier has no network namespace of its own")
			break
		}
		links := t.links
		err = n.ctl.net.setLinks(ctx, links, false)
		n.logf("fault: %s %s (replica links %v down)", kind, t.name, links)
		sleepCtx(ctx, n.hold)
		if herr := n.ctl.net.setLinks(heal, links, true); herr != nil {
			err = herr
		}
	default:
		err = fmt.Errorf("the nemesis cannot inject %s", kind)
	}
	f.Healed = n.log.since()
	if err != nil {
		f.Error = err.Error()
		n.logf("fault %s %s: %v", kind, t.name, err)
	}
	n.log.add(f)
}

// pick chooses the process a fault hits.
func (n *nemesis) pick(kind FaultKind) target {
	var want string
	switch kind {
	case KillCertifier, PauseCertifier:
		return n.ctl.targets()[0]
	case PartitionCertifier:
		t := target{name: "certifier"}
		for i := range n.ctl.state().Replicas {
			t.links = append(t.links, i)
		}
		return t
	case PartitionReplica:
		i := n.rng.IntN(len(n.ctl.state().Replicas))
		return target{name: n.ctl.state().Replicas[i].Name, links: []int{i}}
	case KillProxy, PauseProxy:
		want = " proxy"
	default:
		want = " postgres"
	}
	var cands []target
	for _, t := range n.ctl.targets() {
		if strings.HasSuffix(t.name, want) {
			cands = append(cands, t)
		}
	}
	if len(cands) == 0 {
		return target{name: "nothing"}
	}
	return cands[n.rng.IntN(len(cands))]
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
