package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// The agent of each replica (`tashkent agent`, internal/agent): started
// once its PostgreSQL and the certifier run, ready once it serves the
// replica. A replica serves clients when its agent has caught up with the
// cluster and opened the extension's admission gate (extension/src/admit.c):
// until then PostgreSQL refuses new connections with 57P03, except the
// agent's own role (tashkent.recovery_roles).

const (
	// healthTimeout bounds one request to an agent's /healthz.
	healthTimeout = 2 * time.Second
	// adoptedAgentPoll is the pause between readiness checks of an agent
	// that was already running.
	adoptedAgentPoll = 100 * time.Millisecond
)

// startAllAgents adopts or starts every replica's agent. An agent that
// halted is left running, halted (it keeps its replica's clients out), and
// noted for reportHalted: up goes on, so that the supervisor starts and
// rebuilds the replica.
func (u *upper) startAllAgents(ctx context.Context) error {
	return u.parallel(func(r *Replica) error {
		err := u.startAgent(ctx, r)
		var h *errAgentHalted
		if errors.As(err, &h) {
			u.mu.Lock()
			u.halted = append(u.halted, h)
			u.mu.Unlock()
			return nil
		}
		return err
	})
}

// errAgentHalted says that a replica's agent runs but halted: it stopped
// applying the cluster's commits, and the replica must be rebuilt.
type errAgentHalted struct {
	replica *Replica
	why     string
}

func (e *errAgentHalted) Error() string {
	return fmt.Sprintf("%s: its agent (pid %d) halted: %s", e.replica.Name, e.replica.Agent.PID, e.why)
}

// startAgent adopts the replica's running agent, waiting until it serves,
// or starts one. An agent that halted is left running and returned as
// *errAgentHalted.
func (u *upper) startAgent(ctx context.Context, r *Replica) error {
	a := &r.Agent
	u.mu.Lock()
	pid := a.PID
	u.mu.Unlock()
	if pid != 0 && agentIdentity(a).check(pid) == nil {
		if err := u.awaitAdoptedAgent(ctx, r, pid); err != nil {
			return err
		}
		u.progress("%s: agent already running (pid %d, metrics :%d)", r.Name, pid, a.MetricsPort)
		clearTransfer(r)
		return nil
	}
	err := u.startDetached(ctx, r.Name+" agent", a.Log, []*int{&a.MetricsPort},
		func() ([]string, error) {
			args, err := startFromConfig("agent", a.Config, "The agent of "+r.Name, u.agentSettings(r))
			return append(args, u.st.AgentArgs...), err
		},
		func(pid int) { a.PID = pid },
		func(ctx context.Context, pid int) error {
			if _, halted := agentHaltedAt(ctx, r, pid); halted {
				return nil
			}
			return agentServes(ctx, r, pid)
		})
	if err != nil {
		return err
	}
	if why, halted := agentHaltedAt(ctx, r, a.PID); halted {
		u.progress("%s: agent started (pid %d, metrics :%d, log %s), and it halted", r.Name, a.PID, a.MetricsPort, a.Log)
		return &errAgentHalted{replica: r, why: why}
	}
	u.progress("%s: agent started (pid %d, metrics :%d, log %s); the replica admits clients", r.Name, a.PID, a.MetricsPort, a.Log)
	clearTransfer(r)
	return nil
}

// agentHaltedAt reports whether pid, listening on r's metrics port, says
// that it halted, and why.
func agentHaltedAt(ctx context.Context, r *Replica, pid int) (string, bool) {
	if !listensOn(pid, r.Agent.MetricsPort) {
		return "", false
	}
	return haltedHealth(AgentHealth(ctx, r.Agent.MetricsPort))
}

// haltedHealth reads AgentHealth's answer: whether the agent halted, and
// why (on one line).
func haltedHealth(health string, err error) (string, bool) {
	why, halted := strings.CutPrefix(health, "halted: ")
	return quoteReason(why), err != nil && halted
}

// reportHalted (up, once everything runs) says which replicas halted and
// what rebuilds them, and records their names in the state returned.
func (u *upper) reportHalted() {
	for _, h := range u.halted {
		r := h.replica
		u.st.Halted = append(u.st.Halted, r.Name)
		if u.st.AutoRebuild {
			u.progress("%s: HALTED (%s); the supervisor rebuilds it from a donor (`tashkent status --data-dir %s` shows the rebuild)",
				r.Name, h.why, u.st.Dir)
			continue
		}
		u.progress("%s: HALTED (%s); automatic rebuild is off: rebuild it with `tashkent replica rebuild --data-dir %s %d`",
			r.Name, h.why, u.st.Dir, r.Index)
	}
}

// awaitAdoptedAgent waits until an agent that was already running serves
// (it may be catching up after its database restarted), or says it
// halted (*errAgentHalted). It is not ours to kill if it does neither: the
// error says what it is doing.
func (u *upper) awaitAdoptedAgent(ctx context.Context, r *Replica, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, u.o.ReadyTimeout)
	defer cancel()
	for {
		attempt, acancel := context.WithTimeout(ctx, 2*time.Second)
		err := agentServes(attempt, r, pid)
		why, halted := agentHaltedAt(attempt, r, pid)
		acancel()
		if err == nil {
			return nil
		}
		if halted {
			u.progress("%s: agent already running (pid %d, metrics :%d), halted", r.Name, pid, r.Agent.MetricsPort)
			return &errAgentHalted{replica: r, why: why}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: agent (pid %d) runs but does not serve the replica after %s: %v (see %s)",
				r.Name, pid, u.o.ReadyTimeout, err, r.Agent.Log)
		case <-time.After(adoptedAgentPoll):
		}
	}
}

// agentServes is the readiness check of replica r's agent pid: the
// metrics port is pid's own listening socket, its /healthz says it
// serves, and the replica's gate is open. The gate alone would not do: an
// agent killed with SIGKILL leaves it open, and the next one closes it only
// once it has connected.
func agentServes(ctx context.Context, r *Replica, pid int) error {
	if !listensOn(pid, r.Agent.MetricsPort) {
		return fmt.Errorf("pid %d does not listen on 127.0.0.1:%d yet", pid, r.Agent.MetricsPort)
	}
	health, err := AgentHealth(ctx, r.Agent.MetricsPort)
	if err != nil {
		return err
	}
	g, err := ReadGate(ctx, r.DSN())
	if err != nil {
		return err
	}
	if !g.Admitting {
		return fmt.Errorf("the agent says %q but the replica's gate is closed: %s", health, g.Reason)
	}
	return nil
}

// errNotServing is returned by AgentHealth when the agent answers that it
// does not serve (yet).
var errNotServing = errors.New("the agent does not serve the replica")

// AgentHealth asks the agent with metrics on port for its state
// (/healthz): its answer when it serves, an error wrapping errNotServing
// with the answer when it does not.
func AgentHealth(ctx context.Context, port int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort(port)+"/healthz", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(b))
	if resp.StatusCode != http.StatusOK {
		return text, fmt.Errorf("%w: %s", errNotServing, text)
	}
	return text, nil
}

// Gate is a replica's admission gate (tashkent.status()).
type Gate struct {
	Admitting bool
	Reason    string // why not, when closed
	// Version is the replica's version (tashkent.committed_version()).
	Version uint64
}

// ReadGate connects to a replica's PostgreSQL (as a role the gate lets in:
// postgres is in tashkent.recovery_roles) and reads its version and gate.
// A database the agent has not equipped yet (no extension) holds version 0
// with its gate closed.
func ReadGate(ctx context.Context, dsn string) (Gate, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	conn, err := connectFast(ctx, dsn)
	if err != nil {
		return Gate{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var g Gate
	var v int64
	err = conn.QueryRow(ctx, `SELECT tashkent.committed_version(), s.admitting, s.admit_reason FROM tashkent.status() AS s`).
		Scan(&v, &g.Admitting, &g.Reason)
	if pgcode.MissingObject(err) {
		return Gate{Reason: "the tashkent extension is not installed yet (the agent installs it)"}, nil
	}
	if err != nil {
		return Gate{}, fmt.Errorf("read the replica's version and gate: %w", err)
	}
	g.Version = uint64(v)
	return g, nil
}

// listensOn reports whether process pid holds the TCP socket listening on
// 127.0.0.1:port: the agent that answers there is the one started, not a
// process that held the port before it.
func listensOn(pid, port int) bool {
	inode := netutil.ListeningInode(port)
	return inode != "" && netutil.OwnsSocket(pid, inode)
}

// connectFast connects to a replica's PostgreSQL for tashkent's own
// checks with synchronous_commit off: in mode ed a safe read-only
// transaction waits until what it read is durable, so status, readiness
// and the transfer checks would wait for the certifier, and time out
// while it or the agent is down; they read state, and must not.
func connectFast(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	return pgx.ConnectConfig(ctx, cfg)
}
