package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// run is the agent serving one life of its database: from a start
// (start.go) until the database restarts or is lost. A new run starts
// from what the database kept (Tashkent §7.1, case 2).
type run struct {
	a      *Agent
	ctx    context.Context
	cancel context.CancelFunc

	apply   *pgx.Conn // the applier's connection; the applier goroutine's once it runs
	control *control
	applier *replica.Applier
	cert    *certclient.Client
	history *history // the replica's runs by epoch (history.go)
	// admission: whether the certifier admitted the history, and its
	// durable version as the admitted streams said (admission.go)
	admission admission

	started        string // the database's life (databaseIdentitySQL)
	generation     uint64 // the agent generation of the first registration
	registered     chan struct{}
	registerOnce   sync.Once
	certifyTimeout time.Duration
	// refusal is why client writes are refused now (refusal.go); nil or
	// "": they are not.
	refusal atomic.Pointer[string]

	// barriers takes pins at barriers (barrierpin.go).
	barriers *barrierPinner

	lostOnce sync.Once
	lost     chan error // the run's end: the database is lost
	wg       sync.WaitGroup
}

func newRun(a *Agent, ctx context.Context) *run {
	rctx, cancel := context.WithCancel(ctx)
	applier := replica.NewApplier()
	applier.Logger = a.log
	applier.Copies = &a.metrics.copies
	r := &run{a: a, ctx: rctx, cancel: cancel, control: &control{}, applier: applier, history: &history{},
		registered: make(chan struct{}), lost: make(chan error, 1), certifyTimeout: certifyTimeoutDefault}
	r.barriers = newBarrierPinner(r)
	return r
}

// fail ends the run: its database is lost (restarted, crashed, or lost
// commits), and the agent starts again.
func (r *run) fail(err error) {
	r.lostOnce.Do(func() {
		r.lost <- err
		r.cancel()
	})
}

// wait blocks until the run fails or ctx ends.
func (r *run) wait(ctx context.Context) error {
	select {
	case err := <-r.lost:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// go runs f in a goroutine of the run.
func (r *run) spawn(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// close stops the run's goroutines and closes its connections.
func (r *run) close() {
	r.cancel()
	r.wg.Wait()
	if r.cert != nil {
		r.cert.Close()
	}
	bg := context.Background()
	if r.apply != nil {
		r.apply.Close(bg)
	}
	r.control.close(bg)
}

// closeGate refuses new clients (57P03) with reason: no agent keeps the
// replica up to date any more.
func (r *run) closeGate(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if err := r.control.exec(ctx, `SELECT tashkent.set_admitting(false, $1)`, reason); err != nil {
		r.a.log.Warn("could not close the admission gate", "err", err)
	}
}

// sameDatabase reports whether conn reaches the database this run
// started on, holding every version the agent counts committed: the same
// postmaster, and a version not below the agent's. The second check
// catches a crash of a backend, after which PostgreSQL reinitializes
// under the same postmaster and may lose commits (synchronous_commit=off).
func (r *run) sameDatabase(ctx context.Context, conn *pgx.Conn) (uint64, bool) {
	committed := r.a.seq.committed()
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var started string
	if err := conn.QueryRow(qctx, databaseIdentitySQL).Scan(&started); err != nil || started != r.started {
		return 0, false
	}
	var v int64
	if err := conn.QueryRow(qctx, committedVersionSQL).Scan(&v); err != nil || uint64(v) < committed {
		return 0, false
	}
	return uint64(v), true
}

// errLostCommits says the database holds fewer versions than the agent
// counted committed: it lost commits (a crash with synchronous_commit=off
// reinitialized it under the same postmaster) and must be recovered.
var errLostCommits = errors.New("the database lost commits")

// readCommitted reads the database's version and hands it to the order.
// The version the order counted committed is taken before the question,
// so that a lower answer means the database went back, not that the
// answer is older than the count.
func (r *run) readCommitted() (uint64, error) {
	floor := r.a.seq.committed()
	v, err := r.control.committedVersion(r.ctx)
	if err != nil {
		return 0, err
	}
	if v < floor {
		return v, fmt.Errorf("%w: its version is %d, below the committed version %d", errLostCommits, v, floor)
	}
	r.a.seq.observe(v)
	return v, nil
}

// reconnectControl replaces a lost control connection if the database is
// the same; otherwise the run fails.
func (r *run) reconnectControl(cause error) bool {
	if errors.Is(cause, errLostCommits) {
		r.fail(cause)
		return false
	}
	conn, err := r.a.connect(r.ctx, controlApplicationName)
	if err == nil {
		if v, ok := r.sameDatabase(r.ctx, conn); ok {
			r.control.replace(r.ctx, conn)
			r.a.seq.observe(v)
			r.a.log.Warn("lost the agent's control connection; reconnected (the database did not restart)", "err", cause)
			return true
		}
		conn.Close(context.Background())
	}
	r.fail(errors.Join(cause, errors.New("the database restarted, lost commits or cannot be reached")))
	return false
}
