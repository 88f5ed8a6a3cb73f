package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/tashkent-db/tashkent/internal/configfile"
	"github.com/tashkent-db/tashkent/internal/process"
)

// The supervisor (`tashkent supervise --data-dir DIR`) rebuilds a replica
// whose agent halted (it stopped applying the cluster's commits and must
// be rebuilt): the agent cannot do it, as it would copy a donor's data
// directory over its own running PostgreSQL, and it knows nothing of the
// cluster directory. `up` starts the supervisor detached, after the
// agents, when the cluster records auto_rebuild (the default for a new
// cluster; `up --auto-rebuild=false` turns it off), and records it in
// cluster.json; `down` stops it first.
//
// Every interval it reads cluster.json and asks each running agent for
// /healthz. An agent that says "halted" has its replica rebuilt as
// `tashkent replica rebuild` would (replica_rebuild.go), under the cluster
// lock: when another command holds the lock, the supervisor tries again at
// the next interval. The rebuild is written to the supervisor's log, to
// the replica's agent.log, to transfer.json while it runs (`status` shows
// it) and to the replica's "rebuilt" record in cluster.json. A replica
// rebuilt automatically is not rebuilt again automatically for
// autoRebuildDelayMin, doubling up to autoRebuildDelayMax, so that a
// replica that halts again on every copy does not keep its donor copying.
// A replica whose agent halted on a resource error (SQLSTATE class 53 or
// 58 in its reason: disk full, out of memory, I/O) is not rebuilt: a copy
// needs the same disk; the log says so once per halt.
//
// It supervises nothing else: an agent, a PostgreSQL or a certifier that
// exits stays down until `tashkent up` runs again.

const (
	// SuperviseIntervalDefault is how often the supervisor looks at the
	// agents.
	SuperviseIntervalDefault = 2 * time.Second
	// supervisorLogName is the supervisor's log, in the cluster directory.
	supervisorLogName = "supervisor.log"
	// supervisorStopGrace is how long the supervisor gets after SIGTERM:
	// it may be stopping a copy and starting a replica again.
	supervisorStopGrace = 30 * time.Second
	// autoRebuildDelayMin and autoRebuildDelayMax bound the wait between
	// two automatic rebuilds of one replica.
	autoRebuildDelayMin = time.Minute
	autoRebuildDelayMax = time.Hour
	// supervisorReadyLine is logged once the supervisor runs; up waits for
	// it.
	supervisorReadyLine = "supervisor ready"
	// supervisorConfigName is its config file, in the cluster directory.
	supervisorConfigName = "supervisor.toml"
)

// Supervisor records the supervisor process.
type Supervisor struct {
	PID int    `json:"pid"`
	Log string `json:"log"`
	// Config is the file it starts from (tashkent supervise --config).
	Config string `json:"config,omitempty"`
}

func supervisorIdentity(dir string) procIdentity {
	return procIdentity{sub: "supervise", names: []flagValue{
		{"--config", filepath.Join(dir, supervisorConfigName)}, {"--data-dir", dir}}}
}

// superviseIfAsked (up) adopts or starts the supervisor when the cluster
// records auto_rebuild, and stops a running one when it does not.
func (u *upper) superviseIfAsked(ctx context.Context) error {
	dir := u.st.Dir
	sup := u.st.Supervisor
	if sup == nil {
		sup = &Supervisor{Log: filepath.Join(dir, supervisorLogName)}
	}
	running := sup.PID != 0 && supervisorIdentity(dir).check(sup.PID) == nil
	switch {
	case !u.st.AutoRebuild && running:
		s, err := stopTashkent(ctx, "supervisor", "supervisor", supervisorIdentity(dir), &sup.PID, supervisorStopGrace)
		u.progress("%s (automatic rebuild is off)", s)
		return errors.Join(err, u.save())
	case !u.st.AutoRebuild:
		return nil
	case running:
		u.progress("supervisor: already running (pid %d)", sup.PID)
		return nil
	}
	u.mu.Lock()
	u.st.Supervisor = sup
	u.mu.Unlock()
	sup.Config = filepath.Join(dir, supervisorConfigName)
	err := u.startDetached(ctx, "supervisor", sup.Log, nil,
		func() ([]string, error) {
			return startFromConfig("supervise", sup.Config, "The supervisor", []configfile.Setting{{Key: "data-dir", Value: dir}})
		},
		func(pid int) { sup.PID = pid },
		func(_ context.Context, pid int) error { return supervisorReady(sup.Log, pid) })
	if err != nil {
		return err
	}
	u.progress("supervisor: started (pid %d, log %s); it rebuilds a replica whose agent halts", sup.PID, sup.Log)
	return nil
}

// supervisorReady checks that the supervisor pid has logged that it runs.
func supervisorReady(logPath string, pid int) error {
	for _, line := range strings.Split(process.LogTail(logPath, 0, logTailBytes), "\n") {
		if strings.Contains(line, supervisorReadyLine) && strings.Contains(line, fmt.Sprintf("pid=%d ", pid)) {
			return nil
		}
	}
	return fmt.Errorf("the supervisor (pid %d) has not said it runs yet", pid)
}

// stopSupervisor (down) stops the cluster's supervisor before anything
// else, without the cluster lock: a supervisor rebuilding a replica holds
// it, and gives it up when it stops.
func stopSupervisor(ctx context.Context, st *State) (Stopped, error) {
	sup := st.Supervisor
	if sup == nil {
		return Stopped{}, nil
	}
	pid := sup.PID
	return stopTashkent(ctx, "supervisor", "supervisor", supervisorIdentity(st.Dir), &pid, supervisorStopGrace)
}

// SuperviseOptions configures Supervise.
type SuperviseOptions struct {
	Dir      string
	Interval time.Duration // 0: SuperviseIntervalDefault
	// Out receives the progress of rebuilds; Log the supervisor's events.
	Out io.Writer
	Log *slog.Logger
}

// Supervise runs the supervisor of the cluster in o.Dir until ctx ends.
func Supervise(ctx context.Context, o SuperviseOptions) error {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	if _, err := Load(dir); err != nil {
		return err
	}
	if o.Interval <= 0 {
		o.Interval = SuperviseIntervalDefault
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Dir = dir
	s := &supervisor{o: o, waits: map[int]*rebuildWait{}}
	o.Log.Info(supervisorReadyLine, "pid", os.Getpid(), "dir", dir, "interval", o.Interval)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			o.Log.Info("supervisor stops")
			return nil
		case <-tick.C:
		}
		s.look(ctx)
	}
}

type supervisor struct {
	o     SuperviseOptions
	waits map[int]*rebuildWait // by replica index
}

// look rebuilds the replicas whose agents halted.
func (s *supervisor) look(ctx context.Context) {
	st, err := Load(s.o.Dir)
	if err != nil {
		s.o.Log.Warn("cannot read the cluster", "err", err)
		return
	}
	for _, r := range st.Replicas {
		why, halted := agentHalted(ctx, r)
		if !halted || ctx.Err() != nil {
			continue
		}
		w := s.wait(r.Index)
		if code, ok := resourceError(why); ok {
			if w.toldResource != why {
				s.o.Log.Error("a replica's agent halted on a resource error; the supervisor does not rebuild it: a copy needs "+
					"the same disk and memory. Free the resource, then restart the agent (stop it; tashkent up starts it) "+
					"or rebuild the replica (tashkent replica rebuild --data-dir DIR K)",
					"replica", r.Name, "sqlstate", code, "agent", why)
				w.toldResource = why
			}
			continue
		}
		if left := time.Until(w.next); left > 0 {
			if !w.told {
				s.o.Log.Warn("a replica's agent halted again soon after an automatic rebuild; the next rebuild waits",
					"replica", r.Name, "agent", why, "rebuild_in", left.Round(time.Second))
				w.told = true
			}
			continue
		}
		s.rebuild(ctx, r.Index)
	}
}

// agentHalted reports whether r's agent runs and says it halted, and why.
func agentHalted(ctx context.Context, r *Replica) (string, bool) {
	if r.Agent.PID == 0 || agentIdentity(&r.Agent).check(r.Agent.PID) != nil {
		return "", false
	}
	return haltedHealth(AgentHealth(ctx, r.Agent.MetricsPort))
}

// rebuild rebuilds replica k under the cluster lock, if it still halted.
func (s *supervisor) rebuild(ctx context.Context, k int) {
	w := s.wait(k)
	unlock, err := lockDir(s.o.Dir)
	if err != nil {
		if !w.told {
			s.o.Log.Info("a replica's agent halted; another command holds the cluster, the rebuild waits for it", "replica", replicaName(k), "err", err)
			w.told = true
		}
		return
	}
	defer unlock()
	st, err := Load(s.o.Dir)
	if err != nil {
		s.o.Log.Warn("cannot read the cluster", "err", err)
		return
	}
	st.Dir = s.o.Dir
	st.setConfigPaths()
	r := st.ReplicaByIndex(k)
	if r == nil {
		return
	}
	why, halted := agentHalted(ctx, r)
	if !halted {
		return
	}
	s.o.Log.Warn("a replica's agent halted: rebuilding the replica from a donor", "replica", r.Name, "agent", why)
	u := &upper{st: st, o: Options{Dir: st.Dir, Binary: st.Binary, Progress: s.o.Out, ReadyTimeout: catchUpTimeout}, portsUsed: map[int]bool{}}
	start := time.Now()
	err = u.rebuildReplica(ctx, r, rebuildRequest{reason: "the agent halted: " + why, automatic: true})
	w.after(time.Now())
	if err != nil {
		s.o.Log.Error("automatic rebuild failed", "replica", r.Name, "err", err, "next_attempt_in", time.Until(w.next).Round(time.Second))
		return
	}
	s.o.Log.Info("replica rebuilt automatically; it serves", "replica", r.Name, "donor", r.Rebuilt.Donor, "took", time.Since(start).Round(time.Millisecond))
}

func (s *supervisor) wait(k int) *rebuildWait {
	w := s.waits[k]
	if w == nil {
		w = &rebuildWait{}
		s.waits[k] = w
	}
	return w
}

// rebuildWait spaces the automatic rebuilds of one replica: the first
// runs at once, each later one waits twice as long as the one before,
// from autoRebuildDelayMin to autoRebuildDelayMax.
type rebuildWait struct {
	next  time.Time
	delay time.Duration
	// told: the log already says why this replica's rebuild waits.
	told bool
	// toldResource is the halt the log already says is not rebuilt.
	toldResource string
}

// haltSQLSTATE finds the SQLSTATE in an agent's halt reason (a database
// error's text ends with it).
var haltSQLSTATE = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)

// resourceError reports whether an agent halted on a database error of
// class 53 (insufficient resources: disk full, out of memory) or 58
// (system error: I/O, a missing file), and its SQLSTATE. A copy from a
// donor would need the same disk, or fail on it again.
func resourceError(why string) (string, bool) {
	for _, m := range haltSQLSTATE.FindAllStringSubmatch(why, -1) {
		if code := m[1]; strings.HasPrefix(code, "53") || strings.HasPrefix(code, "58") {
			return code, true
		}
	}
	return "", false
}

// after records a rebuild that ended at now.
func (w *rebuildWait) after(now time.Time) {
	switch {
	case w.delay == 0:
		w.delay = autoRebuildDelayMin
	case w.delay < autoRebuildDelayMax:
		w.delay = min(2*w.delay, autoRebuildDelayMax)
	}
	w.next = now.Add(w.delay)
	w.told = false
}
