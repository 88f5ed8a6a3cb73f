package cluster

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/tashkent-db/tashkent/internal/configfile"
	"github.com/tashkent-db/tashkent/internal/grpctls"
)

// Up starts every certifier and agent from a config file in its own
// directory (`tashkent agent --config DIR/replicaK/agent.toml`), the same
// kind of file a deployment gives them (docs/OPERATIONS.md, deploy/):
// keys are the flag names. Up writes the file each time it starts the
// process, from cluster.json, so an edit to it lasts until the next start
// by up; a port picked again after a lost race is in the rewritten file.

const (
	agentConfigName     = "agent.toml"
	certifierConfigName = "certifier.toml"
)

// setConfigPaths records where each certifier's and agent's config file
// lives: in the certifier's data directory, and in the replica's directory
// beside the agent's log. A cluster.json that has them keeps them.
func (s *State) setConfigPaths() {
	for _, c := range s.CertifierMembers() {
		if c.Config == "" {
			c.Config = filepath.Join(c.DataDir, certifierConfigName)
		}
	}
	for _, r := range s.Replicas {
		if r.Agent.Config == "" {
			r.Agent.Config = filepath.Join(r.Dir, agentConfigName)
		}
	}
}

// startFromConfig writes the config file of a process that up starts and
// returns its command line: the subcommand and --config.
func startFromConfig(sub, path, what string, settings []configfile.Setting) ([]string, error) {
	header := fmt.Sprintf("%s, written by `tashkent up` from cluster.json each time it starts it: an edit lasts until then.\n"+
		"The keys are the flags of `tashkent %s`; `tashkent %s --config %s --print-config` shows every one.", what, sub, sub, path)
	var b bytes.Buffer
	if err := configfile.Encode(&b, header, settings); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := writeFileAtomic(path, b.Bytes()); err != nil {
		return nil, err
	}
	return []string{sub, "--config", path}, nil
}

// certifierCommand writes certifier c's config file and returns its
// command line: the config file, then the cluster's CertifierArgs, which
// override it.
func (u *upper) certifierCommand(c *Certifier, what string) ([]string, error) {
	args, err := startFromConfig("certifier", c.Config, what, u.certifierSettings(c))
	if err != nil {
		return nil, err
	}
	return append(args, u.st.CertifierArgs...), nil
}

// certifierSettings is the config of a single certifier or of a member of
// the group. A single certifier runs on the replicas' host as one of them
// (shares-host: one Go thread on two CPUs); in mode ed with two
// (EDCertifierThreads). A group member keeps every
// CPU: with one thread, the leader of a group copying a 160 MiB streamed
// writeset to two followers peaked at 142-148 MiB of its 160 MiB bound
// (against 106 with two), and its followers fell behind the copy more
// often.
func (u *upper) certifierSettings(c *Certifier) []configfile.Setting {
	s := []configfile.Setting{
		{Key: "data-dir", Value: c.DataDir},
		{Key: "listen", Value: hostPort(c.Port)},
		{Key: "metrics-listen", Value: hostPort(c.MetricsPort)},
	}
	if c.ID == 0 {
		s = append(s, configfile.Setting{Key: "shares-host", Value: true})
		if u.st.Mode == ModeED {
			s = append(s, configfile.Setting{Key: "max-procs", Value: EDCertifierThreads})
		}
	} else {
		s = append(s,
			configfile.Setting{Key: "id", Value: c.ID},
			configfile.Setting{Key: "peers", Value: u.st.certifierPeers()})
	}
	return append(s, tlsSettings(u.st.certifierTLSFiles(c.tlsName()))...)
}

// EDCertifierThreads are the Go threads of a single certifier in mode ed
// (tashkent up, and the systems of tashkent bench).
// It answers a commit as it decides it (early delivery); with one thread,
// a log flush holds the thread, and a commit that arrives during it is
// decided, and a fast one acknowledged, only once the flush returns:
// bench mixed --fast-share 100, one client, a 2 ms flush: 2.5 ms per fast
// commit with one thread, 0.29 ms with two.
const EDCertifierThreads = 2

// agentSettings is the config of replica r's agent; the replica's index
// (members.go) offsets its sequences.
func (u *upper) agentSettings(r *Replica) []configfile.Setting {
	return append([]configfile.Setting{
		{Key: "name", Value: r.Name},
		{Key: "socket", Value: r.Agent.Socket},
		{Key: "postgres", Value: r.AgentPostgres()},
		{Key: "database", Value: database},
		{Key: "certifier", Value: u.st.CertifierAddr()},
		{Key: "mode", Value: string(u.st.Mode)},
		{Key: "metrics", Value: hostPort(r.Agent.MetricsPort)},
		{Key: "replica-index", Value: r.Index},
		{Key: "trust-ddl-roles", Value: u.st.TrustDDLRoles},
	}, tlsSettings(u.st.certifierTLSFiles(r.Name))...)
}

// tlsSettings are the certifier TLS files' keys (none for plaintext).
func tlsSettings(f grpctls.Files) []configfile.Setting {
	if !f.Enabled() {
		return nil
	}
	return []configfile.Setting{
		{Key: grpctls.FlagCA, Value: f.CA},
		{Key: grpctls.FlagCert, Value: f.Cert},
		{Key: grpctls.FlagKey, Value: f.Key},
	}
}
