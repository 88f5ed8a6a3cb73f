package cluster

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// statusTimeout bounds each probe of Status (one connection, one query).
const statusTimeout = 3 * time.Second

// Status is what `tashkent status` reports.
type Status struct {
	Dir       string          `json:"dir"`
	Mode      Mode            `json:"mode"`
	Updated   time.Time       `json:"updated"`
	Healthy   bool            `json:"healthy"` // every process runs and answers
	Certifier CertifierStatus `json:"certifier"`
	Replicas  []ReplicaStatus `json:"replicas"`
	// Dashboards are the URLs of the dashboard page: every running
	// certifier member and agent serves it on its metrics port.
	Dashboards []string `json:"dashboards"`
	// Joining are replicas being added (or whose add was interrupted),
	// not part of the cluster yet.
	Joining []TransferStatus `json:"joining,omitempty"`
	// Supervisor is the process that rebuilds a halted replica (nil when
	// the cluster never ran one); AutoRebuild whether it should run.
	Supervisor  *ProcStatus `json:"supervisor,omitempty"`
	AutoRebuild bool        `json:"auto_rebuild"`
}

// ProcStatus is one recorded process.
type ProcStatus struct {
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	Port    int    `json:"port"`
	Log     string `json:"log"`
	Detail  string `json:"detail,omitempty"` // why it does not count as running
}

// CertifierStatus is the certifier process and its Status RPC.
type CertifierStatus struct {
	Process                 ProcStatus `json:"process"`
	Addr                    string     `json:"addr"`
	Reachable               bool       `json:"reachable"`
	Version                 uint64     `json:"version"`
	DurableVersion          uint64     `json:"durable_version"`
	LowWaterMark            uint64     `json:"low_water_mark"`
	EntriesPerFsync         float64    `json:"entries_per_fsync"`
	AbortRate               float64    `json:"abort_rate"`
	Certifications          uint64     `json:"certifications"`
	Aborts                  uint64     `json:"aborts"`
	CertificationsPerSecond float64    `json:"certifications_per_second"`
	Error                   string     `json:"error,omitempty"`
	// Log is the certifier's log and its retention (in a group, the
	// leader's).
	Log *LogStatus `json:"log,omitempty"`
	// Members of a certifier group (empty for a single certifier).
	Members []MemberStatus `json:"members,omitempty"`
}

// LogStatus is a certifier's log and what its retention keeps it for
// (certifier.RetentionPolicy; docs/OPERATIONS.md).
type LogStatus struct {
	Bytes        uint64 `json:"bytes"`
	FirstVersion uint64 `json:"first_version"`
	// KeepFrom is the oldest version the last retention decision keeps,
	// LimitedBy what set it ("replica", "window", "bytes", "versions",
	// "durable", "none"; empty before the first decision) and HeldBy the
	// replica when it is "replica".
	KeepFrom  uint64 `json:"keep_from"`
	LimitedBy string `json:"limited_by,omitempty"`
	HeldBy    string `json:"held_by,omitempty"`
	// BehindLog are the replicas whose last reported version is below
	// what the log holds: they need a state transfer.
	BehindLog []string `json:"behind_log,omitempty"`
}

// MemberStatus is one member of a certifier group.
type MemberStatus struct {
	ID             int        `json:"id"`
	Process        ProcStatus `json:"process"`
	Addr           string     `json:"addr"`
	Reachable      bool       `json:"reachable"`
	Role           string     `json:"role"`
	Term           uint64     `json:"term"`
	RaftIndex      uint64     `json:"raft_index"`
	AppliedIndex   uint64     `json:"applied_index"`
	DurableVersion uint64     `json:"durable_version"`
	Error          string     `json:"error,omitempty"`
}

// ReplicaStatus is one replica.
type ReplicaStatus struct {
	Name     string     `json:"name"`
	Index    int        `json:"index"`
	URI      string     `json:"uri"`
	Psql     string     `json:"psql"`
	Postgres ProcStatus `json:"postgres"`
	// Agent is the replica's agent; its Port is the metrics port, and
	// AgentHealth what its /healthz says (its state and why).
	Agent       ProcStatus `json:"agent"`
	AgentHealth string     `json:"agent_health,omitempty"`
	// Version is the replica's version read from its database
	// (tashkent.committed_version(); null when it cannot be read); Lag is
	// the certifier's durable version minus it.
	Version *uint64 `json:"version"`
	Lag     *int64  `json:"lag"`
	// Admitting is the replica's admission gate (null when it cannot be
	// read): whether it lets clients in, and if not, why (GateReason).
	Admitting  *bool  `json:"admitting"`
	GateReason string `json:"gate_reason,omitempty"`
	Error      string `json:"error,omitempty"`
	// Transfer is a state transfer onto this replica (a rebuild) in
	// progress or interrupted; Rebuilt its last rebuild.
	Transfer *TransferStatus `json:"transfer,omitempty"`
	Rebuilt  *Rebuilt        `json:"rebuilt,omitempty"`
}

// GetStatus probes every process recorded in dir/cluster.json. It fails only
// when there is no readable cluster.json; everything else is reported in
// the Status.
func GetStatus(ctx context.Context, dir string) (*Status, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := Load(dir)
	if err != nil {
		return nil, err
	}
	s := &Status{Dir: dir, Mode: st.Mode, Updated: st.Updated, Replicas: make([]ReplicaStatus, len(st.Replicas))}

	c := &s.Certifier
	c.Addr = st.CertifierAddr()
	c.Process = ProcStatus{PID: st.Certifier.PID, Port: st.Certifier.Port, Log: st.Certifier.Log}
	c.Process.Running, c.Process.Detail = tashkentRunning(certifierIdentity(&st.Certifier), st.Certifier.PID)
	if c.Process.Running {
		cctx, cancel := context.WithTimeout(ctx, statusTimeout)
		rep, err := st.QueryCertifier(cctx, c.Addr)
		cancel()
		if err != nil {
			c.Error = err.Error()
		} else {
			c.Reachable = true
			c.Version, c.DurableVersion, c.LowWaterMark = rep.Version, rep.DurableVersion, rep.LowWaterMark
			c.EntriesPerFsync, c.AbortRate = rep.EntriesPerFsync, rep.AbortRate
			c.Certifications, c.Aborts, c.CertificationsPerSecond = rep.Certifications, rep.Aborts, rep.CertificationsPerSecond
			c.Log = logStatus(rep)
		}
	}

	if len(st.MoreCertifiers) > 0 {
		groupStatus(ctx, st, c)
	}

	var wg sync.WaitGroup
	for i, r := range st.Replicas {
		wg.Go(func() { s.Replicas[i] = replicaStatus(ctx, r, c) })
	}
	wg.Wait()

	s.Dashboards = dashboards(st, s)
	s.Healthy = c.Process.Running && c.Reachable
	for _, r := range s.Replicas {
		s.Healthy = s.Healthy && r.Postgres.Running && r.Agent.Running && r.Version != nil && r.Admitting != nil && *r.Admitting
	}
	membershipStatus(st, s)
	return s, nil
}

// dashboards lists the dashboard URL of every running certifier member,
// then of every running agent.
func dashboards(st *State, s *Status) []string {
	var out []string
	url := func(port int) string { return "http://" + hostPort(port) + "/" }
	running := map[int]bool{s.Certifier.Process.Port: s.Certifier.Process.Running}
	for _, m := range s.Certifier.Members {
		running[m.Process.Port] = m.Process.Running
	}
	for _, c := range st.CertifierMembers() {
		if running[c.Port] && c.MetricsPort != 0 {
			out = append(out, url(c.MetricsPort))
		}
	}
	for _, r := range s.Replicas {
		if r.Agent.Running && r.Agent.Port != 0 {
			out = append(out, url(r.Agent.Port))
		}
	}
	return out
}

func replicaStatus(ctx context.Context, r *Replica, c *CertifierStatus) ReplicaStatus {
	rs := ReplicaStatus{Name: r.Name, URI: r.URI(), Psql: r.PsqlCommand()}
	rs.Postgres = ProcStatus{PID: r.Postgres.PID, Port: r.Postgres.Port, Log: r.Postgres.Log}
	if r.Postgres.PID == 0 {
		rs.Postgres.Detail = "not started"
	} else if err := pgserver.IsPostgres(r.Postgres.PID, r.Postgres.DataDir); err != nil {
		rs.Postgres.Detail = err.Error()
	} else {
		rs.Postgres.Running = true
	}
	rs.Agent = ProcStatus{PID: r.Agent.PID, Port: r.Agent.MetricsPort, Log: r.Agent.Log}
	rs.Agent.Running, rs.Agent.Detail = tashkentRunning(agentIdentity(&r.Agent), r.Agent.PID)
	if rs.Agent.Running {
		health, err := AgentHealth(ctx, r.Agent.MetricsPort)
		rs.AgentHealth = health
		if err != nil && health == "" {
			rs.AgentHealth = err.Error()
		}
	}
	if !rs.Postgres.Running {
		return rs
	}
	g, err := ReadGate(ctx, r.DSN())
	if err != nil {
		rs.Error = err.Error()
		return rs
	}
	rs.Version, rs.Admitting, rs.GateReason = &g.Version, &g.Admitting, g.Reason
	if c.Reachable {
		lag := int64(c.DurableVersion) - int64(g.Version)
		rs.Lag = &lag
	}
	return rs
}

func tashkentRunning(id procIdentity, pid int) (bool, string) {
	if pid == 0 {
		return false, "not started"
	}
	if err := id.check(pid); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// ReadVersion reads the replica's version on conn
// (tashkent.committed_version()); a database the agent has not equipped
// yet (no extension) holds version 0.
func ReadVersion(ctx context.Context, conn *pgx.Conn) (uint64, error) {
	v, err := replica.ReadVersion(ctx, conn)
	if pgcode.MissingObject(err) {
		return 0, nil
	}
	return v, err
}

// WriteTable prints s for people.
func (s *Status) WriteTable(w io.Writer) {
	health := "healthy"
	if !s.Healthy {
		health = "NOT healthy"
	}
	fmt.Fprintf(w, "cluster %s  mode %s  %s\n\n", s.Dir, s.Mode, health)

	c := s.Certifier
	if len(c.Members) > 0 {
		writeMembers(w, c)
	} else {
		fmt.Fprintf(w, "certifier %s  %s\n", c.Addr, procWord(c.Process))
	}
	switch {
	case c.Reachable:
		rate := "-"
		if c.Certifications > 0 {
			rate = fmt.Sprintf("%.2f%% (%d of %d)", 100*c.AbortRate, c.Aborts, c.Certifications)
		}
		fmt.Fprintf(w, "  version %d  durable version %d  low-water mark %d  entries/fsync %.1f  abort rate %s  %.0f certifications/s\n",
			c.Version, c.DurableVersion, c.LowWaterMark, c.EntriesPerFsync, rate, c.CertificationsPerSecond)
		if c.Log != nil {
			fmt.Fprintf(w, "  %s\n", c.Log.line())
		}
	case c.Error != "":
		fmt.Fprintf(w, "  status: %s\n", c.Error)
	}
	s.writeSupervisor(w)
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tVERSION\tLAG\tGATE\tPOSTGRES\tAGENT\tURI")
	for _, r := range s.Replicas {
		ver, lag, gate := "?", "?", "?"
		if r.Version != nil {
			ver = fmt.Sprint(*r.Version)
		}
		if r.Lag != nil {
			lag = fmt.Sprint(*r.Lag)
		}
		if r.Admitting != nil {
			gate = map[bool]string{true: "open", false: "CLOSED"}[*r.Admitting]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, ver, lag, gate,
			procWord(r.Postgres), procWord(r.Agent), r.URI)
	}
	tw.Flush()
	notes := s.membershipNotes()
	if l := s.Certifier.Log; l != nil {
		for _, name := range l.BehindLog {
			notes = append(notes, fmt.Sprintf("%s: needs versions the certifier's log no longer holds (it starts at version %d): "+
				"it needs a state transfer: once its agent runs (`tashkent up`), the supervisor rebuilds it from a peer",
				name, l.FirstVersion))
		}
	}
	for _, r := range s.Replicas {
		if r.Error != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", r.Name, r.Error))
		}
		if r.Admitting != nil && !*r.Admitting {
			notes = append(notes, fmt.Sprintf("%s: clients are refused (57P03): %s", r.Name, r.GateReason))
		}
		if r.Agent.Running && r.AgentHealth != "" && !strings.HasPrefix(r.AgentHealth, "serving") {
			notes = append(notes, fmt.Sprintf("%s: agent: %s", r.Name, r.AgentHealth))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
	}
	if len(s.Replicas) > 0 {
		fmt.Fprintf(w, "\npsql: %s\n", s.Replicas[0].Psql)
	}
	if len(s.Dashboards) > 0 {
		fmt.Fprintf(w, "dashboard: %s", s.Dashboards[0])
		if len(s.Dashboards) > 1 {
			fmt.Fprintf(w, "  (the same page on %s)", strings.Join(s.Dashboards[1:], " "))
		}
		fmt.Fprintln(w)
	}
}

func procWord(p ProcStatus) string {
	switch {
	case p.Running:
		return fmt.Sprintf("pid %d :%d up", p.PID, p.Port)
	case p.PID == 0:
		return "stopped"
	default:
		return fmt.Sprintf("pid %d DOWN", p.PID)
	}
}
