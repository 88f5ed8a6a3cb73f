package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// The detector self-test. The certifier is restarted with its conflict
// check disabled (certification.Config.UnsafeSkipConflictCheck), the
// list-append workload runs on a table of its own without other faults, and
// the checkers must catch what follows: two replicas commit concurrent
// appends to one list and one overwrites the other (a lost update). A
// harness that cannot catch a certifier that certifies nothing proves
// nothing.
//
// Without the conflict check a replica also deadlocks: a local transaction
// holds a row lock and waits for its turn behind a remote writeset that
// needs that lock, a cycle a correct certifier rules out (it aborts the
// local transaction; Tashkent §8.2). The agent breaks it itself (it
// displaces the certified local transaction and applies its version in
// its place, extension/src/doom.c); a deadlock breaker here terminates
// the backends such waits still hang on after a while, the agent's soft
// recovery (Tashkent §8.1) then applies their writesets in version order,
// and the lost update becomes visible instead of the cluster stalling.

const (
	// breakerPoll is how often the deadlock breaker looks for stuck waits.
	breakerPoll = 200 * time.Millisecond
	// breakerWaitMin is how long a lock wait lasts before it counts as
	// stuck.
	breakerWaitMin = 500 * time.Millisecond
)

// stuckBlockersSQL finds backends that are idle in a transaction or hold a
// certified version while they wait for their turn, and block another
// backend's lock wait that has lasted over $1 milliseconds.
const stuckBlockersSQL = `
SELECT DISTINCT b.pid
FROM pg_stat_activity w
CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS b(pid)
JOIN pg_stat_activity s ON s.pid = b.pid
LEFT JOIN tashkent.backends() t ON t.pid = b.pid
WHERE w.wait_event_type = 'Lock'
  AND now() - w.state_change > make_interval(secs => $1::float8 / 1000)
  AND (s.state = 'idle in transaction' OR t.state = 'holding')`

func (r *runner) selfTest(ctx context.Context, w *listAppend) error {
	r.progress("self-test: certifier (every member of a group) restarted with --unsafe-fault-skip-conflict-check for %s", r.cfg.SelfTestDuration)
	if err := r.ctl.restartCertifiers(ctx, true); err != nil {
		return fmt.Errorf("self-test: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.SelfTestDuration)
	var wg sync.WaitGroup
	for _, ep := range r.ctl.endpoints() {
		for range r.cfg.ClientsPerReplica {
			c := newClient(ep, &r.ids, r.nextSeed())
			wg.Go(func() { r.loop(ctx, wctx, c, func(ctx context.Context) { w.step(ctx, c, false) }) })
		}
	}
	bctx, stopBreaker := context.WithCancel(ctx)
	var broken int
	var bwg sync.WaitGroup
	bwg.Go(func() { broken = breakDeadlocks(bctx, r.ctl.state()) })
	wg.Wait()
	cancel()
	// Back to the normal certifier, and let every replica receive every
	// version before the durability check counts lost appends.
	if err := r.ctl.restartCertifiers(ctx, false); err != nil {
		stopBreaker()
		return fmt.Errorf("self-test: restart the certifier: %w", err)
	}
	if _, err := converge(ctx, r.ctl.state(), r.cfg.ConvergeTimeout); err != nil {
		r.sum.fail("self-test: convergence after the self-test: %v", err)
	}
	stopBreaker()
	bwg.Wait()

	st := &SelfTest{Transactions: w.hist.Counts(), DeadlocksBroken: broken}
	r.sum.SelfTest = st
	rep, path, err := r.writeAndCheck(ctx, w, "selftest-history.edn")
	if err != nil {
		return err
	}
	st.Adya, st.History = rep, path
	st.Lost = r.selfTestLost(ctx, w)
	st.Detected = len(rep.Forbidden()) > 0 || st.Lost > 0
	if !st.Detected {
		r.sum.fail("self-test: with the certifier's conflict check disabled, no checker found an anomaly "+
			"(%d transactions committed): the harness cannot be trusted", st.Transactions[OK])
	}
	return nil
}

// breakDeadlocks terminates, on every replica, the backends stuck lock
// waits hang on, until ctx ends, and returns how many it terminated.
func breakDeadlocks(ctx context.Context, st *cluster.State) int {
	conns := make([]*pgx.Conn, len(st.Replicas))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	n := 0
	for ctxtime.Sleep(ctx, breakerPoll) == nil {
		for i, rep := range st.Replicas {
			if conns[i] == nil || conns[i].IsClosed() {
				c, err := pgx.Connect(ctx, rep.DSN())
				if err != nil {
					continue
				}
				conns[i] = c
			}
			n += terminateStuck(ctx, conns[i])
		}
	}
	return n
}

func terminateStuck(ctx context.Context, conn *pgx.Conn) int {
	rows, err := conn.Query(ctx, stuckBlockersSQL, breakerWaitMin.Milliseconds())
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	n := 0
	for _, pid := range pids {
		var ok bool
		if conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok) == nil && ok {
			n++
		}
	}
	return n
}

// selfTestLost counts acknowledged appends of the self-test missing from
// the first replica.
func (r *runner) selfTestLost(ctx context.Context, w *listAppend) int {
	ctx, cancel := context.WithTimeout(ctx, finalReadTimeout)
	defer cancel()
	rep := r.ctl.state().Replicas[0]
	conn, err := pgx.Connect(ctx, rep.DSN())
	if err != nil {
		return 0
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lists, err := w.readAll(ctx, conn)
	if err != nil {
		return 0
	}
	return len(w.lost(lists))
}
