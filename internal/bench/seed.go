package bench

// Seeding: a tashkent cluster made from an existing database.
//
// A deployment that starts from an existing database restores the same
// dump into every replica before tashkent runs; the agent's CREATE
// EXTENSION then installs the capture triggers on the tables it finds, and
// every replica starts at version 0 with the same rows. The bench does the
// same: it creates the workload's identical, deterministic data (TPC-B by
// fillTPCB: generate_series, zero balances, no random values; the tables
// of allupdates, contention, mixed and readmostly by Workload.setup) straight in
// every replica, in parallel, before the certifier and the agents start.
// Nothing of it is certified or applied: loaded through a replica with its
// agent running, every row would be a captured change, part of a writeset
// at the certifier and an applied row at every other replica, which at
// TPC-B scale 100 (10 million accounts) takes long before the first
// measured second, and measures loading, not the workload.
//
// sysbench's prepare writes random strings, different on every replica:
// its tables are loaded through the first replica once the agents serve,
// and reach the others as writesets.

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// seedReplicas runs s.seed on every replica's PostgreSQL directly, in
// parallel; nothing when there is no seed. It runs before the agents
// start: the database has no tashkent extension yet, so nothing is
// captured.
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

// seedFor is how the suite seeds s: the workload's loader for a tashkent
// system whose workload data is deterministic, nil otherwise (loaded
// through the system's first endpoint once it runs).
func (r *suiteRunner) seedFor(s *system) func(ctx context.Context, dsn string) error {
	w := r.scfg.Workload
	switch {
	case !s.kind.tashkent() || w.sysbench():
		return nil
	case w.tpcb():
		return r.loadTPCB
	}
	return func(ctx context.Context, dsn string) error { return w.setup(ctx, dsn, r.maxClients) }
}
