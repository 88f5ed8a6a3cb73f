package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// session is one replica's connection, with a REPEATABLE READ, READ ONLY
// transaction open at the common version once Snapshot has run.
type session struct {
	name string
	conn *pgx.Conn
}

// sessionSettings make every replica print a row the same way: row hashes
// are taken over the text of each row.
var sessionSettings = []string{
	`SET TimeZone = 'UTC'`,
	`SET DateStyle = 'ISO, YMD'`,
	`SET IntervalStyle = 'postgres'`,
	`SET extra_float_digits = 1`,
	`SET bytea_output = 'hex'`,
	`SET statement_timeout = 0`,
	`SET lock_timeout = 0`,
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

func dial(ctx context.Context, r Replica) (*pgx.Conn, error) {
	if r.Config != nil {
		return pgx.ConnectConfig(ctx, r.Config.Copy())
	}
	return pgx.Connect(ctx, r.DSN)
}

func closeAll(ss []*session) {
	for _, s := range ss {
		if s != nil {
			s.conn.Close(context.Background())
		}
	}
}

// each runs f on every session at once.
func each(ctx context.Context, ss []*session, f func(ctx context.Context, s *session) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range ss {
		g.Go(func() error { return f(gctx, s) })
	}
	return g.Wait()
}

// errMoved: a replica's snapshot did not hold the version its commits were
// held at (its hold ended early); the round is tried again.
var errMoved = errors.New("a replica's commits moved while held")

// snapshot opens, on every replica, a transaction whose snapshot holds
// exactly one common version, and returns it with how long commits were
// held. Replicas are first brought close to each other without a hold
// (the laggards wait for the leader's version), so that the hold lasts a
// few round trips: one round holds each replica after what it has under
// way, the highest of those is the common version, a second round moves
// every hold to it and waits for it, then each replica takes its snapshot
// and releases its hold.
func snapshot(ctx context.Context, ss []*session, holdMax time.Duration) (uint64, time.Duration, error) {
	if err := align(ctx, ss, holdMax); err != nil {
		return 0, 0, err
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var v uint64
		var held time.Duration
		v, held, err = holdAndSnapshot(ctx, ss, holdMax)
		if err == nil {
			return v, held, nil
		}
		if !errors.Is(err, errMoved) {
			return 0, 0, err
		}
	}
	return 0, 0, err
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
	top := maxOf(versions)
	return each(ctx, ss, func(ctx context.Context, s *session) error {
		_, err := s.conn.Exec(ctx, `SELECT tashkent.wait_for_version($1, $2)`, int64(top), timeout.Milliseconds())
		if err != nil {
			return fmt.Errorf("%s did not reach version %d: %w", s.name, top, err)
		}
		return nil
	})
}

func holdAndSnapshot(ctx context.Context, ss []*session, holdMax time.Duration) (uint64, time.Duration, error) {
	start := time.Now()
	defer release(ss)
	at, err := holdAll(ctx, ss, 0, holdMax)
	if err != nil {
		return 0, 0, err
	}
	v := maxOf(at)
	if _, err := holdAll(ctx, ss, v, holdMax); err != nil {
		return 0, 0, err
	}
	err = each(ctx, ss, func(ctx context.Context, s *session) error {
		return begin(ctx, s, v)
	})
	if err != nil {
		rollbackAll(ss)
		return 0, 0, err
	}
	return v, time.Since(start), nil
}

// holdAll holds every replica's commits after version v (or what it has
// under way) and returns the versions they are held after.
func holdAll(ctx context.Context, ss []*session, v uint64, holdMax time.Duration) ([]uint64, error) {
	at := make([]uint64, len(ss))
	err := each(ctx, ss, func(ctx context.Context, s *session) error {
		var got int64
		err := s.conn.QueryRow(ctx, `SELECT tashkent.hold_commits($1, $2)`, int64(v), holdMax.Milliseconds()).Scan(&got)
		if err != nil {
			return fmt.Errorf("hold the commits of %s: %w", s.name, err)
		}
		at[indexOf(ss, s)] = uint64(got)
		return nil
	})
	return at, err
}

// begin opens the session's transaction and checks that its snapshot holds
// version v, then lets the replica commit again.
func begin(ctx context.Context, s *session, v uint64) error {
	if _, err := s.conn.Exec(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY`); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	var got int64
	if err := s.conn.QueryRow(ctx, `SELECT tashkent.snapshot_version()`).Scan(&got); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	if uint64(got) != v {
		return fmt.Errorf("%w: %s's snapshot holds version %d, not %d", errMoved, s.name, got, v)
	}
	_, err := s.conn.Exec(ctx, `SELECT tashkent.release_commits()`)
	return err
}

// release ends every hold; a session whose connection failed has lost its
// hold with it.
func release(ss []*session) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range ss {
		if !s.conn.IsClosed() {
			s.conn.Exec(ctx, `SELECT tashkent.release_commits()`)
		}
	}
}

func rollbackAll(ss []*session) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range ss {
		if !s.conn.IsClosed() {
			s.conn.Exec(ctx, `ROLLBACK`)
		}
	}
}

func indexOf(ss []*session, s *session) int {
	for i := range ss {
		if ss[i] == s {
			return i
		}
	}
	panic("verify: unknown session")
}

func maxOf(vs []uint64) uint64 {
	var m uint64
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}
