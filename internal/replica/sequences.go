package replica

import (
	"context"
	"fmt"
)

// Sequences: why and how.
//
// A sequence is not replicated: nextval changes no table row, so capture
// never sees it, and its state is per replica. The rows it numbers are
// replicated like any other. Two replicas whose sequences started at the
// same value would therefore hand out the same id, and the second row to
// commit fails (a certification abort when concurrent, a unique violation
// afterwards). tashkent does what Galera and MySQL Group Replication do
// with auto_increment_increment / auto_increment_offset: every sequence on
// replica k of a cluster with stride s advances by s (or -s for a
// descending sequence) and hands out only values congruent to k modulo s.
// Replicas have different k, so their values never meet, whatever order
// the replicas run in and without any coordination at nextval time.
//
// The replica's k and the stride are stored in tashkent.replica_settings
// (never replicated: the tashkent schema has no capture triggers) by
// ConfigureSequences, which the proxy runs at start. Then:
//
//   - every existing sequence is aligned (align_all_sequences);
//   - the event trigger aligns each sequence a DDL statement creates or
//     alters: CREATE SEQUENCE, SERIAL / BIGSERIAL / identity columns of
//     CREATE TABLE and ALTER TABLE, ALTER SEQUENCE ... RESTART / INCREMENT,
//     ALTER TABLE ... ALTER COLUMN ... RESTART. Replicated DDL is replayed
//     on every replica and the event trigger fires there too (ENABLE
//     ALWAYS, also under session_replication_role = replica), so each
//     replica aligns the sequence with its own k.
//
// Aligning runs ALTER SEQUENCE ... INCREMENT BY ±s RESTART WITH v, where v
// is the first value congruent to k at or beyond the sequence's next value
// and beyond the largest value of the column that owns the sequence (so
// that rows that arrived from elsewhere, e.g. a restored dump, are never
// handed out again). That statement runs inside the database, from the
// event trigger or the proxy's admin connection: the proxy never sees it,
// so it is never replicated. It fires the event trigger again, which finds
// the sequence aligned and does nothing.
//
// setval() is an ordinary function call, which no trigger sees: it would
// move only the local sequence and break its offset, so the proxy refuses
// it (sqlclass.SequenceSet) and points to ALTER SEQUENCE ... RESTART,
// which is replicated and realigned here. One hidden in a user function
// is not seen; SELECT tashkent.align_all_sequences() on the replica, or a
// restart of its proxy, realigns. A user's own INCREMENT BY is replaced by
// ±s. Sessions that cached values (CACHE > 1) before an ALTER keep handing
// them out, as in PostgreSQL.

const (
	// SequenceStrideDefault is the stride tashkent up uses: room for 16
	// replicas, so replicas can be added later without realigning, at the
	// cost of 1/16 of each sequence's range per replica. A SMALLSERIAL
	// column still gets 2,047 values per replica.
	SequenceStrideDefault = 16
	// SequenceStrideMax bounds the stride, and so the number of replicas:
	// with 1024, a SERIAL (int4) column still has about 2 million values
	// per replica; a larger stride would leave a SMALLSERIAL column fewer
	// than 32 values per replica.
	SequenceStrideMax = 1024
)

// ConfigureSequences records that this database is replica number index
// (1 ≤ index ≤ stride) of a cluster whose sequences advance by stride,
// and aligns every sequence of the database accordingly. It is idempotent;
// run it on the proxy's admin connection after Install, never through the
// proxy (its ALTER SEQUENCE statements must not be replicated).
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
	rows, err := q.Query(ctx, `SELECT replica_index, sequence_stride FROM tashkent.replica_settings`)
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

const configureSequencesSQL = `
WITH s AS (
	INSERT INTO tashkent.replica_settings (replica_index, sequence_stride) VALUES ($1, $2)
	ON CONFLICT (id) DO UPDATE SET replica_index = EXCLUDED.replica_index, sequence_stride = EXCLUDED.sequence_stride
	RETURNING 1)
SELECT tashkent.align_all_sequences() FROM s`

// sequencesTemplate is the part of installSQL about sequences. The event
// trigger (on_ddl in installTemplate) calls align_relation_sequences for
// every relation a DDL command reports.
const sequencesTemplate = `
-- This replica's place in the cluster, for sequences. One row at most;
-- local to the replica (nothing in the tashkent schema is replicated).
CREATE TABLE IF NOT EXISTS tashkent.replica_settings (
	id              boolean PRIMARY KEY DEFAULT true CHECK (id),
	replica_index   int NOT NULL,
	sequence_stride int NOT NULL,
	-- BETWEEN, spelled out: a CHECK binds its operators when the table is
	-- created, under Install's search_path (see installTemplate).
	CHECK (sequence_stride OPERATOR(pg_catalog.>=) 1 AND sequence_stride OPERATOR(pg_catalog.<=) 1024
		AND replica_index OPERATOR(pg_catalog.>=) 1 AND replica_index OPERATOR(pg_catalog.<=) sequence_stride)
);

-- align_sequence makes one sequence advance by ±stride and hand out only
-- values congruent to the replica index modulo the stride, from the first
-- such value at or beyond both its next value and the largest value of the
-- column that owns it. Returns 'unchanged', 'aligned', or NULL (no
-- settings, or not a user sequence). Arithmetic in numeric: bigint bounds
-- must not overflow.
CREATE OR REPLACE FUNCTION tashkent.align_sequence(p_seq oid) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_idx int;
	v_stride int;
	v_rel regclass;
	v_seq pg_sequence%ROWTYPE;
	v_last numeric;
	v_called boolean;
	v_dir int;
	v_cur numeric;
	v_next numeric;
	v_floor numeric;
	v_target numeric;
	v_col record;
BEGIN
	SELECT s.replica_index, s.sequence_stride INTO v_idx, v_stride FROM tashkent.replica_settings s;
	IF v_stride IS NULL THEN
		RETURN NULL;
	END IF;
	SELECT c.oid::regclass INTO v_rel
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = p_seq AND c.relkind = 'S'
		AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'tashkent')
		AND n.nspname NOT LIKE 'pg\_temp\_%';
	IF v_rel IS NULL THEN
		RETURN NULL;
	END IF;
	SELECT * INTO v_seq FROM pg_sequence WHERE seqrelid = p_seq;
	EXECUTE format('SELECT last_value, is_called FROM %s', v_rel) INTO v_last, v_called;
	v_dir := sign(v_seq.seqincrement);
	v_cur := CASE WHEN v_called THEN v_last + v_seq.seqincrement ELSE v_last END;
	v_next := v_cur;

	-- Rows the sequence's own column already holds (a restored dump, rows
	-- from other replicas before alignment) are never handed out again.
	FOR v_col IN
		SELECT a.attrelid::regclass AS tbl, quote_ident(a.attname) AS col
		FROM pg_depend d
		JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
		WHERE d.classid = 'pg_class'::regclass AND d.objid = p_seq
			AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0
	LOOP
		IF v_dir > 0 THEN
			EXECUTE format('SELECT max(%s)::numeric + 1 FROM %s', v_col.col, v_col.tbl) INTO v_floor;
			v_next := greatest(v_next, v_floor);
		ELSE
			EXECUTE format('SELECT min(%s)::numeric - 1 FROM %s', v_col.col, v_col.tbl) INTO v_floor;
			v_next := least(v_next, v_floor);
		END IF;
	END LOOP;

	IF abs(v_seq.seqincrement) = v_stride AND v_next = v_cur
		AND mod(mod(v_next - v_idx, v_stride) + v_stride, v_stride) = 0 THEN
		RETURN 'unchanged';
	END IF;
	IF v_dir > 0 THEN
		v_target := v_next + mod(mod(v_idx - v_next, v_stride) + v_stride, v_stride);
	ELSE
		v_target := v_next - mod(mod(v_next - v_idx, v_stride) + v_stride, v_stride);
	END IF;
	IF v_target > v_seq.seqmax OR v_target < v_seq.seqmin THEN
		RAISE EXCEPTION USING ERRCODE = '55000',
			MESSAGE = format('sequence %s has no value left for replica %s of stride %s', v_rel, v_idx, v_stride),
			HINT = 'Give the sequence a wider range (ALTER SEQUENCE ... MAXVALUE / MINVALUE, or AS bigint).';
	END IF;
	EXECUTE format('ALTER SEQUENCE %s INCREMENT BY %s RESTART WITH %s', v_rel, v_dir * v_stride, v_target);
	RETURN 'aligned';
END
$fn$;

-- align_relation_sequences aligns a sequence, or every sequence a table's
-- columns own (SERIAL, identity): what a DDL command on that relation may
-- have created or restarted.
CREATE OR REPLACE FUNCTION tashkent.align_relation_sequences(p_rel oid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	IF NOT EXISTS (SELECT FROM tashkent.replica_settings) THEN
		RETURN;
	END IF;
	PERFORM tashkent.align_sequence(p_rel);
	PERFORM tashkent.align_sequence(d.objid)
	FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
	WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
		AND d.refobjid = p_rel AND d.deptype IN ('a', 'i');
END
$fn$;

-- align_all_sequences aligns every user sequence of the database: at
-- ConfigureSequences, and by hand after a setval().
CREATE OR REPLACE FUNCTION tashkent.align_all_sequences() RETURNS int
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_n int := 0;
	v_seq oid;
BEGIN
	FOR v_seq IN SELECT c.oid FROM pg_class c WHERE c.relkind = 'S' ORDER BY c.oid LOOP
		IF tashkent.align_sequence(v_seq) = 'aligned' THEN
			v_n := v_n + 1;
		END IF;
	END LOOP;
	RETURN v_n;
END
$fn$;

-- on_ddl (as their owner) and ConfigureSequences (as the proxy's
-- superuser) call these; no other role may: they read any table's key
-- column and restart any sequence with the owner's rights (PUBLIC gets
-- EXECUTE on a new function by default).
REVOKE EXECUTE ON FUNCTION tashkent.align_sequence(oid), tashkent.align_relation_sequences(oid),
	tashkent.align_all_sequences() FROM PUBLIC;
`
