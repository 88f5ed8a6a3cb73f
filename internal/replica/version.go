package replica

import (
	"context"
	"fmt"
)

// readVersionSQL names its function with its schema: it runs under the
// search_path the database and role give the session.
const readVersionSQL = `SELECT tashkent.committed_version()`

// ReadVersion returns the replica's version, tashkent.committed_version()
// of the extension: every version up to it is committed and visible here,
// and PostgreSQL's crash recovery restores it with the commits it kept
// (the progress of the replication origin "tashkent", which each commit
// of a version carries in its commit record: extension/src/turn.c).
func ReadVersion(ctx context.Context, q Querier) (uint64, error) {
	var v int64
	if err := q.QueryRow(ctx, readVersionSQL).Scan(&v); err != nil {
		return 0, fmt.Errorf("replica: read version: %w", err)
	}
	return uint64(v), nil
}
