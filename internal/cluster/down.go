package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
)

const (
	// agentStopGrace is how long an agent gets after SIGTERM before
	// SIGKILL: it closes the gate and ends its backends' sessions.
	agentStopGrace = 15 * time.Second
	// certifierStopGrace is how long the certifier gets to close its log.
	certifierStopGrace = 20 * time.Second
	// postgresStopTimeout bounds a fast shutdown (checkpoint included)
	// before pgserver kills the server.
	postgresStopTimeout = 60 * time.Second
)

// Stopped reports what Down did with one process.
type Stopped struct {
	Component string `json:"component"` // "supervisor", "agent", "certifier" or "postgres"
	Name      string `json:"name"`      // replica name, or "certifier"
	PID       int    `json:"pid"`
	// Outcome is "stopped", "killed" (did not exit in time), "not running",
	// or "left alone" (the PID now belongs to another process).
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

func (s Stopped) String() string {
	what := s.Component
	if s.Component != "certifier" && s.Component != "supervisor" {
		what = s.Name + " " + s.Component
	}
	out := fmt.Sprintf("%-20s %s", what, s.Outcome)
	if s.PID != 0 {
		out += fmt.Sprintf(" (pid %d)", s.PID)
	}
	if s.Detail != "" {
		out += ": " + s.Detail
	}
	return out
}

// Down stops every process recorded in dir/cluster.json: the supervisor
// first (so that it rebuilds nothing meanwhile), then the agents (each
// closes its replica's gate, so that no client commits while the rest goes
// away), then the certifiers, then PostgreSQL (fast shutdown). Each PID is
// checked against its command line before it is signalled. Down is idempotent: stopped processes are
// recorded with PID 0, and running Down again reports them not running.
func Down(ctx context.Context, dir string) ([]Stopped, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := Load(dir)
	if err != nil {
		return nil, err
	}
	st.Dir = dir
	stoppedSupervisor, serr := stopSupervisor(ctx, st)
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, errors.Join(serr, err)
	}
	defer unlock()
	if st, err = Load(dir); err != nil { // what the supervisor changed before it stopped
		return nil, err
	}
	st.Dir = dir

	var (
		mu   sync.Mutex
		out  []Stopped
		errs []error
	)
	add := func(s Stopped, err error) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name+" "+s.Component, err))
		}
	}
	eachReplica := func(f func(r *Replica)) {
		var wg sync.WaitGroup
		for _, r := range st.Replicas {
			wg.Go(func() { f(r) })
		}
		wg.Wait()
	}

	if st.Supervisor != nil {
		add(stoppedSupervisor, serr)
		st.Supervisor.PID = 0
	}
	eachReplica(func(r *Replica) {
		add(stopTashkent(ctx, "agent", r.Name, agentIdentity(&r.Agent), &r.Agent.PID, agentStopGrace))
	})
	for _, c := range st.CertifierMembers() {
		name := "certifier"
		if c.ID != 0 {
			name = fmt.Sprintf("certifier %d", c.ID)
		}
		add(stopTashkent(ctx, "certifier", name, certifierIdentity(c), &c.PID, certifierStopGrace))
	}
	eachReplica(func(r *Replica) { add(stopPostgres(ctx, r)) })

	if err := st.Save(); err != nil {
		errs = append(errs, err)
	}
	return sortStopped(out, st), errors.Join(errs...)
}

// stopTashkent stops a recorded certifier or agent and clears its PID.
func stopTashkent(ctx context.Context, component, name string, id procIdentity, pid *int, grace time.Duration) (Stopped, error) {
	s := Stopped{Component: component, Name: name, PID: *pid}
	if *pid == 0 {
		s.Outcome = "not running"
		return s, nil
	}
	killed, err := stopProcess(ctx, id, *pid, grace)
	switch {
	case errors.Is(err, errNotRunning):
		s.Outcome = "not running"
	case errors.Is(err, errNotOurs):
		// Alive but not ours: the recorded process died and its PID was
		// reused. Forget it, touch nothing.
		s.Outcome, s.Detail = "left alone", err.Error()
	case err != nil:
		s.Outcome, s.Detail = "killed", err.Error()
		return s, err
	case killed:
		s.Outcome, s.Detail = "killed", fmt.Sprintf("did not exit within %s of SIGTERM", grace)
	default:
		s.Outcome = "stopped"
	}
	*pid = 0
	return s, nil
}

// stopPostgres stops the replica's postmaster: the recorded PID, or, when
// that is gone, the postmaster postmaster.pid names if it is a live
// postgres serving this data directory (a server `up` adopted).
func stopPostgres(ctx context.Context, r *Replica) (Stopped, error) {
	pg := &r.Postgres
	s := Stopped{Component: "postgres", Name: r.Name, PID: pg.PID}
	pid := pg.PID
	if pid == 0 || pgserver.IsPostgres(pid, pg.DataDir) != nil {
		if p, ok := pgserver.Running(pg.DataDir); ok {
			if pid != 0 {
				s.Detail = fmt.Sprintf("recorded pid %d is gone; stopped pid %d from postmaster.pid", pid, p)
			}
			pid, s.PID = p, p
		} else {
			if pid != 0 && process.Alive(pid) {
				s.Outcome, s.Detail = "left alone", fmt.Sprintf("pid %d is no longer a postgres for %s", pid, pg.DataDir)
			} else {
				s.Outcome = "not running"
			}
			pg.PID = 0
			return s, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, postgresStopTimeout)
	defer cancel()
	if err := pgserver.StopPID(ctx, pg.DataDir, pid); err != nil {
		s.Outcome = "failed"
		s.Detail = err.Error()
		return s, err
	}
	s.Outcome = "stopped"
	pg.PID = 0
	return s, nil
}

// sortStopped orders the report as the processes were stopped: agents,
// certifiers, PostgreSQL servers, replicas in order.
func sortStopped(out []Stopped, st *State) []Stopped {
	rank := map[string]int{"supervisor": 0, "agent": 1, "certifier": 2, "postgres": 3}
	idx := map[string]int{}
	for i, r := range st.Replicas {
		idx[r.Name] = i
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if rank[a.Component] != rank[b.Component] {
			return rank[a.Component] < rank[b.Component]
		}
		return idx[a.Name] < idx[b.Name]
	})
	return out
}
