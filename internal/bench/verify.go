package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/replica"
)

// convergeTimeout bounds the wait for a system's replicas to commit every
// version the certifier assigned, before a run or at the end.
const convergeTimeout = 2 * time.Minute

// verifyAll checks, after the last run, that the replicas of every
// tashkent system with more than one replica hold the same data: the
// same version and the same checksum of every table (replica.Checksum). A
// benchmark of replicas that diverged measured something else than
// replication.
func (r *runner) verifyAll(ctx context.Context) error {
	var errs []error
	for _, s := range r.systems {
		if !s.kind.tashkent() || len(s.pgs) < 2 {
			continue
		}
		t0 := time.Now()
		v, err := s.verify(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.progress("verify %-16s %d replicas at version %d, every table's checksum equal (%s)", s.label, len(s.pgs), v,
			time.Since(t0).Round(100*time.Millisecond))
	}
	return errors.Join(errs...)
}

// verify waits until every replica has committed every version the
// certifier assigned, then compares their checksums.
func (s *system) verify(ctx context.Context) (uint64, error) {
	v, err := s.converge(ctx, convergeTimeout)
	if err != nil {
		return 0, err
	}
	var first map[string]string
	for i, pg := range s.pgs {
		sum, got, err := checksumAt(ctx, pg.DSN("postgres"))
		if err != nil {
			return 0, fmt.Errorf("%s: replica %d: checksum: %w", s.label, i+1, err)
		}
		if got != v {
			return 0, fmt.Errorf("%s: replica %d at version %d after converging to %d: it went on committing", s.label, i+1, got, v)
		}
		if i == 0 {
			first = sum
			continue
		}
		if !maps.Equal(first, sum) {
			return 0, fmt.Errorf("%s: replica %d differs from replica 1 at version %d: %s", s.label, i+1, v, diffSums(first, sum))
		}
	}
	return v, nil
}

// checksumAt reads the replica's tables' checksums and its version.
func checksumAt(ctx context.Context, dsn string) (map[string]string, uint64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(context.Background())
	sum, err := replica.Checksum(ctx, conn)
	if err != nil {
		return nil, 0, err
	}
	v, err := committedVersion(ctx, conn)
	return sum, v, err
}

// diffSums names the tables whose checksums differ.
func diffSums(a, b map[string]string) string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(a)) {
		if b[t] != a[t] {
			out = append(out, fmt.Sprintf("%s %q against %q", t, b[t], a[t]))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[t]; !ok {
			out = append(out, t+" only there")
		}
	}
	return fmt.Sprint(out)
}
