package agent

import (
	"time"
)

// lockWatch looks, while a batch is in flight, for the backends that hold
// row locks its writes wait for, and makes them give way: a remote
// writeset takes priority over local transactions (Tashkent §8.2, eager
// pre-certification; Postgres-R(SI) §4.2). A local transaction that wrote
// a row a remote version also wrote would fail certification anyway;
// PostgreSQL has no priorities, so the agent dooms it
// (tashkent.doom, extension/src/doom.c): it fails with 40001, at once if
// it runs a statement. A certified one that waits for a turn after the
// batch is displaced (its backend ends, and its version is applied in its
// place). One that stays in the way past --blocker-grace (a transaction
// idle in its block cannot be cancelled) is terminated.
type lockWatch struct {
	r     *run
	first uint64 // the batch's first version: what the locks are needed for
	pid   int32  // the applier's backend
	// doomed are the transactions doomed, by backend and transaction id:
	// a client that retries on the same connection blocks the batch again
	// with a new transaction, which is doomed anew, not taken for the one
	// that outstayed its grace.
	doomed map[transaction]time.Time
	warned map[int32]bool
	// readers are blockers without a transaction id, by when they were
	// first seen in the way; cancelled, those sent a cancel.
	readers   map[int32]time.Time
	cancelled map[int32]bool
}

// transaction is one transaction of one backend.
type transaction struct {
	pid int32
	xid string // pg_stat_activity.backend_xid
}

func newLockWatch(r *run, first uint64) *lockWatch {
	return &lockWatch{r: r, first: first, pid: int32(r.apply.PgConn().PID()),
		doomed: map[transaction]time.Time{}, warned: map[int32]bool{},
		readers: map[int32]time.Time{}, cancelled: map[int32]bool{}}
}

// blockersSQL lists the backends the applier waits for, with their
// transaction id and their slot (none for a backend that never certified
// nor waited for a version).
const blockersSQL = `SELECT b.pid, coalesce(a.backend_xid::pg_catalog.text, ''), coalesce(s.state, ''), coalesce(s.version, 0),
	coalesce(s.waiting_for, 0)
FROM pg_catalog.unnest(pg_catalog.pg_blocking_pids($1)) AS b(pid)
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid OPERATOR(pg_catalog.=) b.pid
LEFT JOIN tashkent.backends() AS s ON s.pid OPERATOR(pg_catalog.=) b.pid`

type blocker struct {
	transaction
	state      string
	version    int64
	waitingFor int64 // the version it waits for (tashkent.sync_wait, wait_for_version), 0 if none
}

func (w *lockWatch) check() {
	var bs []blocker
	var b blocker
	err := w.r.control.query(w.r.ctx, blockersSQL, []any{w.pid}, []any{&b.pid, &b.xid, &b.state, &b.version, &b.waitingFor},
		func() { bs = append(bs, b) })
	if err != nil {
		return // the health check notices a lost database
	}
	for _, b := range bs {
		w.handle(b)
	}
}

func (w *lockWatch) handle(b blocker) {
	switch {
	case b.state == "committing":
		return // it has the turn: it commits, then lets go
	case b.state == "holding" && uint64(b.version) < w.first:
		return // an earlier version: it commits in its turn, before the batch
	case b.state == "certifying":
		// The certifier decides: an abort, or a version after the batch
		// (displaced then). Its reply must be read meanwhile.
		w.r.a.seq.awaitDecision()
		return
	case b.state == "applying":
		w.terminate(b, "the backend of an earlier agent's applier")
		return
	}
	if b.xid == "" && b.waitingFor >= int64(w.first) {
		// a reader waiting for a version this batch leads to: it waits
		// for the batch, which waits for its lock; its wait ends at once
		// (a retry that waits again is woken again). If it stays in the
		// way, it is a reader in the way like any other.
		w.doom(b, false)
		w.readerInTheWay(b)
		return
	}
	if at, ok := w.doomed[b.transaction]; ok {
		if time.Since(at) > w.r.a.cfg.BlockerGrace {
			w.terminate(b, "a doomed transaction still holds the lock")
			w.doomed[b.transaction] = time.Now()
		}
		return
	}
	if b.xid == "" && (b.state == "" || b.state == "idle") {
		// no transaction id: a reader, whether or not its session
		// certified a transaction before (which left it a slot, idle)
		w.readerInTheWay(b)
		return
	}
	w.doom(b, true)
}

// readerInTheWay handles a blocker without a transaction id: a reader
// whose lock keeps a remote TRUNCATE or DDL waiting (a long query, an
// idle REPEATABLE READ transaction, pg_dump). Nothing it wrote can fail
// certification, so it is not doomed; but every commit of the replica
// queues behind the batch, so after --blocker-grace its query is
// cancelled, and after twice that its backend is terminated.
func (w *lockWatch) readerInTheWay(b blocker) {
	at, ok := w.readers[b.pid]
	switch {
	case !ok:
		w.readers[b.pid] = time.Now()
	case time.Since(at) > 2*w.r.a.cfg.BlockerGrace:
		w.terminate(b, "a reader kept its lock past twice the grace")
		w.readers[b.pid] = time.Now()
	case time.Since(at) > w.r.a.cfg.BlockerGrace && !w.cancelled[b.pid]:
		w.cancelled[b.pid] = true
		w.r.a.log.Warn("cancelling a reader that blocks a remote writeset", "pid", b.pid, "version", w.first)
		w.r.control.exec(w.r.ctx, `SELECT pg_catalog.pg_cancel_backend($1)`, b.pid)
	}
}

// doom dooms b's transaction; remember: it is expected to end, and is
// terminated if it still blocks after the grace.
func (w *lockWatch) doom(b blocker, remember bool) {
	var result *string
	err := w.r.control.queryRow(w.r.ctx, `SELECT tashkent.doom($1, $2)`, []any{b.pid, int64(w.first)}, &result)
	if err != nil {
		w.r.a.log.Warn("could not doom a backend that blocks a remote writeset", "pid", b.pid, "err", err)
		return
	}
	if result == nil {
		if !w.warned[b.pid] {
			w.warned[b.pid] = true
			w.r.a.log.Warn("a remote writeset waits for a backend that cannot be doomed (no transaction id, or its certification or commit is under way)",
				"pid", b.pid, "state", b.state, "version", w.first)
		}
		return
	}
	if remember {
		w.doomed[b.transaction] = time.Now()
	}
	w.r.a.metrics.dooms.WithLabelValues(*result).Inc()
	w.r.a.log.Info("doomed a local transaction that blocks a remote writeset", "pid", b.pid, "as", *result, "version", w.first)
}

func (w *lockWatch) terminate(b blocker, why string) {
	w.r.a.log.Warn("terminating a backend that blocks a remote writeset", "pid", b.pid, "why", why, "version", w.first)
	if err := w.r.control.exec(w.r.ctx, `SELECT pg_catalog.pg_terminate_backend($1)`, b.pid); err == nil {
		w.r.a.metrics.dooms.WithLabelValues("terminated").Inc()
	}
}
