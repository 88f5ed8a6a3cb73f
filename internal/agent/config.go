package agent

import (
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/replica"
	"github.com/tashkent-db/tashkent/internal/verify"
)

// Mode is where durability is placed (BRIEF.md "Durability placements").
type Mode string

const (
	// ModeBase: each replica's WAL makes every commit durable
	// (synchronous_commit=on). The paper's Base.
	ModeBase Mode = "base"
	// ModeMW: durability is the certifier log's; replicas run
	// synchronous_commit=off and are caught up from the log after a crash
	// (Tashkent §7.1, case 2). The paper's Tashkent-MW.
	ModeMW Mode = "mw"
	// ModeED: mw with eventual durability (Kashi, "Eventual Durability"):
	// the certifier answers at the commit point, before the version is
	// durable; a transaction whose synchronous_commit is off (fast) is
	// acknowledged then, any other (safe) once durable
	// (extension/src/safe.c). Replicas run synchronous_commit=on, the
	// user's default, and never flush for a replicated commit; the agent's
	// own sessions run with it off.
	ModeED Mode = "ed"
)

// Config configures one agent.
type Config struct {
	Name      string // the replica's name, unique in the cluster
	Certifier string // the certifier's address, or a group's addresses, comma-separated
	Mode      Mode
	Database  string // the replicated database
	// Postgres is the connection string of the replica's PostgreSQL
	// (keyword/value or URL; empty: libpq's defaults and PG* variables).
	// Its database is replaced by Database.
	Postgres string
	// AdminUser is the superuser the agent connects as; empty: the one
	// Postgres names, or postgres. AdminPassword, if set, replaces
	// Postgres' password.
	AdminUser     string
	AdminPassword string
	// Socket is the Unix socket backends connect to; empty: the
	// extension's tashkent.agent_socket, relative to the data directory.
	Socket string
	// Staleness bounds how long the replica goes without asking the
	// certifier for new versions (Tashkent §6.2 "Bounding Staleness"); it
	// is also the interval of the database health check.
	Staleness time.Duration
	// BlockerGrace is how long a doomed local transaction may go on
	// blocking a remote writeset before its backend is terminated
	// (Tashkent §8.2): a transaction idle in its block cannot be
	// cancelled. A reader in the way (no transaction id) has its query
	// cancelled after it, and its backend terminated after twice it.
	BlockerGrace time.Duration
	// FlowControlLimit is the backlog (remote versions delivered and not
	// yet applied) over which the replica asks the certifier to hold
	// the other replicas' commits until it is down to half (flowcontrol.go);
	// 0: DefaultFlowControlLimit. NoFlowControl turns it off.
	FlowControlLimit uint64
	NoFlowControl    bool
	// RefuseWritesAfter: when the replica's apply made no progress for
	// this long although versions wait, its clients' writes are refused
	// until it moves again (refusal.go); 0: never.
	RefuseWritesAfter time.Duration
	// ApplyBacklogBytes bounds the delivered versions the agent holds in
	// memory until they are applied: past it, it stops reading the
	// certifier stream until the applier catches up (0:
	// DefaultApplyBacklogBytes).
	ApplyBacklogBytes int
	// NoPush: the replica hears of other replicas' commits only with
	// replies and catch-ups (certclient.Options.Push off). For tests.
	NoPush bool
	// ReplicaIndex and SequenceStride offset the database's sequences
	// per replica (replica.ConfigureSequences); index 0 keeps the one the
	// database recorded.
	ReplicaIndex   int
	SequenceStride int
	// TrustDDLRoles lets roles that are not superusers run DDL
	// (replica.SetDDLTrust).
	TrustDDLRoles bool
	// CertifierDialOptions dial the certifier (grpctls); none: plaintext.
	CertifierDialOptions []grpc.DialOption
	// VerifyEvery, if not 0, compares this replica with VerifyPeers that
	// often (tashkent verify; verify.go); the metrics keep the last result.
	VerifyEvery time.Duration
	VerifyPeers []verify.Replica
	// MetricsAddr serves /metrics, /healthz and the dashboard
	// (internal/dashboard); empty: not served.
	MetricsAddr string
	Logger      *slog.Logger
}

// DefaultApplyBacklogBytes is Config.ApplyBacklogBytes' default: minutes
// of TPC-B commits, and more than two of the largest writesets.
const DefaultApplyBacklogBytes = 256 << 20

// DefaultFlowControlLimit is Config.FlowControlLimit's default: four
// apply batches, about half a second of TPC-B commits on this machine's
// three-replica cluster; a replica that keeps up stays well below it.
const DefaultFlowControlLimit = 1024

const (
	// applyBatchEntriesMax bounds the remote versions applied in one
	// transaction: enough to amortize a round trip and a commit, few
	// enough that a batch does not hold row locks for long.
	applyBatchEntriesMax = 256
	// lockWatchInterval is how often a batch in flight is checked for
	// local transactions blocking it. PostgreSQL's own deadlock check
	// runs after deadlock_timeout (1 s); this must be well below it.
	lockWatchInterval = 10 * time.Millisecond
	// inheritedPollInterval is how often versions held by backends at
	// start are looked for in tashkent.backends().
	inheritedPollInterval = 20 * time.Millisecond
	// certifyingSettleMax bounds the wait at start for backends that
	// asked an earlier agent for a certification: its socket is gone,
	// so they end at once unless that agent still runs.
	certifyingSettleMax = 10 * time.Second
	// helloRegistrationWaitMax bounds how long a session's hello waits
	// for the agent's registration, which names the agent generation the
	// welcome carries; below the extension's 10 s hello timeout.
	helloRegistrationWaitMax = 5 * time.Second
	// helloReadMax bounds the wait for a new connection's hello.
	helloReadMax = 10 * time.Second
	// queryTimeout bounds the agent's own questions to its database.
	queryTimeout = 5 * time.Second
	// reconnectDelayMax bounds the pause between attempts to reach the
	// replica's database.
	reconnectDelayMax = time.Second
	// retryPause separates apply attempts after a deadlock or a
	// serialization failure.
	retryPause = 10 * time.Millisecond
	// certifyTimeoutShare is the share of the extension's
	// tashkent.certify_timeout the agent waits for a decision, so that its
	// Unknown reaches the backend before the backend gives up.
	certifyTimeoutShare = 0.9
	// certifyTimeoutDefault is certifyTimeoutShare of the extension's
	// default, until the database is asked.
	certifyTimeoutDefault = 54 * time.Second
	// stoppedWaitMax bounds the wait for backends the agent terminated.
	stoppedWaitMax = 10 * time.Second
)

func (c *Config) withDefaults() error {
	if c.Name == "" || c.Certifier == "" {
		return fmt.Errorf("agent: the replica's name and the certifier's address are required")
	}
	if c.Database == "" {
		c.Database = "postgres"
	}
	switch c.Mode {
	case "":
		c.Mode = ModeMW
	case ModeBase, ModeMW, ModeED:
	default:
		return fmt.Errorf("agent: mode must be %q, %q or %q, not %q", ModeBase, ModeMW, ModeED, c.Mode)
	}
	if c.SequenceStride == 0 {
		c.SequenceStride = replica.SequenceStrideDefault
	}
	if c.SequenceStride < 1 || c.SequenceStride > replica.SequenceStrideMax {
		return fmt.Errorf("agent: sequence stride must be between 1 and %d, not %d", replica.SequenceStrideMax, c.SequenceStride)
	}
	if c.ReplicaIndex < 0 || c.ReplicaIndex > c.SequenceStride {
		return fmt.Errorf("agent: replica index must be between 1 and the sequence stride %d, not %d", c.SequenceStride, c.ReplicaIndex)
	}
	if c.Staleness <= 0 {
		c.Staleness = 100 * time.Millisecond
	}
	if c.BlockerGrace <= 0 {
		c.BlockerGrace = time.Second
	}
	if c.FlowControlLimit == 0 {
		c.FlowControlLimit = DefaultFlowControlLimit
	}
	if c.ApplyBacklogBytes <= 0 {
		c.ApplyBacklogBytes = DefaultApplyBacklogBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
