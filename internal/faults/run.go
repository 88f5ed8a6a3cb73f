package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// Tables of the workloads. The self-test's lists live apart so that its
// anomalies, which are the point, never mix with the checked history.
const (
	tableListAppend = "faults_lists"
	tableSelfTest   = "faults_selftest"
	tableBank       = "faults_bank"
	tableLongFork   = "faults_longfork"
	// setupTimeout bounds creating the tables and seeing them everywhere.
	setupTimeout = 60 * time.Second
	// finalReadTimeout bounds reading a replica's final state.
	finalReadTimeout = 30 * time.Second
)

// runner carries one run.
type runner struct {
	cfg  Config
	adya string
	ctl  *control
	ids  processes
	sum  *Summary
	log  *faultLog
	seed uint64
}

// Run starts a 3-replica cluster (mode mw, or ed: cfg.Mode) in
// cfg.Dir/cluster, drives the list-append, bank and long-fork workloads on
// every replica while it injects faults, heals them, and checks isolation
// (adya), the bank invariant, long forks, durability of every
// acknowledged commit and convergence; in mode ed also the outcome of
// every fast and safe transaction (ed.go); then the detector self-test. The returned summary says what
// failed; the error is for a harness that could not run at all.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	adya, err := FindAdya()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster")); err == nil {
		return nil, fmt.Errorf("%s already holds a cluster from an earlier run: give the fault test a new output directory", dir)
	}
	ctl := &control{dir: filepath.Join(dir, "cluster"), bin: cfg.Binary, certifiers: cfg.Certifiers, mode: cfg.mode()}
	if cfg.FaultWriteDelay > 0 {
		ctl.certArgs = []string{"--unsafe-deliver-before-durable", "--unsafe-fault-write-delay", cfg.FaultWriteDelay.String()}
	}
	if cfg.FaultPeerDelay > 0 {
		ctl.certArgs = []string{"--unsafe-fault-peer-delay", cfg.FaultPeerDelay.String()}
	}
	r := &runner{cfg: cfg, adya: adya, ctl: ctl, sum: &Summary{Dir: dir, Mode: cfg.mode(), Certifiers: max(cfg.Certifiers, 1)}, seed: cfg.Seed}
	r.progress("starting a 3-replica %s cluster with %d certifier(s) in %s", cfg.mode(), max(cfg.Certifiers, 1), r.ctl.dir)
	if err := r.ctl.up(ctx); err != nil {
		_ = r.ctl.down(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start the cluster: %w", err)
	}
	if err := r.ctl.takeOver(ctx, cfg.partitions()); err != nil {
		_ = r.ctl.down(context.WithoutCancel(ctx))
		return nil, err
	}
	defer func() {
		if !cfg.KeepCluster {
			r.progress("stopping the cluster")
			if err := r.ctl.down(context.WithoutCancel(ctx)); err != nil {
				r.sum.fail("stop the cluster: %v", err)
			}
		}
		if err := r.sum.save(); err != nil {
			r.sum.fail("save the summary: %v", err)
		}
	}()
	err = r.run(ctx)
	return r.sum, err
}

func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
}

func (r *runner) run(ctx context.Context) error {
	la := newListAppend(tableListAppend)
	if r.cfg.mode() == cluster.ModeED {
		la.ed = newEDLedger(r.cfg.FastShare)
	}
	bk := newBank(tableBank)
	lf := newLongFork(tableLongFork)
	st := newListAppend(tableSelfTest)
	setup := []string{la.createSQL(), st.createSQL(), lf.createSQL()}
	setup = append(setup, bk.setupSQL()...)
	if err := r.setup(ctx, setup); err != nil {
		return err
	}

	r.progress("workload for %s with faults: %s", r.cfg.Duration, joinKinds(r.cfg.Faults))
	r.workload(ctx, la, bk, lf)
	r.sum.Faults = withPauses(r.log.all(), commitTimes(la.hist), r.cfg.FaultGap)
	r.sum.Pauses = pausesByKind(r.sum.Faults)
	r.sum.RelayConnections = r.ctl.relayConnections()

	r.progress("faults healed; waiting for convergence")
	conv, err := converge(ctx, r.ctl.state(), r.cfg.ConvergeTimeout)
	r.sum.Convergence = conv
	if err != nil {
		r.sum.fail("convergence: %v", err)
	} else {
		r.progress("converged in %.2f s", conv.Seconds())
	}
	if la.ed != nil {
		r.progress("asking the state of every transaction of mode ed")
		r.sum.ED = r.resolveED(ctx, la)
		for _, v := range r.sum.ED.Violations {
			r.sum.fail("mode ed: %s", v)
		}
	}
	r.checkDurability(ctx, la, bk, lf)
	r.sum.LongForkReads, r.sum.LongForkInserts = lf.counts()
	r.sum.LongForks = lf.forks()
	for _, f := range r.sum.LongForks {
		r.sum.fail("long fork: %s", f)
	}
	r.sum.Bank = bk.result()
	for _, v := range r.sum.Bank.Violations {
		r.sum.fail("bank: %s", v)
	}
	if err := r.checkHistory(ctx, la); err != nil {
		return err
	}
	if r.cfg.SelfTest {
		return r.selfTest(ctx, st)
	}
	return nil
}

// setup creates the tables on the first replica and waits until every
// replica has them and the bank's accounts.
func (r *runner) setup(ctx context.Context, stmts []string) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	eps := r.ctl.endpoints()
	conn, err := pgx.Connect(ctx, eps[0].DSN)
	if err != nil {
		return fmt.Errorf("setup: connect %s: %w", eps[0].Replica, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("setup: %s: %w", s, err)
		}
	}
	for _, ep := range eps {
		for {
			n, err := countAccounts(ctx, ep.DSN)
			if err == nil && n == bankAccounts {
				break
			}
			if ctxtime.Sleep(ctx, 100*time.Millisecond) != nil {
				return fmt.Errorf("setup: the tables did not reach %s within %s (last error: %v)", ep.Replica, setupTimeout, err)
			}
		}
	}
	return nil
}

func countAccounts(ctx context.Context, dsn string) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM "+tableBank).Scan(&n)
	return n, err
}

// workload runs the clients and the nemesis for cfg.Duration and returns
// once every fault is healed and every client stopped.
func (r *runner) workload(ctx context.Context, la *listAppend, bk *bank, lf *longFork) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	r.log = &faultLog{start: time.Now()}
	la.hist.mu.Lock()
	la.hist.start = r.log.start // history times and fault times share their origin
	la.hist.mu.Unlock()
	disconnect := 0
	for _, k := range r.cfg.Faults {
		if k == ClientDisconnect {
			disconnect = r.cfg.DisconnectEvery
		}
	}
	var wg sync.WaitGroup
	for _, ep := range r.ctl.endpoints() {
		for range r.cfg.ClientsPerReplica {
			c := newClient(ep, &r.ids, r.nextSeed())
			if la.ed != nil {
				c.onNotice = la.ed.notice
				c.params = map[string]string{"synchronous_commit": "off"}
			}
			wg.Go(func() { r.loop(ctx, wctx, c, func(ctx context.Context) { r.listAppendStep(ctx, la, c, disconnect) }) })
		}
		b := newClient(ep, &r.ids, r.nextSeed())
		wg.Go(func() { r.loop(ctx, wctx, b, func(ctx context.Context) { bk.step(ctx, b) }) })
		l := newClient(ep, &r.ids, r.nextSeed())
		wg.Go(func() { r.loop(ctx, wctx, l, func(ctx context.Context) { lf.step(ctx, l) }) })
	}
	n := &nemesis{ctl: r.ctl, log: r.log, kinds: r.cfg.Faults, hold: r.cfg.FaultHold, gap: r.cfg.FaultGap,
		rng: rand.New(rand.NewPCG(r.nextSeed(), 1)), logf: r.progress}
	cycled := make(chan struct{})
	wg.Go(func() { n.run(wctx, cycled) })
	wg.Go(func() { r.stopAfter(wctx, stop, cycled) })
	wg.Wait()
}

// stopAfter ends the workload once cfg.Duration has passed and every fault
// kind was injected at least once (a loaded machine restarts processes
// slowly), but no later than twice cfg.Duration.
func (r *runner) stopAfter(ctx context.Context, stop context.CancelFunc, cycled <-chan struct{}) {
	defer stop()
	if ctxtime.Sleep(ctx, r.cfg.Duration) != nil {
		return
	}
	select {
	case <-cycled:
	case <-ctx.Done():
	case <-time.After(r.cfg.Duration):
		r.progress("not every fault kind was injected within twice the duration; stopping anyway")
	}
}

func (r *runner) nextSeed() uint64 {
	r.seed++
	return r.seed
}

// loop runs step on c until stop ends, reconnecting as needed. Steps run
// under ctx, not stop, so that the end of the workload does not turn the
// transactions in flight into unknown outcomes.
func (r *runner) loop(ctx, stop context.Context, c *client, step func(ctx context.Context)) {
	defer c.drop()
	for stop.Err() == nil {
		if c.conn == nil {
			if c.connect(stop) != nil {
				return
			}
		}
		step(ctx)
	}
}

func (r *runner) listAppendStep(ctx context.Context, la *listAppend, c *client, disconnectEvery int) {
	disconnect := disconnectEvery > 0 && c.rng.IntN(disconnectEvery) == 0
	if disconnect {
		r.log.add(Fault{Kind: ClientDisconnect, Target: c.ep.Replica + " client", At: r.log.since()})
	}
	la.step(ctx, c, disconnect)
}

// checkDurability reads the final state of every replica's database and
// looks for every acknowledged write.
func (r *runner) checkDurability(ctx context.Context, la *listAppend, bk *bank, lf *longFork) {
	ctx, cancel := context.WithTimeout(ctx, finalReadTimeout)
	defer cancel()
	ins, _ := lf.counts()
	r.sum.AcknowledgedCommits = la.ackedCount() + ins
	for _, rep := range r.ctl.state().Replicas {
		err := func() error {
			conn, err := pgx.Connect(ctx, harnessDSN(rep))
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			lists, err := la.readAll(ctx, conn)
			if err != nil {
				return err
			}
			keys, err := lf.readAll(ctx, conn)
			if err != nil {
				return err
			}
			balances, err := readBalances(ctx, conn, bk.table)
			if err != nil {
				return err
			}
			for _, l := range append(la.lost(lists), lf.lost(keys)...) {
				r.sum.Lost = append(r.sum.Lost, rep.Name+": "+l)
				r.sum.fail("durability on %s: %s", rep.Name, l)
			}
			if la.ed != nil {
				for _, v := range la.ed.finalViolations(la.table, lists, la.hist) {
					r.sum.ED.Violations = append(r.sum.ED.Violations, rep.Name+": "+v)
					r.sum.fail("mode ed on %s: %s", rep.Name, v)
				}
			}
			bk.check(rep.Name+" (final state)", balances)
			return nil
		}()
		if err != nil {
			r.sum.fail("read the final state of %s: %v", rep.Name, err)
		}
	}
}

// checkHistory writes the list-append history and has adya check it.
func (r *runner) checkHistory(ctx context.Context, la *listAppend) error {
	rep, path, err := r.writeAndCheck(ctx, la, "history.edn")
	if err != nil {
		return err
	}
	r.sum.History = path
	r.sum.Transactions = la.hist.Counts()
	r.sum.Adya = rep
	if !rep.OK() {
		r.sum.fail("adya: %s (valid=%s, found %s; report %s)", adyaModel, rep.Valid, describeAnomalies(rep), rep.Output)
	}
	if r.sum.Transactions[OK] == 0 {
		r.sum.fail("no list-append transaction committed: the history proves nothing")
	}
	return nil
}

func (r *runner) writeAndCheck(ctx context.Context, la *listAppend, name string) (*AdyaReport, string, error) {
	path := filepath.Join(r.sum.Dir, name)
	f, err := os.Create(path)
	if err != nil {
		return nil, "", err
	}
	err = la.hist.WriteEDN(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, "", err
	}
	r.progress("checking %s with adya", path)
	rep, err := CheckHistory(ctx, r.adya, path)
	return rep, path, err
}
