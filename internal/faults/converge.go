package faults

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// convergePoll is the pause between two convergence checks.
const convergePoll = 200 * time.Millisecond

// replicaView is what one replica's PostgreSQL holds.
type replicaView struct {
	version   uint64
	checksums map[string]string
}

// converge waits until every replica holds the certifier's latest version
// and all replicas have equal per-table checksums, and returns how long
// that took. The workload must have stopped.
func converge(ctx context.Context, st *cluster.State, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		ok, why, err := convergedOnce(ctx, st)
		if ok {
			return time.Since(start), nil
		}
		if err != nil {
			why = err.Error()
		}
		last = why
		if ctxtime.Sleep(ctx, convergePoll) != nil {
			return time.Since(start), fmt.Errorf("replicas did not converge within %s: %s", timeout, last)
		}
	}
}

func convergedOnce(ctx context.Context, st *cluster.State) (bool, string, error) {
	cs, err := cluster.QueryCertifier(ctx, st.CertifierAddr())
	if err != nil {
		return false, "", err
	}
	var first *replicaView
	var firstName string
	for _, r := range st.Replicas {
		v, err := readReplica(ctx, r)
		if err != nil {
			return false, "", fmt.Errorf("%s: %w", r.Name, err)
		}
		if v.version != cs.Version {
			return false, fmt.Sprintf("%s holds version %d, the certifier is at %d", r.Name, v.version, cs.Version), nil
		}
		if first == nil {
			first, firstName = v, r.Name
			continue
		}
		if !maps.Equal(first.checksums, v.checksums) {
			return false, fmt.Sprintf("checksums differ between %s %v and %s %v", firstName, first.checksums, r.Name, v.checksums), nil
		}
	}
	return true, "", nil
}

func readReplica(ctx context.Context, r *cluster.Replica) (*replicaView, error) {
	conn, err := pgx.Connect(ctx, harnessDSN(r))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	v, err := cluster.ReadVersion(ctx, conn)
	if err != nil {
		return nil, err
	}
	sums, err := replica.Checksum(ctx, conn)
	if err != nil {
		return nil, err
	}
	return &replicaView{version: v, checksums: sums}, nil
}
