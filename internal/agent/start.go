package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/order"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// errHalted ends a start whose catch-up met a version the replica cannot
// apply: the run stays, halted.
var errHalted = errors.New("the replica stopped applying")

// start brings the replica up to date with the cluster and serves it
// (Tashkent §7.1 case 2, §7.2): PostgreSQL recovered what it kept, the
// database's version says where that stands, the certifier's log supplies
// the rest, and clients wait (the gate is closed) until the replica holds
// every version that was durable when it started.
func (a *Agent) start(ctx context.Context) (*run, error) {
	r := newRun(a, ctx)
	a.metrics.starts.Inc()
	a.setState(StateStarting, "connecting to the replica's database")
	a.mu.Lock()
	a.run = r
	a.mu.Unlock()
	err := r.startSteps()
	if errors.Is(err, errHalted) {
		return r, nil
	}
	if err != nil {
		a.endRun(r)
		return nil, err
	}
	a.failed.set(wire.NoneFailed, 0) // the replica holds no failed version now (failed.go)
	if err := r.control.exec(r.ctx, `SELECT tashkent.set_admitting(true, '')`); err != nil {
		a.endRun(r)
		return nil, fmt.Errorf("open the admission gate: %w", err)
	}
	if !a.serveUnlessHalted() {
		r.closeGate("this replica stopped applying the cluster's commits and must be rebuilt")
		return r, nil
	}
	a.log.Info("agent ready", "socket", a.Socket(), "certifier", a.cfg.Certifier, "mode", a.cfg.Mode,
		"database", a.cfg.Database, "version", a.seq.committed(), "origin", a.origin)
	return r, nil
}

func (r *run) startSteps() error {
	for _, step := range []func() error{r.connect, r.install, r.register, r.resumeRewind, r.rewindIfAsked} {
		if err := step(); err != nil {
			return err
		}
	}
	committed, inherited, err := r.settle()
	if err != nil {
		return err
	}
	if err := r.loadHistory(historyKeptThrough(committed, inherited)); err != nil {
		return err
	}
	if err := r.openStream(committed); err != nil {
		return err
	}
	r.spawn(r.applyLoop)
	r.spawn(r.barriers.run)
	r.spawn(r.maintain)
	r.spawn(r.watchApply)
	r.spawn(func() { r.watchInherited(inherited) })
	r.a.transition(StateCatchingUp, "the replica is catching up with the cluster", true) // not if the certifier refused it already
	if err := r.catchUp(); err != nil {
		return err
	}
	return r.realignSequences()
}

// realignSequences aligns the sequences again once the replica has caught
// up, before clients come in: rows the catch-up applied may hold values of
// this replica's index past where its sequences stand (its own commits
// that its database lost in a crash, or, in a copy taken from a donor,
// those of the replica that had its index before), and aligning moves each
// sequence past the largest value of the column that owns it.
func (r *run) realignSequences() error {
	err := r.control.exec(r.ctx, `SELECT tashkent.align_all_sequences()`)
	if err != nil && !pgcode.MissingObject(err) {
		return fmt.Errorf("align sequences after catching up: %w", err)
	}
	return nil
}

func (r *run) connect() error {
	var err error
	if r.apply, err = r.a.connect(r.ctx, applyApplicationName); err != nil {
		return err
	}
	conn, err := r.a.connect(r.ctx, controlApplicationName)
	if err != nil {
		return err
	}
	r.control.replace(r.ctx, conn)
	return nil
}

// install makes sure the database has the extension, closes the gate and
// sets the replica's configuration up (sequences, DDL trust), warning
// about settings that do not fit.
func (r *run) install() error {
	c, ctx := r.control, r.ctx
	if err := c.exec(ctx, `CREATE EXTENSION IF NOT EXISTS tashkent`); err != nil {
		return fmt.Errorf("install the tashkent extension in database %s: %w", r.a.cfg.Database, err)
	}
	if err := c.exec(ctx, `SELECT tashkent.set_write_refusal('')`); err != nil {
		return fmt.Errorf("lift a write refusal an earlier agent left: %w", err)
	}
	if err := c.exec(ctx, lowerFenceSQL); err != nil && !pgcode.MissingObject(err) {
		return fmt.Errorf("lower a rewind fence an earlier agent left: %w", err)
	}
	if err := c.queryRow(ctx, databaseIdentitySQL, nil, &r.started); err != nil {
		return fmt.Errorf("read the database's identity: %w", err)
	}
	if err := c.exec(ctx, `SELECT tashkent.set_admitting(false, $1)`, "the replica is catching up with the cluster"); err != nil {
		return fmt.Errorf("close the admission gate: %w", err)
	}
	if err := c.exec(ctx, `SELECT tashkent.set_mode($1)`, string(r.a.cfg.Mode)); err != nil {
		return fmt.Errorf("tell the extension the durability mode (an extension older than the agent?): %w", err)
	}
	r.checkSettings()
	if err := r.locally(r.configureSequences); err != nil {
		return err
	}
	return r.locally(func(q replica.Querier) error {
		if err := replica.SetDDLTrust(ctx, q, r.a.cfg.TrustDDLRoles); err != nil && !pgcode.MissingObject(err) {
			return err
		}
		return nil
	})
}

// locally runs f in a transaction of the apply connection that stays on
// this replica (tashkent.maintenance, the superuser's escape hatch): the
// replica's own configuration, such as its sequences' offsets, is not
// replicated. It commits unless f fails, or passed over an error of the
// database (which aborted the transaction: nothing to commit).
func (r *run) locally(f func(q replica.Querier) error) error {
	tx, err := r.apply.Begin(r.ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(r.ctx))
	if _, err := tx.Exec(r.ctx, `SET LOCAL tashkent.maintenance = on`); err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return err
	}
	if r.apply.PgConn().TxStatus() == 'E' {
		return nil
	}
	return tx.Commit(r.ctx)
}

// serverSynchronousCommitSQL is the server's synchronous_commit, from its
// configuration files (postgresql.conf, ALTER SYSTEM), PostgreSQL's default
// if they do not set it: the agent's own sessions set their own (db.go).
const serverSynchronousCommitSQL = `COALESCE((SELECT f.setting FROM pg_catalog.pg_file_settings AS f
		WHERE f.name OPERATOR(pg_catalog.=) 'synchronous_commit' AND f.applied
		ORDER BY f.seqno DESC LIMIT 1), 'on')`

// checkSettings warns about settings that do not fit the agent and reads
// the certify timeout.
func (r *run) checkSettings() {
	var syncCommit, roles, user, timeoutMs string
	err := r.control.queryRow(r.ctx, `SELECT `+serverSynchronousCommitSQL+`,
		pg_catalog.current_setting('tashkent.recovery_roles'), pg_catalog.current_user()::pg_catalog.text,
		(SELECT s.setting FROM pg_catalog.pg_settings AS s WHERE s.name OPERATOR(pg_catalog.=) 'tashkent.certify_timeout')`,
		nil, &syncCommit, &roles, &user, &timeoutMs)
	if err != nil {
		r.a.log.Warn("could not read the replica's settings", "err", err)
		return
	}
	want := map[Mode]string{ModeMW: "off", ModeBase: "on", ModeED: "on"}[r.a.cfg.Mode]
	if syncCommit != want {
		r.a.log.Warn("the replica's synchronous_commit does not match the durability mode",
			"mode", r.a.cfg.Mode, "synchronous_commit", syncCommit, "expected", want)
	}
	if !slices.Contains(strings.Split(strings.ReplaceAll(roles, " ", ""), ","), user) {
		r.a.log.Warn("the agent's role is not in tashkent.recovery_roles: after a restart of the database the agent cannot connect while the gate is closed",
			"role", user, "recovery_roles", roles)
	}
	if ms, err := strconv.ParseInt(timeoutMs, 10, 64); err == nil && ms > 0 {
		r.certifyTimeout = time.Duration(float64(ms)*certifyTimeoutShare) * time.Millisecond
	}
}

// configureSequences offsets the database's sequences per replica
// (replica/sequences.go). An extension without the sequence functions is
// warned about.
func (r *run) configureSequences(q replica.Querier) error {
	index, stride := r.a.cfg.ReplicaIndex, r.a.cfg.SequenceStride
	if index == 0 {
		recorded, recordedStride, ok, err := replica.SequenceSettings(r.ctx, q)
		if pgcode.MissingObject(err) {
			r.a.log.Warn("this extension does not offset sequences per replica: sequences hand out the same values on every replica")
			return nil
		}
		if err != nil {
			return err
		}
		if !ok {
			r.a.log.Warn("no replica index: sequences are not offset per replica and hand out the same values on every replica; start the agent with --replica-index")
			return nil
		}
		index, stride = recorded, recordedStride
	}
	err := replica.ConfigureSequences(r.ctx, q, index, stride)
	if pgcode.MissingObject(err) {
		r.a.log.Warn("this extension does not offset sequences per replica: sequences hand out the same values on every replica")
		return nil
	}
	if err == nil {
		r.a.log.Info("sequences offset per replica", "replica_index", index, "stride", stride)
	}
	return err
}

// register makes the apply connection the replica's applier
// (tashkent.register_applier), after the backends of an earlier agent's
// applier are gone: they may still wait for a turn, holding locks the
// new applier needs. The extension's hello during the call is accepted
// only from this connection's backend.
func (r *run) register() error {
	if err := r.terminateEarlierAppliers(); err != nil {
		return err
	}
	pid := r.apply.PgConn().PID()
	r.a.mu.Lock()
	r.a.applyPID = pid
	r.a.mu.Unlock()
	var gen int64
	err := r.apply.QueryRow(r.ctx, `SELECT tashkent.register_applier()`).Scan(&gen)
	r.a.mu.Lock()
	r.a.applyPID = 0
	r.a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("register the agent's applier: %w", err)
	}
	if err := replica.PrepareApplySession(r.ctx, r.apply); err != nil {
		return err
	}
	r.registerOnce.Do(func() {
		r.generation = uint64(gen)
		close(r.registered)
	})
	return nil
}

// earlierAppliersSQL lists the backends of earlier agents' appliers.
const earlierAppliersSQL = `SELECT a.pid FROM pg_catalog.pg_stat_activity AS a
WHERE a.pid OPERATOR(pg_catalog.<>) $1 AND (a.application_name OPERATOR(pg_catalog.=) $2
	OR a.pid IN (SELECT b.pid FROM tashkent.backends() AS b WHERE b.state OPERATOR(pg_catalog.=) 'applying'))`

func (r *run) terminateEarlierAppliers() error {
	return r.terminateUntilGone("the backends of an earlier agent's applier", earlierAppliersSQL,
		int32(r.apply.PgConn().PID()), applyApplicationName)
}

// terminateUntilGone terminates the backends that listSQL (with args)
// lists, what they are, until it lists none, for up to stoppedWaitMax.
func (r *run) terminateUntilGone(what, listSQL string, args ...any) error {
	deadline := time.Now().Add(stoppedWaitMax)
	for {
		var pids []int32
		var pid int32
		if err := r.control.query(r.ctx, listSQL, args, []any{&pid}, func() { pids = append(pids, pid) }); err != nil {
			return fmt.Errorf("look for %s: %w", what, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not end: %v", what, pids)
		}
		r.a.log.Warn("terminating "+what, "pids", pids)
		for _, p := range pids {
			r.control.exec(r.ctx, `SELECT pg_catalog.pg_terminate_backend($1)`, p)
		}
		_ = ctxtime.Sleep(r.ctx, 50*time.Millisecond)
	}
}

// settle finds where the replica stands. Backends that asked an earlier
// agent for a certification are waited for (bounded): their socket is
// gone, so each learns it has no decision, or already had one and holds
// its version. Versions held by backends (holding, committing) are theirs
// to commit: local, inherited, watched until committed or released
// (watchInherited). The database's version is read after them, so a
// version committed meanwhile counts as committed.
func (r *run) settle() (uint64, []*order.Local, error) {
	if err := r.awaitCertifyingSettled(); err != nil {
		return 0, nil, err
	}
	if err := r.endHoldersNotDurable(); err != nil {
		return 0, nil, err
	}
	var held []uint64
	var v int64
	err := r.control.query(r.ctx, `SELECT b.version FROM tashkent.backends() AS b
		WHERE b.state OPERATOR(pg_catalog.=) ANY ('{holding,committing}'::pg_catalog.text[])`,
		nil, []any{&v}, func() { held = append(held, uint64(v)) })
	if err != nil {
		return 0, nil, fmt.Errorf("read the backends' versions: %w", err)
	}
	committed, err := r.control.committedVersion(r.ctx)
	if err != nil {
		return 0, nil, err
	}
	var inherited []*order.Local
	r.a.seq.do(func(o *order.Order) {
		o.Reset(committed)
		for _, h := range held {
			if l := o.Inherit(h); l != nil {
				inherited = append(inherited, l)
			}
		}
	})
	r.a.log.Info("replica state", "version", committed, "held_by_backends", held, "generation", r.generation)
	return committed, inherited, nil
}

// historyKeptThrough is the highest version whose run the replica's
// history must keep: the committed version, or a version a backend holds
// from an earlier run, which it commits by itself, maybe before this
// run's stream delivers its entry again and records its run.
func historyKeptThrough(committed uint64, inherited []*order.Local) uint64 {
	keep := committed
	for _, l := range inherited {
		keep = max(keep, l.Version())
	}
	return keep
}

func (r *run) awaitCertifyingSettled() error {
	deadline := time.Now().Add(certifyingSettleMax)
	for {
		var n int64
		err := r.control.queryRow(r.ctx, `SELECT pg_catalog.count(*) FROM tashkent.backends() AS b
			WHERE b.state OPERATOR(pg_catalog.=) 'certifying' AND b.agent_generation OPERATOR(pg_catalog.<) $1`,
			[]any{int64(r.generation)}, &n)
		if err != nil {
			return fmt.Errorf("read the backends' slots: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			r.a.log.Warn("backends still wait for an earlier agent's decision; going on without them", "backends", n)
			return nil
		}
		_ = ctxtime.Sleep(r.ctx, inheritedPollInterval)
	}
}

// openStream opens the certifier stream after version committed. What a
// stream of an earlier run still delivers is dropped (its round).
func (r *run) openStream(committed uint64) error {
	round := r.a.seq.round()
	r.streamOpened(committed)
	durable, err := r.control.durableVersion(r.ctx)
	if err != nil {
		return err
	}
	c, err := certclient.New(certclient.Options{
		Target: r.a.cfg.Certifier, Replica: r.a.cfg.Name, ReplicaVersion: committed, AppliedVersion: &durable, Push: !r.a.cfg.NoPush,
		StatusAddr: r.a.statusAddr(), Logger: r.a.log, DialOptions: r.a.cfg.CertifierDialOptions,
		EarlyDelivery: r.a.cfg.Mode == ModeED,
		OnEntries: func(entries []logentry.Entry, durable uint64) error {
			r.a.heardDurable(durable)
			if err := r.recordRuns(entries); err != nil {
				return err
			}
			// after the runs: a backend the feed wakes for a version finds
			// its epoch in the history (tashkent.wait_durable)
			r.admission.heard(durable)
			r.a.durable.advance(durable)
			r.noteDelivered(entries, durable)
			r.deliver(round, entries)
			return nil
		},
		OnRefused: r.refused,
		OnEpoch:   r.admission.heardEpoch,
		History:   r.history.toSend,
	})
	if err != nil {
		return err
	}
	r.cert = c
	return nil
}

// deliver hands the order what the certifier delivered. While the
// versions waiting to be applied hold more than ApplyBacklogBytes, it
// first waits for the applier: the certifier stream is not read
// meanwhile, so a replica that cannot apply (its database stopped, a
// long lock) keeps a bounded backlog, and the certifier keeps it on disk
// (it reads what it sends from its log as the stream drains).
func (r *run) deliver(round uint64, entries []logentry.Entry) {
	if len(entries) == 0 {
		return
	}
	if err := r.a.seq.waitRoom(r.ctx, r.a.cfg.ApplyBacklogBytes); err != nil {
		return // the run ended; the next one delivers from what the database holds
	}
	if err := r.a.seq.deliver(round, entries); err != nil {
		panic(fmt.Sprintf("agent: an entry from the certifier: %v", err)) // the certifier's entries are well formed
	}
	r.a.metrics.delivered.Set(float64(entries[len(entries)-1].Version))
}

// catchUp waits until the replica holds every version the certifier had
// made durable when asked, showing progress. A certifier that does not
// answer is waited for: a replica that cannot learn the global order
// cannot tell how stale it is.
func (r *run) catchUp() error {
	target, err := r.durableVersion()
	if err != nil {
		return err
	}
	start, began := r.a.seq.committed(), time.Now()
	if start < target {
		r.a.log.Info("catching up before admitting clients", "version", start, "target", target)
	}
	progress := time.NewTicker(2 * time.Second)
	defer progress.Stop()
	for {
		wctx, cancel := context.WithTimeout(r.ctx, 100*time.Millisecond)
		err := r.a.seq.waitCommitted(wctx, target)
		cancel()
		if err == nil {
			r.a.log.Info("caught up", "version", r.a.seq.committed(), "replayed", target-min(start, target),
				"took", time.Since(began).Round(time.Millisecond))
			return nil
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		if state, _ := r.a.State(); state == StateHalted {
			return errHalted
		}
		r.cert.RequestCatchUp()
		select {
		case <-progress.C:
			done := r.a.seq.committed()
			r.a.log.Info("catching up", "version", done, "target", target, "percent", 100*(done-min(start, done))/max(target-start, 1))
		default:
		}
	}
}

// durableVersion asks the certifier, retrying until it answers.
func (r *run) durableVersion() (uint64, error) {
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
		st, err := r.cert.API().Status(sctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			r.a.heardDurable(st.DurableVersion)
			return st.DurableVersion, nil
		}
		if r.ctx.Err() != nil {
			return 0, r.ctx.Err()
		}
		if attempt%5 == 0 {
			r.a.log.Warn("waiting for the certifier", "certifier", r.a.cfg.Certifier, "err", grpctls.HintPlaintext(err))
		}
	}
}

// holdersNotDurableSQL lists the backends holding a version above the
// durable version the extension last heard of.
const holdersNotDurableSQL = `SELECT b.pid FROM tashkent.backends() AS b
WHERE b.state OPERATOR(pg_catalog.=) ANY ('{holding,committing}'::pg_catalog.text[])
	AND b.version OPERATOR(pg_catalog.>) COALESCE(tashkent.durable_version(), 0)`

// endHoldersNotDurable: in mode ed a backend may hold a decided version
// that is not durable, and it may have failed. The slot says its number,
// not its transaction: inherited, it would take the entry the log holds
// at that number, maybe another transaction of a later epoch, and commit
// its own in its place. So such backends are ended; if their version
// survived, the log brings it back and the applier commits it. Their
// clients lose the connection: the outcome is theirs to ask
// (tashkent.txn_state).
func (r *run) endHoldersNotDurable() error {
	if r.a.cfg.Mode != ModeED {
		return nil
	}
	return r.terminateUntilGone("the backends holding versions not known to be durable (they may have failed)", holdersNotDurableSQL)
}
