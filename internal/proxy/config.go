package proxy

import (
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/replica"
)

// Mode is where durability is placed (BRIEF.md "Durability placements";
// docs/MODES.md maps the names to the paper's).
type Mode string

const (
	// ModeBase: each replica's WAL makes every commit durable
	// (synchronous_commit=on); commits are applied serially. The paper's Base.
	ModeBase Mode = "base"
	// ModeMW: durability is the certifier log's; replicas run
	// synchronous_commit=off and are caught up from the log after a crash.
	// The paper's Tashkent-MW.
	ModeMW Mode = "mw"
)

// Config configures one proxy.
type Config struct {
	Name        string // the replica's name; unique in the cluster
	Listen      string // client-facing address
	BackendAddr string // the PostgreSQL replica, host:port
	Database    string // the replicated database
	// AdminUser is the superuser the proxy connects as for its own
	// connections (install, apply, lock watch). Trust or a password in
	// AdminPassword.
	AdminUser     string
	AdminPassword string
	Certifier     string // certifier address
	Mode          Mode
	// Staleness bounds how long an idle replica goes without asking for
	// remote writesets (Tashkent §6.2 "Bounding Staleness").
	Staleness time.Duration
	// NoPush: the replica hears of other replicas' commits only with the
	// replies to its own and its catch-up requests every Staleness
	// (Tashkent §6.1 as written), not as soon as each is durable (the
	// default; certclient.Options.Push). For tests that need a stale
	// replica.
	NoPush bool
	Logger *slog.Logger

	// Capture chooses how the replica captures writes (replica.Capture;
	// "Capture in C" in replica/doc.go); empty means replica.CaptureAuto.
	Capture replica.Capture

	// CertifierDialOptions dial the certifier: its TLS credentials
	// (grpctls, --certifier-tls-*); none: plaintext.
	CertifierDialOptions []grpc.DialOption

	// ReplicaIndex is this replica's number in the cluster, 1 to
	// SequenceStride, unique among the replicas: its sequences hand out
	// only values congruent to it modulo SequenceStride
	// (replica/sequences.go). 0 keeps what the database recorded last
	// time; a database that never had one keeps PostgreSQL's sequences,
	// which then collide across replicas (the proxy warns).
	ReplicaIndex int
	// SequenceStride is how far every sequence advances per value: the
	// most replicas the cluster can ever have. 0 means
	// replica.SequenceStrideDefault (16).
	SequenceStride int

	// TLSCert and TLSKey are PEM files of the certificate (chain) and key
	// clients' TLS connections use; none: SSLRequest is declined.
	TLSCert, TLSKey string
	// Auth is who authenticates clients: AuthRelay (default) or AuthSCRAM.
	Auth AuthMode
	// AuthFile, with AuthSCRAM, is a user list file (LoadUserList) used
	// instead of pg_authid.
	AuthFile string
	// AllowPasswordlessLogins, with AuthRelay, admits a client whose
	// relayed login PostgreSQL accepted without asking it for any
	// credential (trust, peer or ident on the proxy's connection path).
	// Off, such a login is refused with 28000: anyone who reaches the
	// proxy could log in as any role, the superuser included (red-team
	// finding 7; pgwire/passwordless.go). Set it only when no untrusted
	// client can reach the proxy (tashkent up: loopback only).
	AllowPasswordlessLogins bool
	// TrustDDLRoles lets roles that are not superusers run DDL in the
	// replica's database (replica.SetDDLTrust; refused with 42501
	// otherwise). The other replicas run replicated DDL as AdminUser, so
	// such a role can gain superuser rights there: set it only if every
	// role that can run DDL is trusted as a superuser.
	TrustDDLRoles bool
}

const (
	// applyBatchEntriesMax bounds the remote versions applied in one
	// database transaction: enough to amortize the round trip, small enough
	// that a batch does not hold locks for long.
	applyBatchEntriesMax = 256
	// lockWatchInterval is how long a remote apply may run before the proxy
	// looks for local transactions blocking it. PostgreSQL's own deadlock
	// check runs after deadlock_timeout (1 s); this must be well below it.
	lockWatchInterval = 10 * time.Millisecond
	// certifyTimeout bounds how long a COMMIT waits for the certifier
	// before answering 08007 (transaction resolution unknown). The client
	// re-sends survive certifier restarts and leader changes well within it.
	certifyTimeout = 60 * time.Second
	// conflictCatchUpMax bounds how long a certification abort waits for
	// the replica to apply the version it conflicted with (commit.go,
	// awaitConflictingVersion): a flush and an apply under load, with room.
	conflictCatchUpMax = 100 * time.Millisecond
	// appliedPruneInterval and appliedVersionsKept bound tashkent.applied,
	// which gains a row per version.
	appliedPruneInterval = 10 * time.Second
	appliedVersionsKept  = 10000
	// reconnectDelayMax bounds the pause between attempts to reach the
	// replica's database while it recovers.
	reconnectDelayMax = time.Second
)

func (c *Config) withDefaults() error {
	if c.Name == "" || c.Listen == "" || c.BackendAddr == "" || c.Certifier == "" {
		return fmt.Errorf("proxy: name, listen, backend and certifier addresses are required")
	}
	if c.Database == "" {
		c.Database = "postgres"
	}
	if c.AdminUser == "" {
		c.AdminUser = "postgres"
	}
	switch c.Mode {
	case "":
		c.Mode = ModeMW
	case ModeBase, ModeMW:
	default:
		return fmt.Errorf("proxy: mode must be %q or %q, not %q", ModeBase, ModeMW, c.Mode)
	}
	if c.SequenceStride == 0 {
		c.SequenceStride = replica.SequenceStrideDefault
	}
	if c.SequenceStride < 1 || c.SequenceStride > replica.SequenceStrideMax {
		return fmt.Errorf("proxy: sequence stride must be between 1 and %d, not %d", replica.SequenceStrideMax, c.SequenceStride)
	}
	if c.ReplicaIndex < 0 || c.ReplicaIndex > c.SequenceStride {
		return fmt.Errorf("proxy: replica index must be between 1 and the sequence stride %d, not %d", c.SequenceStride, c.ReplicaIndex)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("proxy: TLS needs both a certificate and a key (--tls-cert and --tls-key)")
	}
	if c.Auth == "" {
		c.Auth = AuthRelay
	}
	if c.AuthFile != "" && c.Auth != AuthSCRAM {
		return fmt.Errorf("proxy: an auth file is used only with --auth %s", AuthSCRAM)
	}
	if c.Staleness <= 0 {
		c.Staleness = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
