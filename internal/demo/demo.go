// Package demo runs the short workload `tashkent up` shows on a fresh local
// cluster: a bank of accounts, money transfers from clients spread over
// every replica, and at the end the checks a user can believe in — every
// replica at the same version with the same data (replica.Checksum), and
// the total balance unchanged.
//
// The clients connect straight to the replicas' PostgreSQL servers, as any
// application does (pgx, one connection per client, transactions retried
// on SQLSTATE 40001); the checks read each replica on a connection of
// their own, after the transfers have ended.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// Table is the demo's table.
const Table = "demo_accounts"

// Config configures Run. Zero fields take the defaults in brackets.
type Config struct {
	Duration          time.Duration // of the transfer phase [5s]
	ClientsPerReplica int           // [2]
	Accounts          int           // [1000], each created with balance 1000
	// ConvergeTimeout bounds the waits for replicas to catch up [30s].
	ConvergeTimeout time.Duration
	Out             io.Writer // progress and summary [discarded]
	// Live rewrites the progress line in place (for a terminal) instead of
	// printing one line per second.
	Live bool
}

func (c *Config) defaults() {
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.ClientsPerReplica <= 0 {
		c.ClientsPerReplica = 2
	}
	if c.Accounts <= 1 {
		c.Accounts = 1000
	}
	if c.ConvergeTimeout <= 0 {
		c.ConvergeTimeout = 30 * time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// initialBalance is every account's balance when created.
const initialBalance = 1000

// Result is what the demo saw.
type Result struct {
	Clients   int
	Elapsed   time.Duration
	Committed uint64
	// Aborts counts transfers that failed with SQLSTATE 40001
	// (certification or local serialization failure) and were retried.
	Aborts uint64
	// Deadlocks counts 40P01 failures (also retried).
	Deadlocks uint64
	// SessionsLost counts transfers whose session the server ended (the
	// client reconnected; the transfer's outcome is unknown to it).
	SessionsLost uint64
	// CertificationAborts is how many aborts the certifier decided during
	// the transfers (write-write conflicts between replicas); the rest
	// happened inside a replica (PostgreSQL's first-updater-wins, or a
	// remote writeset taking priority over a local transaction).
	CertificationAborts uint64
	CertifierVersion    uint64
	DurableVersion      uint64
	Versions            []uint64 // per replica, after convergence (or the timeout)
	Converged           bool     // every replica at the certifier's version, all durable
	ChecksumsEqual      bool
	TotalBefore         int64
	TotalsAfter         []int64 // per replica
}

// AbortRate is aborts / attempts.
func (r *Result) AbortRate() float64 {
	if n := r.Committed + r.Aborts + r.Deadlocks; n > 0 {
		return float64(r.Aborts+r.Deadlocks) / float64(n)
	}
	return 0
}

// BalanceUnchanged reports whether every replica holds the total the demo
// started with.
func (r *Result) BalanceUnchanged() bool {
	if len(r.TotalsAfter) == 0 {
		return false
	}
	for _, t := range r.TotalsAfter {
		if t != r.TotalBefore {
			return false
		}
	}
	return true
}

// ErrNotInSync is returned (wrapped) when the replicas did not converge to
// the same version and data in time, or the total balance changed.
var ErrNotInSync = errors.New("replicas not in sync")

// Run runs the demo against the cluster st and prints its progress and a
// summary to cfg.Out. It returns an error wrapping ErrNotInSync when the
// replicas do not converge within cfg.ConvergeTimeout or disagree.
func Run(ctx context.Context, st *cluster.State, cfg Config) (*Result, error) {
	cfg.defaults()
	d := &run{st: st, cfg: cfg, res: &Result{}}
	defer d.close()
	if err := d.connectReplicas(ctx); err != nil {
		return nil, err
	}
	if err := d.setup(ctx); err != nil {
		return nil, err
	}
	if err := d.waitCaughtUp(ctx); err != nil {
		return d.res, err
	}
	if err := d.transfers(ctx); err != nil {
		return d.res, err
	}
	err := d.verify(ctx)
	d.summary()
	return d.res, err
}

type run struct {
	st  *cluster.State
	cfg Config
	res *Result
	// certAbortsBefore is the certifier's abort count when transfers start.
	certAbortsBefore uint64
	// direct holds one connection to each replica for versions and checks,
	// used by one goroutine at a time.
	direct []*pgx.Conn
}

func (d *run) printf(format string, args ...any) { fmt.Fprintf(d.cfg.Out, format, args...) }

func (d *run) close() {
	for _, c := range d.direct {
		if c != nil {
			c.Close(context.Background())
		}
	}
}

func (d *run) connectReplicas(ctx context.Context) error {
	for _, r := range d.st.Replicas {
		c, err := pgx.Connect(ctx, r.DSN())
		if err != nil {
			return fmt.Errorf("%s: connect to %s: %w", r.Name, r.URI(), err)
		}
		d.direct = append(d.direct, c)
	}
	return nil
}

// setup creates and fills the table on the first replica (it is kept
// across runs: `up` on an existing cluster adds what is missing); the
// other replicas receive it in the global order.
func (d *run) setup(ctx context.Context) error {
	r := d.st.Replicas[0]
	d.printf("\nDemo: table %s, %d accounts with balance %d, created on %s (kept if it exists).\n",
		Table, d.cfg.Accounts, initialBalance, r.Name)
	conn, err := pgx.Connect(ctx, r.DSN())
	if err != nil {
		return fmt.Errorf("demo: connect to %s: %w", r.Name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+Table+` (id int PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
		return fmt.Errorf("demo: create %s on %s: %w", Table, r.Name, err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+Table+` (id, balance) SELECT g, $1 FROM generate_series(1, $2::int) AS g
		ON CONFLICT (id) DO NOTHING`, initialBalance, d.cfg.Accounts); err != nil {
		return fmt.Errorf("demo: insert accounts on %s: %w", r.Name, err)
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(balance), 0)::bigint FROM `+Table).Scan(&d.res.TotalBefore); err != nil {
		return fmt.Errorf("demo: total balance on %s: %w", r.Name, err)
	}
	return nil
}

// versions reads every replica's version from its database.
func (d *run) versions(ctx context.Context) ([]uint64, error) {
	out := make([]uint64, len(d.direct))
	for i, c := range d.direct {
		v, err := cluster.ReadVersion(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.st.Replicas[i].Name, err)
		}
		out[i] = v
	}
	return out, nil
}

func (d *run) formatVersions(vs []uint64) string {
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "%s %d", d.st.Replicas[i].Name, v)
	}
	return b.String()
}

// waitCaughtUp waits until every replica holds the certifier's durable
// version as of now, so that the transfers start from the full table
// everywhere.
func (d *run) waitCaughtUp(ctx context.Context) error {
	st, err := d.st.QueryCertifier(ctx, d.st.CertifierAddr())
	if err != nil {
		return err
	}
	target := st.DurableVersion
	d.certAbortsBefore = st.Aborts
	deadline := time.Now().Add(d.cfg.ConvergeTimeout)
	for {
		vs, err := d.versions(ctx)
		if err != nil {
			return err
		}
		if slices.Min(vs) >= target {
			d.printf("All replicas hold version %d (the certifier's durable version): %s.\n", target, d.formatVersions(vs))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: after %s the replicas hold %s, not the durable version %d",
				ErrNotInSync, d.cfg.ConvergeTimeout, d.formatVersions(vs), target)
		}
		if err := ctxtime.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// transfers runs the clients for cfg.Duration, printing progress each
// second.
func (d *run) transfers(ctx context.Context) error {
	type client struct {
		name string
		dsn  string
		conn *pgx.Conn
	}
	var clients []*client
	defer func() {
		for _, c := range clients {
			if c.conn != nil {
				c.conn.Close(context.Background())
			}
		}
	}()
	for _, r := range d.st.Replicas {
		for k := range d.cfg.ClientsPerReplica {
			c, err := pgx.Connect(ctx, r.DSN())
			if err != nil {
				return fmt.Errorf("demo: client %d of %s: connect: %w", k+1, r.Name, err)
			}
			clients = append(clients, &client{name: fmt.Sprintf("%s/client%d", r.Name, k+1), dsn: r.DSN(), conn: c})
		}
	}
	d.res.Clients = len(clients)
	d.printf("Transfers for %s from %d clients (%d per replica, connected to its PostgreSQL); a transfer aborted with 40001 is retried.\n",
		d.cfg.Duration, len(clients), d.cfg.ClientsPerReplica)

	var (
		committed, aborts, deadlocks, lost atomic.Uint64
		stop                               atomic.Bool
		errMu                              sync.Mutex
		firstErr                           error
	)
	start := time.Now()
	end := start.Add(d.cfg.Duration)
	seed := uint64(start.UnixNano())
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for !stop.Load() && time.Now().Before(end) {
				a := 1 + rng.IntN(d.cfg.Accounts)
				b := 1 + rng.IntN(d.cfg.Accounts-1)
				if b >= a {
					b++
				}
				amount := int64(1 + rng.IntN(100))
				for !stop.Load() {
					err := transfer(ctx, c.conn, a, b, amount)
					if err == nil {
						committed.Add(1)
						break
					}
					switch pgcode.Of(err) {
					case pgcode.SerializationFailure:
						aborts.Add(1)
						continue
					case pgcode.DeadlockDetected:
						deadlocks.Add(1)
						continue
					}
					if c.conn.IsClosed() && ctx.Err() == nil {
						// The server ended the session: as an application
						// would, reconnect and go on. The transfer in flight
						// may have committed or not; the total holds either way.
						lost.Add(1)
						if c.conn, err = reconnect(ctx, c.dsn); err == nil {
							break
						}
					}
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("demo: %s: transfer %d -> %d: %w", c.name, a, b, err)
					}
					errMu.Unlock()
					stop.Store(true)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	progress := func(final bool) {
		c, a := committed.Load(), aborts.Load()+deadlocks.Load()
		rate := 0.0
		if c+a > 0 {
			rate = 100 * float64(a) / float64(c+a)
		}
		line := fmt.Sprintf("  %4.1fs  commits %d  aborts %d (%.1f%%)  versions: ", time.Since(start).Seconds(), c, a, rate)
		if vs, err := d.versions(ctx); err == nil {
			line += d.formatVersions(vs)
		} else {
			line += err.Error()
		}
		if d.cfg.Live {
			d.printf("\r\033[K%s", line)
			if final {
				d.printf("\n")
			}
		} else {
			d.printf("%s\n", line)
		}
	}
	ctxDone := ctx.Done()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			progress(false)
		case <-ctxDone:
			stop.Store(true)
			ctxDone = nil
		}
	}
	progress(true)
	d.res.Elapsed = time.Since(start)
	d.res.Committed, d.res.Aborts, d.res.Deadlocks, d.res.SessionsLost = committed.Load(), aborts.Load(), deadlocks.Load(), lost.Load()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// reconnectLimit bounds a client's attempts to reconnect to its replica.
const reconnectLimit = 10 * time.Second

func reconnect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	deadline := time.Now().Add(reconnectLimit)
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil || time.Now().After(deadline) {
			return conn, err
		}
		if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// transfer moves amount from account a to account b in one transaction.
// The rows are updated in id order so that two local transfers never wait
// for each other crosswise (a deadlock would cost deadlock_timeout).
func transfer(ctx context.Context, conn *pgx.Conn, a, b int, amount int64) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	first, firstDelta, second, secondDelta := a, -amount, b, amount
	if b < a {
		first, firstDelta, second, secondDelta = b, amount, a, -amount
	}
	const q = `UPDATE ` + Table + ` SET balance = balance + $2 WHERE id = $1`
	if _, err := tx.Exec(ctx, q, first, firstDelta); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q, second, secondDelta); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// verify waits until every replica holds the certifier's version and that
// version is durable, then compares checksums and totals.
func (d *run) verify(ctx context.Context) error {
	deadline := time.Now().Add(d.cfg.ConvergeTimeout)
	for {
		st, err := d.st.QueryCertifier(ctx, d.st.CertifierAddr())
		if err != nil {
			return err
		}
		vs, err := d.versions(ctx)
		if err != nil {
			return err
		}
		d.res.CertifierVersion, d.res.DurableVersion, d.res.Versions = st.Version, st.DurableVersion, vs
		if st.Aborts >= d.certAbortsBefore {
			d.res.CertificationAborts = st.Aborts - d.certAbortsBefore
		}
		if st.Version == st.DurableVersion && slices.Min(vs) == st.Version && slices.Max(vs) == st.Version {
			d.res.Converged = true
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: after %s the replicas hold %s; the certifier is at version %d, durable %d",
				ErrNotInSync, d.cfg.ConvergeTimeout, d.formatVersions(vs), st.Version, st.DurableVersion)
		}
		if err := ctxtime.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	var sums []map[string]string
	for i, c := range d.direct {
		sum, err := replica.Checksum(ctx, c)
		if err != nil {
			return fmt.Errorf("%s: %w", d.st.Replicas[i].Name, err)
		}
		sums = append(sums, sum)
		var total int64
		if err := c.QueryRow(ctx, `SELECT coalesce(sum(balance), 0)::bigint FROM `+Table).Scan(&total); err != nil {
			return fmt.Errorf("%s: total balance: %w", d.st.Replicas[i].Name, err)
		}
		d.res.TotalsAfter = append(d.res.TotalsAfter, total)
	}
	d.res.ChecksumsEqual = true
	for _, s := range sums[1:] {
		d.res.ChecksumsEqual = d.res.ChecksumsEqual && maps.Equal(s, sums[0])
	}
	switch {
	case !d.res.ChecksumsEqual:
		return fmt.Errorf("%w: same version %d but different data (checksums %v)", ErrNotInSync, d.res.CertifierVersion, sums)
	case !d.res.BalanceUnchanged():
		return fmt.Errorf("%w: total balance was %d, now %v", ErrNotInSync, d.res.TotalBefore, d.res.TotalsAfter)
	}
	return nil
}

func (d *run) summary() {
	r := d.res
	secs := r.Elapsed.Seconds()
	if secs <= 0 {
		secs = 1
	}
	d.printf("\nDemo result (%s of transfers, %d clients):\n", r.Elapsed.Round(100*time.Millisecond), r.Clients)
	d.printf("  committed       %d transactions (%.0f/s)\n", r.Committed, float64(r.Committed)/secs)
	certAborts := min(r.CertificationAborts, r.Aborts)
	d.printf("  aborted         %d with SQLSTATE 40001, all retried (abort rate %.2f%%; %d by certification, %d inside a replica)",
		r.Aborts, 100*r.AbortRate(), certAborts, r.Aborts-certAborts)
	if r.Deadlocks > 0 {
		d.printf("; %d deadlocks (40P01)", r.Deadlocks)
	}
	if r.SessionsLost > 0 {
		d.printf("\n  sessions lost   %d ended by the server during a transfer (reconnected; outcome unknown to the client, the total holds either way)", r.SessionsLost)
	}
	d.printf("\n  certifier       version %d, durable version %d\n", r.CertifierVersion, r.DurableVersion)
	sync := "NOT in sync"
	if r.Converged && r.ChecksumsEqual {
		sync = "in sync: same version, equal checksums"
	} else if r.Converged {
		sync = "same version but DIFFERENT data"
	}
	d.printf("  replicas        %s: %s\n", d.formatVersions(r.Versions), sync)
	if len(r.TotalsAfter) > 0 {
		word := "unchanged"
		if !r.BalanceUnchanged() {
			word = fmt.Sprintf("CHANGED (%v)", r.TotalsAfter)
		}
		d.printf("  total balance   %d before, %d after on every replica: %s\n", r.TotalBefore, r.TotalsAfter[0], word)
	}
}
