package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StateFile is the name, inside the cluster directory, of the file that
// records the cluster.
const StateFile = "cluster.json"

// stateFormat is the version of the cluster.json layout. Load refuses files
// of another version rather than guess at them.
const stateFormat = 2

// proxyStateFormat is the layout of clusters whose replicas sat behind a
// wire-protocol proxy each: this tashkent cannot run or stop them.
const proxyStateFormat = 1

// Mode names a durability placement `tashkent up` can run (BRIEF.md
// "Durability placements").
type Mode string

const (
	// ModeMW: the certifier's log makes commits durable; the replicas run
	// with synchronous_commit=off.
	ModeMW Mode = "mw"
	// ModeBase: each replica's WAL makes every commit durable
	// (synchronous_commit=on).
	ModeBase Mode = "base"
	// ModeED: mw with eventual durability: commits are answered at the
	// commit point; a safe transaction (synchronous_commit on, the
	// replicas' default) is acknowledged once durable, a fast one (off) at
	// once. Single certifier only.
	ModeED Mode = "ed"
)

// ParseMode checks a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeMW, ModeBase, ModeED:
		return m, nil
	}
	return "", fmt.Errorf("mode must be %q, %q or %q, not %q", ModeMW, ModeBase, ModeED, s)
}

// synchronousCommit is the replicas' synchronous_commit in mode m: on where
// it is the user's default choice of a safe commit (ed) or the replica's
// WAL makes commits durable (base).
func (m Mode) synchronousCommit() bool { return m == ModeBase || m == ModeED }

// State is the content of cluster.json: everything `tashkent up` started,
// so that `down` and `status` (and `up` again) find it. Paths are absolute.
// A PID of 0 means the process is not running (never started, or stopped by
// `down`); a recorded PID is only ever signalled after checking, through
// /proc/PID/cmdline, that it still is the process recorded.
type State struct {
	Format  int       `json:"format"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Dir is the cluster directory (the --data-dir of `up`).
	Dir  string `json:"dir"`
	Mode Mode   `json:"mode"`
	// Binary is the tashkent executable that started the certifier and the
	// agents the last time `up` ran.
	Binary    string     `json:"binary"`
	Certifier Certifier  `json:"certifier"`
	Replicas  []*Replica `json:"replicas"`
	// MoreCertifiers are members 2..N of a certifier group (`up
	// --certifiers N`); Certifier is then member 1. Empty: one certifier.
	MoreCertifiers []*Certifier `json:"more_certifiers,omitempty"`
	// CertifierTLS: mutual TLS on the certifier channels (`up
	// --certifier-tls`); nil: plaintext.
	CertifierTLS *CertifierTLS `json:"certifier_tls,omitempty"`
	// TrustDDLRoles: the agents run with --trust-ddl-roles (`up
	// --trust-ddl-roles`): roles that are not superusers may run DDL.
	TrustDDLRoles bool `json:"trust_ddl_roles,omitempty"`
	// BasePort, when not 0, is replica 1's PostgreSQL port (`up
	// --base-port`): replica K listens on BasePort+K-1.
	BasePort int `json:"base_port,omitempty"`
	// AutoRebuild: `up` runs the supervisor, which rebuilds a replica
	// whose agent halted (supervisor.go).
	AutoRebuild bool        `json:"auto_rebuild,omitempty"`
	Supervisor  *Supervisor `json:"supervisor,omitempty"`
	// CertifierArgs are flags up gives every certifier it starts, after
	// its config file (`up --certifier-arg`).
	CertifierArgs []string `json:"certifier_args,omitempty"`
	// AgentArgs are flags up gives every agent it starts, after its
	// config file (`up --agent-arg`).
	AgentArgs []string `json:"agent_args,omitempty"`
	// Halted names the replicas whose agents had halted when Up returned
	// this state (not recorded).
	Halted []string `json:"-"`
}

// Certifier records the certifier process.
type Certifier struct {
	// ID is the member id in a certifier group (0: a single certifier).
	ID          int    `json:"id,omitempty"`
	DataDir     string `json:"data_dir"`
	Port        int    `json:"port"`
	MetricsPort int    `json:"metrics_port"`
	PID         int    `json:"pid"`
	Log         string `json:"log"`
	// Config is the config file up starts it from (config.go).
	Config string `json:"config,omitempty"`
}

// Replica records one replica: its PostgreSQL, which clients connect to,
// and its agent.
type Replica struct {
	Name string `json:"name"`
	// Index is the replica's number in the cluster (members.go).
	Index    int      `json:"index"`
	Dir      string   `json:"dir"`
	Postgres Postgres `json:"postgres"`
	Agent    Agent    `json:"agent"`
	// Rebuilt is the replica's last rebuild, if any.
	Rebuilt *Rebuilt `json:"rebuilt,omitempty"`
}

// Postgres records one PostgreSQL server (the tashkent extension loaded).
type Postgres struct {
	DataDir string `json:"data_dir"`
	// Port is the TCP port on 127.0.0.1 clients connect to.
	Port int    `json:"port"`
	PID  int    `json:"pid"`
	Log  string `json:"log"`
}

// Agent records one replica's agent (`tashkent agent`).
type Agent struct {
	// Socket is the Unix socket the replica's backends reach the agent on
	// (the extension's tashkent.agent_socket in the data directory); it
	// also identifies the process (proc.go).
	Socket      string `json:"socket"`
	MetricsPort int    `json:"metrics_port"`
	PID         int    `json:"pid"`
	Log         string `json:"log"`
	// Config is the config file up starts it from (config.go).
	Config string `json:"config,omitempty"`
}

// agentSocketName is the extension's default tashkent.agent_socket,
// relative to the data directory.
const agentSocketName = "tashkent_agent.sock"

// unixSocketPathMax is the longest path a Unix socket can have on Linux
// (sun_path holds 108 bytes with the terminating NUL).
const unixSocketPathMax = 107

// CertifierAddr is the certifier's gRPC address; for a certifier group,
// every member's, comma-separated (what agents and certclient take).
func (s *State) CertifierAddr() string {
	addrs := make([]string, 0, 1+len(s.MoreCertifiers))
	for _, c := range s.CertifierMembers() {
		addrs = append(addrs, hostPort(c.Port))
	}
	return strings.Join(addrs, ",")
}

// CertifierMembers is the certifier, or every member of the group.
func (s *State) CertifierMembers() []*Certifier {
	return append([]*Certifier{&s.Certifier}, s.MoreCertifiers...)
}

// certifierPeers is the --peers value of the group's members.
func (s *State) certifierPeers() string {
	var parts []string
	for _, c := range s.CertifierMembers() {
		parts = append(parts, fmt.Sprintf("%d=%s", c.ID, hostPort(c.Port)))
	}
	return strings.Join(parts, ",")
}

// URI is the connection string clients use for this replica: its
// PostgreSQL, as the postgres superuser.
func (r *Replica) URI() string { return pgURI(r.Postgres.Port) }

// DSN is URI with the options a Go client of a local cluster needs (the
// servers have no TLS certificate).
func (r *Replica) DSN() string { return r.URI() + "?sslmode=disable" }

// PsqlCommand is a psql command line connecting to the replica.
func (r *Replica) PsqlCommand() string {
	return fmt.Sprintf("psql -h 127.0.0.1 -p %d -U postgres postgres", r.Postgres.Port)
}

// AgentPostgres is the agent's --postgres: the Unix socket in the data
// directory (cheaper than loopback TCP), or TCP when the path is too long
// for a socket (PostgreSQL then listens on TCP only: internal/pgserver).
func (r *Replica) AgentPostgres() string {
	host := r.Postgres.DataDir
	if len(fmt.Sprintf("%s/.s.PGSQL.%d", host, r.Postgres.Port)) > unixSocketPathMax {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("host=%s port=%d user=postgres", quoteConnValue(host), r.Postgres.Port)
}

// quoteConnValue quotes a keyword/value connection string value when it
// needs it (libpq's rules: single quotes, backslash escapes).
func quoteConnValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t\n") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(v) + "'"
}

func pgURI(port int) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: hostPort(port), Path: "/postgres"}
	return u.String()
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// StatePath returns the path of cluster.json in dir.
func StatePath(dir string) string { return filepath.Join(dir, StateFile) }

// ErrNoCluster is returned (wrapped) by Load when dir holds no cluster.json.
var ErrNoCluster = errors.New("no cluster")

// Load reads dir/cluster.json.
func Load(dir string) (*State, error) {
	p := StatePath(dir)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s (no %s; start one with `tashkent up --data-dir %s`)", ErrNoCluster, dir, StateFile, dir)
	}
	if err != nil {
		return nil, err
	}
	var head struct {
		Format int    `json:"format"`
		Binary string `json:"binary"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	switch head.Format {
	case stateFormat:
	case proxyStateFormat:
		return nil, fmt.Errorf("%s: %w", p, errProxyCluster(dir, head.Binary))
	default:
		return nil, fmt.Errorf("%s: format %d, this tashkent reads format %d", p, head.Format, stateFormat)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	s.numberReplicas()
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &s, nil
}

// errProxyCluster explains why a cluster recorded in format 1 cannot be
// run: its replicas sit behind proxies, which this tashkent no longer has.
func errProxyCluster(dir, binary string) error {
	stop := "the tashkent that started it"
	if binary != "" {
		stop = binary
	}
	return fmt.Errorf("format %d: this cluster was created by an earlier tashkent whose clients went through a proxy per replica; "+
		"this tashkent runs an agent beside each replica's PostgreSQL and cannot start or stop it. "+
		"Stop it with `%s down --data-dir %s` if it still runs, then create a new cluster in another directory "+
		"(its data directories are ordinary PostgreSQL 15 clusters, without the extension)", proxyStateFormat, stop, dir)
}

func (s *State) validate() error {
	if _, err := ParseMode(string(s.Mode)); err != nil {
		return err
	}
	if len(s.Replicas) == 0 {
		return errors.New("no replicas")
	}
	for _, c := range s.CertifierMembers() {
		if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
			return fmt.Errorf("certifier data_dir %q is not an absolute path", c.DataDir)
		}
	}
	seen := map[int]bool{}
	for i, r := range s.Replicas {
		if r == nil || r.Name == "" || !filepath.IsAbs(r.Postgres.DataDir) || !filepath.IsAbs(r.Agent.Socket) {
			return fmt.Errorf("replica %d: name, absolute postgres data_dir or absolute agent socket missing", i+1)
		}
		if r.Index < 1 || r.Index > replicasMax || seen[r.Index] {
			return fmt.Errorf("replica %s: index %d is out of range 1..%d or not unique", r.Name, r.Index, replicasMax)
		}
		seen[r.Index] = true
	}
	return nil
}

// Save writes s to s.Dir/cluster.json atomically: a reader (or a crash)
// sees the old file or the new one, never a partial one.
func (s *State) Save() error {
	s.Format = stateFormat
	s.Updated = time.Now().UTC().Truncate(time.Second)
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	return writeFileAtomic(StatePath(s.Dir), b)
}

// writeFileAtomic writes data to path, mode 0644, through a temporary file
// in the same directory that is synced and renamed over path: a reader (or
// a crash) sees the old file or the new one, never a partial one.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteEndpoints prints how to reach the cluster: each replica's
// PostgreSQL as a connection URI and a psql command line.
func (s *State) WriteEndpoints(w io.Writer) {
	fmt.Fprintf(w, "\nCluster %s is up: mode %s, %d replicas, certifier %s.\n", s.Dir, s.Mode, len(s.Replicas), s.CertifierAddr())
	fmt.Fprintln(w, "Connect to any replica: each is a PostgreSQL 15 server with the tashkent extension, beside its agent:")
	for _, r := range s.Replicas {
		line := fmt.Sprintf("  %-10s %-45s %s", r.Name, r.URI(), r.PsqlCommand())
		if slices.Contains(s.Halted, r.Name) {
			line += "   HALTED: refuses clients until rebuilt"
		}
		fmt.Fprintln(w, line)
	}
	if s.Certifier.MetricsPort != 0 {
		fmt.Fprintf(w, "Dashboard: http://%s/ (served by every agent and certifier on its metrics port)\n", hostPort(s.Certifier.MetricsPort))
	}
	fmt.Fprintf(w, "Status: tashkent status --data-dir %s    Stop: tashkent down --data-dir %s\n", s.Dir, s.Dir)
	s.writeCertifierTLS(w)
	if s.TrustDDLRoles {
		fmt.Fprintln(w, "DDL: roles that are not superusers may run DDL (--trust-ddl-roles); the other replicas run it as a superuser.")
	}
}
