package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// FaultKind names a fault the harness injects.
type FaultKind string

const (
	// KillPostgres: SIGKILL to a replica's postmaster and all its backends
	// (shared memory, with the WAL not yet written under
	// synchronous_commit=off, is lost: Tashkent §7.1 case 2), then restart;
	// its agent replays what the replica lost from the certifier's log.
	KillPostgres FaultKind = "kill-postgres"
	// KillBackend: SIGKILL to one backend of a replica's PostgreSQL that
	// holds or waits for the replica's commit turn (tashkent.backends():
	// holding, committing or applying), else to any client backend. The
	// postmaster stays and restarts every backend (crash recovery, shared
	// memory reinitialized); the agent catches the replica up again.
	// Nothing to restart: the heal waits until the replica admits clients.
	KillBackend FaultKind = "kill-backend"
	// KillAgent: SIGKILL to a replica's agent, then restart.
	KillAgent FaultKind = "kill-agent"
	// KillCertifier: SIGKILL to the certifier, then restart (it recovers
	// its log; agents reconnect and re-send).
	KillCertifier FaultKind = "kill-certifier"
	// TerminateBackends: pg_terminate_backend on every client backend of
	// one replica's PostgreSQL while the server stays up: the clients'
	// sessions (at any point of a transaction, also between a certified
	// COMMIT and its answer), the agent's applier and control connection.
	// Nothing to heal: the agent reconnects what it needs.
	TerminateBackends FaultKind = "terminate-backends"
	// PausePostgres, PauseAgent, PauseCertifier: SIGSTOP, then SIGCONT.
	PausePostgres  FaultKind = "pause-postgres"
	PauseAgent     FaultKind = "pause-agent"
	PauseCertifier FaultKind = "pause-certifier"
	// ClientDisconnect: a client closes its connection in the middle of a
	// transaction (injected by the list-append clients themselves).
	ClientDisconnect FaultKind = "client-disconnect"
	// PartitionCertifier: the certifier is cut from every replica's agent
	// by setting their veths down (netpart.go), then healed.
	PartitionCertifier FaultKind = "partition-certifier"
	// PartitionReplica: one replica's agent is cut from the certifier (and
	// so from the rest of the cluster), then healed: a minority of one.
	PartitionReplica FaultKind = "partition-replica"

	// With a certifier group (Config.Certifiers > 1; group.go):
	// KillLeader, KillFollower: SIGKILL to the member that leads (or to one
	// that follows), then restart; a new leader takes over (Tashkent §7.3).
	KillLeader   FaultKind = "kill-leader"
	KillFollower FaultKind = "kill-follower"
	// PauseLeader: SIGSTOP to the leader, then SIGCONT: it wakes up in an
	// older term and must step down without certifying.
	PauseLeader FaultKind = "pause-leader"
	// PartitionLeader: the leader is cut from every other member (the
	// group's transport fault point), then healed.
	PartitionLeader FaultKind = "partition-leader"
	// PartitionFollower: one follower is cut from every other member: a
	// minority of one, the leader keeps a majority.
	PartitionFollower FaultKind = "partition-follower"
	// PartitionSplit: the members are split at random into a minority and
	// a majority (1/2 with 3 members, 2/3 with 5) that drop each other's
	// messages; the leader may be on either side.
	PartitionSplit FaultKind = "partition-split"
)

// AllFaults lists every kind of a single certifier, in the order the
// nemesis cycles through them.
var AllFaults = []FaultKind{KillPostgres, PauseAgent, KillCertifier, KillBackend, PartitionCertifier, PausePostgres, KillAgent,
	PauseCertifier, PartitionReplica, TerminateBackends, ClientDisconnect}

// GroupFaults lists every kind with a certifier group, in the order the
// nemesis cycles through them. The single certifier's kinds are not among
// them: the group's members replace the certifier, and the netns relay
// (netpart.go) serves one certifier address.
var GroupFaults = []FaultKind{KillPostgres, PauseAgent, KillLeader, KillBackend, PartitionLeader, PausePostgres, KillAgent,
	PauseLeader, PartitionFollower, KillFollower, PartitionSplit, TerminateBackends, ClientDisconnect}

// FaultsFor returns every kind that applies to a cluster with the given
// number of certifiers.
func FaultsFor(certifiers int) []FaultKind {
	if certifiers > 1 {
		return append([]FaultKind(nil), GroupFaults...)
	}
	return append([]FaultKind(nil), AllFaults...)
}

// groupKind reports whether kind needs a certifier group.
func groupKind(kind FaultKind) bool {
	switch kind {
	case KillLeader, KillFollower, PauseLeader, PartitionLeader, PartitionFollower, PartitionSplit:
		return true
	}
	return false
}

// singleCertifierKind reports whether kind needs a single certifier.
func singleCertifierKind(kind FaultKind) bool {
	switch kind {
	case KillCertifier, PauseCertifier, PartitionCertifier, PartitionReplica:
		return true
	}
	return false
}

// ParseFaults reads a comma-separated list of kinds for a cluster with
// the given number of certifiers ("all" for FaultsFor(certifiers), "none"
// or "" for none).
func ParseFaults(s string, certifiers int) ([]FaultKind, error) {
	switch s {
	case "all":
		return FaultsFor(certifiers), nil
	case "", "none":
		return nil, nil
	}
	known := FaultsFor(certifiers)
	var out []FaultKind
	for _, part := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(part))
		switch {
		case slices.Contains(known, k):
		case groupKind(k):
			return nil, fmt.Errorf("fault %s needs a certifier group: add --certifiers 3", k)
		case singleCertifierKind(k):
			return nil, fmt.Errorf("fault %s is for a single certifier (--certifiers 1); with a group the kinds are %s", k, joinKinds(known))
		default:
			return nil, fmt.Errorf("unknown fault %q with %d certifier(s) (known: %s, all, none)", k, max(certifiers, 1), joinKinds(known))
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
	// Pause is the longest time without an acknowledged commit from the
	// injection until a gap after healing (pauses.go).
	Pause time.Duration `json:"pause_ns,omitempty"`
	// Backend is what the backend a kill-backend fault hit was doing with
	// the commit turn (holding, committing, applying), or "client" for a
	// client backend outside the turn.
	Backend string `json:"backend,omitempty"`
	// LeaderBefore and LeaderAfter are the certifier group's leader when
	// the fault was injected and right after it healed (0: none known).
	LeaderBefore int `json:"leader_before,omitempty"`
	LeaderAfter  int `json:"leader_after,omitempty"`
	// FailedVersions, for kill-certifier, counts the versions the
	// certifier had decided before the kill and did not find in its log
	// after it (a lower bound).
	FailedVersions uint64 `json:"failed_versions,omitempty"`
	Error          string `json:"error,omitempty"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("%8.3fs %-17s %s", f.At.Seconds(), f.Kind, f.Target)
	if f.Healed > 0 {
		s += fmt.Sprintf(" (healed at %.3fs)", f.Healed.Seconds())
	}
	if f.LeaderBefore > 0 {
		s += fmt.Sprintf(" leader %d -> %d", f.LeaderBefore, f.LeaderAfter)
	}
	if f.FailedVersions > 0 {
		s += fmt.Sprintf(", %d versions failed", f.FailedVersions)
	}
	if f.Pause > 0 {
		s += fmt.Sprintf(", longest time without a commit %.3fs", f.Pause.Seconds())
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
		if ctxtime.Sleep(ctx, n.gap) != nil {
			return
		}
		n.inject(ctx, kinds[i%len(kinds)])
		if i == len(kinds)-1 {
			close(cycled)
		}
	}
}

func (n *nemesis) inject(ctx context.Context, kind FaultKind) {
	if groupKind(kind) {
		n.log.add(n.injectGroup(ctx, kind))
		return
	}
	t := n.pick(kind)
	f := Fault{Kind: kind, Target: t.name, PIDs: t.pids(), At: n.log.since()}
	heal := context.WithoutCancel(ctx)
	var err error
	switch kind {
	case KillPostgres, KillAgent, KillCertifier:
		// The versions the certifier decided before the kill and does
		// not find in its log after it are failed (at least those: it
		// may decide more between the question and the signal).
		decided, asked := uint64(0), false
		if kind == KillCertifier {
			d, qerr := n.ctl.certifierDecided(ctx)
			decided, asked = d, qerr == nil
		}
		err = signal(f.PIDs, syscall.SIGKILL)
		if err == nil && !waitGone(f.PIDs, 10*time.Second) {
			err = fmt.Errorf("still running 10 s after SIGKILL")
		}
		n.logf("fault: %s %s (pids %v)", kind, t.name, f.PIDs)
		_ = ctxtime.Sleep(ctx, n.hold)
		restart := n.ctl.up
		if kind == KillCertifier {
			restart = n.ctl.restartCertifier
		}
		if uerr := restart(heal); uerr != nil {
			err = fmt.Errorf("restart: %w", uerr)
			break
		}
		if asked && decided > n.ctl.recovered() {
			f.FailedVersions = decided - n.ctl.recovered()
		}
		if werr := n.awaitWhole(heal, kind, t); werr != nil {
			err = werr
		}
	case PausePostgres, PauseAgent, PauseCertifier:
		err = signal(f.PIDs, syscall.SIGSTOP)
		n.logf("fault: %s %s (pids %v)", kind, t.name, f.PIDs)
		_ = ctxtime.Sleep(ctx, n.hold)
		if cerr := signal(f.PIDs, syscall.SIGCONT); cerr != nil {
			err = cerr
		}
	case KillBackend:
		if !t.pg {
			err = fmt.Errorf("no replica to hit")
			break
		}
		var pid int
		pid, f.Backend, err = n.ctl.killBackend(ctx, t.replica)
		f.PIDs = []int{pid}
		f.Target = fmt.Sprintf("%s backend (%s)", n.ctl.state().Replicas[t.replica].Name, f.Backend)
		n.logf("fault: %s %s (pid %d)", kind, f.Target, pid)
		_ = ctxtime.Sleep(ctx, n.hold)
		if err == nil {
			err = n.ctl.awaitAdmitting(heal, t.replica)
		}
	case TerminateBackends:
		if !t.pg {
			err = fmt.Errorf("no replica to hit")
			break
		}
		f.PIDs, err = n.ctl.terminateBackends(ctx, t.replica)
		n.logf("fault: %s %s (backends %v)", kind, t.name, f.PIDs)
	case PartitionCertifier, PartitionReplica:
		f.PIDs = nil
		if n.ctl.net == nil {
			err = fmt.Errorf("the certifier has no network namespace of its own")
			break
		}
		links := t.links
		err = n.ctl.net.setLinks(ctx, links, false)
		n.logf("fault: %s %s (replica links %v down)", kind, t.name, links)
		_ = ctxtime.Sleep(ctx, n.hold)
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

// awaitWhole waits, in mode ed, until a restart left the cluster whole:
// after a certifier kill every replica rewound what failed and has a
// session again, after a replica's kill it admits clients again. Only
// then may the next fault come: a replica that crashes while it holds
// failed versions cannot undo them (its pinned snapshots are gone) and
// must be rebuilt from a peer.
func (n *nemesis) awaitWhole(ctx context.Context, kind FaultKind, t target) error {
	if n.ctl.mode != cluster.ModeED {
		return nil
	}
	if kind == KillCertifier {
		return n.ctl.awaitSessions(ctx)
	}
	return n.ctl.awaitAdmitting(ctx, t.replica)
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
	case KillAgent, PauseAgent:
		want = " agent"
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
		return target{name: "nothing", replica: -1}
	}
	return cands[n.rng.IntN(len(cands))]
}
