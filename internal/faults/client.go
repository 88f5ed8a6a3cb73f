package faults

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

const (
	// txnTimeout bounds one transaction: a paused process (SIGSTOP) must
	// not hold a client forever, and a timed-out COMMIT is recorded as an
	// unknown outcome, like any broken connection.
	txnTimeout = 15 * time.Second
	// connectTimeout bounds one connection attempt; a client whose replica is
	// down retries until the workload ends.
	connectTimeout = 5 * time.Second
	// reconnectPause is the wait between connection attempts.
	reconnectPause = 200 * time.Millisecond
)

// endpoint is one replica's PostgreSQL, which clients connect to.
type endpoint struct {
	Replica string
	DSN     string
}

// processes hands out history process ids. As in Jepsen, a client whose
// connection broke continues as a new process: the session (and its
// session guarantees) ended with the connection.
type processes struct{ next atomic.Int64 }

func (p *processes) new() int { return int(p.next.Add(1) - 1) }

// client is one workload session pinned to one replica.
type client struct {
	ep   endpoint
	proc int
	conn *pgx.Conn
	rng  *rand.Rand
	ids  *processes
	// onNotice, if set, receives the connection's notices (mode ed: the
	// WARNING TK006 that tells a session its last fast commit failed).
	onNotice pgconn.NoticeHandler
	// params are run-time parameters of every connection (mode ed's
	// list-append sessions run fast by default, see listAppend.step).
	params map[string]string
}

func newClient(ep endpoint, ids *processes, seed uint64) *client {
	return &client{ep: ep, ids: ids, proc: ids.new(), rng: rand.New(rand.NewPCG(seed, 0x7a5))}
}

// connect (re)opens the connection, retrying until ctx ends.
func (c *client) connect(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(c.ep.DSN)
	if err != nil {
		return err
	}
	cfg.OnNotice = c.onNotice
	for k, v := range c.params {
		cfg.RuntimeParams[k] = v
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, connectTimeout)
		conn, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err == nil {
			c.conn = conn
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(reconnectPause):
		}
	}
}

// drop closes a connection that broke or was abandoned on purpose; the
// next transaction runs as a new process.
func (c *client) drop() {
	if c.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.conn.Close(ctx)
		cancel()
		c.conn = nil
	}
	c.proc = c.ids.new()
}

// errDisconnect is returned by a transaction body that closed its
// connection on purpose (the "client disconnects mid-transaction" fault).
var errDisconnect = errors.New("client disconnected mid-transaction on purpose")

// txn runs body inside BEGIN ... COMMIT and classifies the outcome the way
// Elle needs it (see outcomeOf). It drops the connection when it broke.
//
// After a refusal (57P03: the replica is catching up, or rewinding in mode
// ed) or a broken connection it pauses before returning, as an
// application backs off: clients of the agent's own role, which the
// admission gate lets in (tashkent up's clusters use one role for both),
// retrying at once would keep beginning transactions that a rewind must
// end before it can run.
func (c *client) txn(ctx context.Context, body func(ctx context.Context, conn *pgx.Conn) error) (OpType, error) {
	t, err := c.attempt(ctx, body)
	if err != nil && (c.conn == nil || pgcode.Of(err) == pgcode.CannotConnectNow) {
		select {
		case <-ctx.Done():
		case <-time.After(reconnectPause):
		}
	}
	return t, err
}

func (c *client) attempt(ctx context.Context, body func(ctx context.Context, conn *pgx.Conn) error) (OpType, error) {
	ctx, cancel := context.WithTimeout(ctx, txnTimeout)
	defer cancel()
	if _, err := c.conn.Exec(ctx, "BEGIN"); err != nil {
		return c.failed(ctx, err)
	}
	if err := body(ctx, c.conn); err != nil {
		return c.failed(ctx, err)
	}
	tag, err := c.conn.Exec(ctx, "COMMIT")
	if err != nil {
		t := commitOutcome(err)
		if t == Info || c.conn == nil || c.conn.IsClosed() {
			// A process whose transaction has an unknown outcome never
			// runs another one (Jepsen's rule): the session ends here.
			c.drop()
		}
		return t, err
	}
	if tag.String() != "COMMIT" {
		// PostgreSQL answers COMMIT of a failed transaction with ROLLBACK.
		return Fail, errors.New("COMMIT answered " + tag.String())
	}
	return OK, nil
}

// failed handles an error before COMMIT was sent: the transaction cannot
// have committed (the extension certifies only at COMMIT, Tashkent §6.2 C2).
func (c *client) failed(ctx context.Context, err error) (OpType, error) {
	if c.conn != nil && isPgError(err) && !c.conn.IsClosed() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := c.conn.Exec(rctx, "ROLLBACK"); rerr == nil {
			return Fail, err
		}
	}
	c.drop()
	return Fail, err
}

// commitOutcome classifies an error answering COMMIT. A certification abort
// (40001), constraint or data errors, an ERROR 57P03 (the agent was not
// there to take the writeset, or refused it while recovering: nothing was
// sent for certification; one sent and unanswered is 08007), and in mode
// ed a safe transaction's FATAL TK006 (its version failed before it became
// durable; nothing of it remains) certainly did not commit; anything
// else (a broken connection, 08007 "outcome unknown" or "committed but
// this session gave way", a backend terminated or crashed mid-COMMIT) may
// have committed.
func commitOutcome(err error) OpType {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		if pg.Code == sqlstateTransactionFailed || (pg.Code == pgcode.CannotConnectNow && pg.Severity == "ERROR") {
			return Fail
		}
		switch pg.Code[:2] {
		case "40", "23", "22", "42", "25":
			return Fail
		}
	}
	return Info
}

// sqlstateTransactionFailed is tashkent's TK006: in mode ed, a version
// failed before it became durable.
const sqlstateTransactionFailed = "TK006"

func isPgError(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg)
}
