package replica

import (
	"context"
	"fmt"
)

// Sequences.
//
// A sequence is not replicated: nextval changes no row, so capture never
// sees it, and each replica has its own. The rows it numbers are
// replicated like any other, so two replicas whose sequences handed out
// the same value would collide. As Galera and MySQL Group Replication do
// with auto_increment_increment / auto_increment_offset, every sequence on
// replica k of a cluster with stride s advances by s (-s descending) and
// hands out only values congruent to k modulo s: replicas never meet, with
// no coordination at nextval time.
//
// The extension does the aligning (extension/sql/tashkent--1.0.sql,
// "Sequences"): tashkent.align_all_sequences() for the sequences that
// exist, and an event trigger, enabled ALWAYS, for each sequence a DDL
// command creates or alters, in clients' sessions and in the applier
// alike, so that every replica aligns a replicated sequence with its own
// k. Aligning runs with tashkent.maintenance on: it is this replica's own
// change, never replicated. What Go does is record k and s
// (ConfigureSequences), which the agent runs at every start.

const (
	// SequenceStrideDefault is the stride the agent uses unless told: room
	// for 16 replicas, so replicas can be added later without realigning,
	// at the cost of 1/16 of each sequence's range per replica. A
	// SMALLSERIAL column still gets 2,047 values per replica.
	SequenceStrideDefault = 16
	// SequenceStrideMax bounds the stride, and so the number of replicas
	// (the extension's replica_settings checks it too): with 1024, a
	// SERIAL (int4) column still has about 2 million values per replica; a
	// larger stride would leave a SMALLSERIAL column fewer than 32 values
	// per replica.
	SequenceStrideMax = 1024
)

// ConfigureSequences records that this database is replica number index
// (1 ≤ index ≤ stride) of a cluster whose sequences advance by stride,
// and aligns every sequence of the database accordingly. It is
// idempotent. Run it on a superuser's connection of the replica.
func ConfigureSequences(ctx context.Context, q Querier, index, stride int) error {
	if stride < 1 || stride > SequenceStrideMax {
		return fmt.Errorf("replica: sequence stride must be between 1 and %d, not %d", SequenceStrideMax, stride)
	}
	if index < 1 || index > stride {
		return fmt.Errorf("replica: replica index must be between 1 and the sequence stride %d, not %d "+
			"(a cluster with a stride of %d has room for %d replicas)", stride, index, stride, stride)
	}
	if _, err := q.Exec(ctx, configureSequencesSQL, index, stride); err != nil {
		return fmt.Errorf("replica: configure sequences: %w", err)
	}
	return nil
}

// SequenceSettings returns the replica index and stride recorded by
// ConfigureSequences; ok is false when none were recorded.
func SequenceSettings(ctx context.Context, q Querier) (index, stride int, ok bool, err error) {
	rows, err := q.Query(ctx, `SELECT s.replica_index, s.sequence_stride FROM tashkent.replica_settings AS s`)
	if err != nil {
		return 0, 0, false, fmt.Errorf("replica: read sequence settings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&index, &stride); err != nil {
			return 0, 0, false, err
		}
		ok = true
	}
	return index, stride, ok, rows.Err()
}

// configureSequencesSQL records the settings and aligns every sequence in
// one statement. Its names are qualified: it runs under the search_path
// the database gives the session.
const configureSequencesSQL = `
WITH s AS (
	INSERT INTO tashkent.replica_settings (replica_index, sequence_stride) VALUES ($1, $2)
	ON CONFLICT (id) DO UPDATE SET replica_index = EXCLUDED.replica_index, sequence_stride = EXCLUDED.sequence_stride
	RETURNING 1)
SELECT tashkent.align_all_sequences() FROM s`
