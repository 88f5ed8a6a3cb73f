package bench

// Seeding: a tashkent cluster made from an existing database.
//
// Loading TPC-B through a proxy makes every row a captured change (a
// trigger per row at the first replica), a writeset at the certifier and
// an applied row at every other replica: about 10,000 rows a second here,
// so scale 100 (10 million accounts) would take a quarter of an hour
// before the first measured second. A deployment that starts from an
// existing database restores the same dump into every replica before
// tashkent runs, and the proxies install their capture triggers on the
// tables they find (replica.Install), all replicas at version 0. The
// suite does the same for TPC-B: it creates the identical, deterministic
// pgbench data (fillTPCB: generate_series, zero balances, no random
// values) straight in every replica, in parallel, then starts the
// certifier and the proxies. The data measured is the same as when loaded
// through the proxies; `tashkent bench pgbench` still loads through them.

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// seedReplicas runs s.seed on every replica's PostgreSQL directly, in
// parallel; nothing when there is no seed.
func (s *system) seedReplicas(ctx context.Context) error {
	if s.seed == nil {
		return nil
	}
	errs := make([]error, len(s.pgs))
	var wg sync.WaitGroup
	for i, pg := range s.pgs {
		wg.Go(func() {
			if err := s.seed(ctx, pg.DSN("postgres")); err != nil {
				errs[i] = fmt.Errorf("%s: seed replica %d: %w", s.label, i+1, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// seeds reports whether the suite seeds s rather than loading it through
// its first endpoint.
func (r *suiteRunner) seeds(s *system) bool {
	return r.scfg.Workload == TPCB && s.kind.tashkent()
}
