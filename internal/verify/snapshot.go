package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// session is one replica's connection, with a REPEATABLE READ, READ ONLY
// transaction open at the common version once snapshot has run, and the
// tables it compares, locked against DDL and TRUNCATE.
type session struct {
	name   string
	conn   *pgx.Conn
	tables []Table
}

// sessionSettings make every replica print a row the same way (rows are
// hashed over their text), and keep settings of the role or database
// from getting in the way: a sync_wait would wait behind the session's
// own hold; an idle-in-transaction timeout would end a session that waits
// for the slowest replica's scan.
var sessionSettings = []string{
	`SET TimeZone = 'UTC'`,
	`SET DateStyle = 'ISO, YMD'`,
	`SET IntervalStyle = 'postgres'`,
	`SET extra_float_digits = 1`,
	`SET bytea_output = 'hex'`,
	`SET lc_monetary = 'C'`,
	`SET search_path = pg_catalog`,
	`SET statement_timeout = 0`,
	`SET lock_timeout = 0`,
	`SET idle_in_transaction_session_timeout = 0`,
	`SET tashkent.sync_wait = off`,
}

func connect(ctx context.Context, rs []Replica) ([]*session, error) {
	ss := make([]*session, len(rs))
	g, gctx := errgroup.WithContext(ctx)
	for i, r := range rs {
		g.Go(func() error {
			conn, err := dial(gctx, r)
			if err != nil {
				return fmt.Errorf("connect to %s: %w", r.Name, err)
			}
			ss[i] = &session{name: r.Name, conn: conn}
			for _, q := range sessionSettings {
				if _, err := conn.Exec(gctx, q); err != nil {
					return fmt.Errorf("%s: %s: %w", r.Name, q, err)
				}
			}
			return nil
		})
	}
	err := g.Wait()
	if err != nil {
		closeAll(ss)
	}
	return ss, err
}

// dial connects with synchronous_commit off: in mode ed a safe read-only
// transaction waits until what it read is durable, and verify compares
// what the replicas hold, durable or not.
func dial(ctx context.Context, r Replica) (*pgx.Conn, error) {
	cfg := r.Config
	if cfg != nil {
		cfg = cfg.Copy()
	} else {
		var err error
		if cfg, err = pgx.ParseConfig(r.DSN); err != nil {
			return nil, err
		}
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	return pgx.ConnectConfig(ctx, cfg)
}

// closeAll closes every connection; a replica's hold ends with its
// session.
func closeAll(ss []*session) {
	for _, s := range ss {
		if s != nil {
			s.conn.Close(context.Background())
		}
	}
}

// each runs f on every session at once. The first error cancels the
// others' statements, which closes their connections: a caller that
// gets an error closes every session and starts again.
func each(ctx context.Context, ss []*session, f func(ctx context.Context, s *session) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range ss {
		g.Go(func() error { return f(gctx, s) })
	}
	return g.Wait()
}

// errRetry marks what a new attempt may get past: a replica's snapshot
// that did not hold the common version (its hold lapsed), a table locked
// by a DDL or TRUNCATE under way, a replica that did not reach the common
// version in time.
var errRetry = errors.New("try again")

// snapshot opens, on every replica, a transaction whose snapshot holds
// exactly one common version, and returns it with how long commits were
// held. Replicas are first brought close to each other without a hold
// (each waits for the highest version any of them has), so that the hold
// lasts a few round trips: one round holds each replica after what it has
// under way, the highest of those is the common version, a second round
// moves every hold to it and waits for it, then each replica takes its
// snapshot, locks the tables it compares against DDL and TRUNCATE (which
// are not MVCC-safe: one committed after the snapshot would change what
// the snapshot reads), and releases its hold.
func snapshot(ctx context.Context, ss []*session, o Options) (uint64, time.Duration, error) {
	if err := align(ctx, ss, o.HoldMax); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	at, err := holdAll(ctx, ss, 0, o)
	if err != nil {
		return 0, 0, err
	}
	v := slices.Max(at) // two replicas at least (Verify)
	if _, err := holdAll(ctx, ss, v, o); err != nil {
		return 0, 0, err
	}
	err = each(ctx, ss, func(ctx context.Context, s *session) error { return begin(ctx, s, v) })
	return v, time.Since(start), err
}

// align waits on every replica for the highest version any of them has.
func align(ctx context.Context, ss []*session, timeout time.Duration) error {
	versions := make([]uint64, len(ss))
	err := each(ctx, ss, func(ctx context.Context, s *session) error {
		i := indexOf(ss, s)
		return s.conn.QueryRow(ctx, `SELECT tashkent.committed_version()`).Scan(&versions[i])
	})
	if err != nil {
		return fmt.Errorf("read the replicas' versions: %w", err)
	}
	top := slices.Max(versions)
	return each(ctx, ss, func(ctx context.Context, s *session) error {
		_, err := s.conn.Exec(ctx, `SELECT tashkent.wait_for_version($1, $2)`, int64(top), timeout.Milliseconds())
		if err != nil {
			return fmt.Errorf("%s did not reach version %d: %w", s.name, top, err)
		}
		return nil
	})
}

// holdAll holds every replica's commits after version v (or what it has
// under way) and returns the versions they are held after. A replica that
// does not get there within o.reach() ends the round: the others are not
// kept held for the whole hold time.
func holdAll(ctx context.Context, ss []*session, v uint64, o Options) ([]uint64, error) {
	rctx, cancel := context.WithTimeout(ctx, o.reach())
	defer cancel()
	at := make([]uint64, len(ss))
	err := each(rctx, ss, func(ctx context.Context, s *session) error {
		var got int64
		err := s.conn.QueryRow(ctx, `SELECT tashkent.hold_commits($1, $2)`, int64(v), o.HoldMax.Milliseconds()).Scan(&got)
		if pgcode.Of(err) == pgcode.ObjectInUse {
			// another session holds the replica for a moment: a verify,
			// or the agent pinning a snapshot at a TRUNCATE or DDL
			return fmt.Errorf("%w: hold the commits of %s: %w", errRetry, s.name, err)
		}
		if err != nil {
			return fmt.Errorf("hold the commits of %s: %w", s.name, err)
		}
		at[indexOf(ss, s)] = uint64(got)
		return nil
	})
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w: a replica did not reach version %d within %s", errRetry, v, o.reach())
	}
	return at, err
}

// begin opens the session's transaction, checks that its snapshot holds
// version v, locks the tables it compares and lets the replica commit
// again.
func begin(ctx context.Context, s *session, v uint64) error {
	if _, err := s.conn.Exec(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY`); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	var got int64
	if err := s.conn.QueryRow(ctx, `SELECT tashkent.snapshot_version()`).Scan(&got); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	if uint64(got) != v {
		return fmt.Errorf("%w: %s's snapshot holds version %d, not %d (its hold lapsed)", errRetry, s.name, got, v)
	}
	tables, err := listTables(ctx, s)
	if err != nil {
		return err
	}
	if err := lockTables(ctx, s, tables); err != nil {
		return err
	}
	s.tables = tables
	_, err = s.conn.Exec(ctx, `SELECT tashkent.release_commits()`)
	return err
}

// lockTables takes ACCESS SHARE locks on the tables, without waiting: a
// DDL or TRUNCATE holds one of them, under way on this replica.
func lockTables(ctx context.Context, s *session, tables []Table) error {
	if len(tables) == 0 {
		return nil
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Name
	}
	_, err := s.conn.Exec(ctx, `LOCK TABLE `+strings.Join(names, ", ")+` IN ACCESS SHARE MODE NOWAIT`)
	if pgcode.Of(err) == pgcode.LockNotAvailable {
		return fmt.Errorf("%w: %s: a DDL or TRUNCATE is under way: %v", errRetry, s.name, err)
	}
	if err != nil {
		return fmt.Errorf("%s: lock the tables: %w", s.name, err)
	}
	return nil
}

func indexOf(ss []*session, s *session) int {
	for i := range ss {
		if ss[i] == s {
			return i
		}
	}
	panic("verify: unknown session")
}
