package replica

import (
	"context"
	"fmt"
	"testing"
)

// nextvals draws n values from a sequence.
func nextvals(t *testing.T, q Querier, seq string, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		if err := q.QueryRow(context.Background(), `SELECT nextval($1::regclass)`, seq).Scan(&out[i]); err != nil {
			t.Fatalf("nextval(%s): %v", seq, err)
		}
	}
	return out
}

// checkAligned asserts that vals step by step (±stride) and are congruent
// to index modulo stride.
func checkAligned(t *testing.T, what string, vals []int64, index, step int64) {
	t.Helper()
	stride := step
	if stride < 0 {
		stride = -stride
	}
	for i, v := range vals {
		if ((v-index)%stride+stride)%stride != 0 {
			t.Fatalf("%s: value %d (%v) is not congruent to %d modulo %d", what, v, vals, index, stride)
		}
		if i > 0 && v-vals[i-1] != step {
			t.Fatalf("%s: values %v do not advance by %d", what, vals, step)
		}
	}
}

// ConfigureSequences records the replica's place and aligns the
// sequences that exist: past the values their column holds, idempotently.
func TestConfigureSequencesAlignsExistingSequencesPastTheirColumn(t *testing.T) {
	c := newCluster(t, 1)
	c.commit(0, `
		CREATE TABLE old (id serial PRIMARY KEY, v text);
		INSERT INTO old (v) SELECT 'x' FROM generate_series(1, 40);
		CREATE SEQUENCE down INCREMENT BY -1 START WITH -5 MAXVALUE -1;`)
	conn := c.nodes[0].connect(t)
	if err := ConfigureSequences(tctx(t), conn, 3, 16); err != nil {
		t.Fatal(err)
	}
	got := nextvals(t, conn, "old_id_seq", 3)
	checkAligned(t, "serial", got, 3, 16)
	if got[0] <= 40 {
		t.Fatalf("serial hands out %d, which the column already holds (max 40)", got[0])
	}
	checkAligned(t, "descending", nextvals(t, conn, "down", 3), 3, -16)
	if idx, stride, ok, err := SequenceSettings(tctx(t), conn); err != nil || !ok || idx != 3 || stride != 16 {
		t.Fatalf("settings %d %d %v %v", idx, stride, ok, err)
	}
	// Idempotent: configuring again changes nothing.
	var n int
	if err := conn.QueryRow(tctx(t), `SELECT tashkent.align_all_sequences()`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("second alignment realigned %d sequences (err %v)", n, err)
	}
}

// A sequence that no column owns, called by column defaults, is aligned
// past the values those columns hold (another replica's, or those this
// replica handed out before it was copied from a donor); a default that
// makes text of it is not a number to look past.
func TestConfigureSequencesAlignsPastColumnsWhoseDefaultCallsTheSequence(t *testing.T) {
	c := newCluster(t, 1)
	c.commit(0, `
		CREATE SEQUENCE shared;
		CREATE DOMAIN ident AS bigint;
		CREATE TABLE a (id bigint PRIMARY KEY DEFAULT nextval('shared'), v text);
		CREATE TABLE b (id ident PRIMARY KEY DEFAULT nextval('shared'), code text DEFAULT 'c' || nextval('shared'));
		INSERT INTO a (id) VALUES (34), (50);
		INSERT INTO b (id) VALUES (66), (82);`)
	conn := c.nodes[0].connect(t)
	if err := ConfigureSequences(tctx(t), conn, 2, 16); err != nil {
		t.Fatal(err)
	}
	got := nextvals(t, conn, "shared", 3)
	checkAligned(t, "unowned", got, 2, 16)
	if got[0] <= 82 {
		t.Fatalf("a sequence no column owns hands out %d, which a column whose default calls it holds (max 82)", got[0])
	}
}

// DDL that creates or alters sequences, run by a client on one replica
// and applied on the other through the Applier, gets sequences aligned on
// each with its own index: the extension's event trigger fires in both.
// Nothing of the alignment is replicated.
func TestReplicatedDDLAlignsEachReplicasSequences(t *testing.T) {
	c := newCluster(t, 2)
	for i := range c.nodes {
		if err := ConfigureSequences(tctx(t), c.nodes[i].connect(t), i+1, 16); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, seq string, n int, step int64) [][]int64 {
		t.Helper()
		var out [][]int64
		for i, nd := range c.nodes {
			vals := nextvals(t, nd.connect(t), seq, n)
			checkAligned(t, fmt.Sprintf("%s on replica %d", what, i+1), vals, int64(i+1), step)
			out = append(out, vals)
		}
		return out
	}

	c.commit(0, `
		CREATE TABLE s (id serial PRIMARY KEY);
		CREATE TABLE b (id bigserial PRIMARY KEY);
		CREATE TABLE i (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY);
		CREATE TABLE sm (id smallserial PRIMARY KEY);
		CREATE SEQUENCE d INCREMENT -1;`)
	c.catchUp(1)
	for _, seq := range []string{"s_id_seq", "b_id_seq", "i_id_seq", "sm_id_seq"} {
		check(seq, seq, 3, 16)
	}
	check("descending", "d", 3, -16)

	// RESTART and a new INCREMENT are realigned, as is an identity column
	// restarted through ALTER TABLE, and a column added.
	c.commit(0, `ALTER SEQUENCE s_id_seq INCREMENT BY 1 RESTART WITH 1000;
		ALTER TABLE i ALTER COLUMN id RESTART WITH 501;
		ALTER TABLE s ADD COLUMN n bigserial`)
	c.catchUp(1)
	for i, got := range check("restarted", "s_id_seq", 3, 16) {
		if got[0] < 1000 || got[0] >= 1016 {
			t.Errorf("replica %d: after RESTART WITH 1000 the sequence hands out %v", i+1, got)
		}
	}
	for i, got := range check("identity restarted", "i_id_seq", 2, 16) {
		if got[0] < 501 || got[0] >= 517 {
			t.Errorf("replica %d: after RESTART WITH 501 the identity hands out %v", i+1, got)
		}
	}
	check("added column", "s_n_seq", 2, 16)
	if n := len(c.log); n != 2 {
		t.Errorf("the log holds %d versions, want the 2 DDL transactions: the alignment was replicated", n)
	}
}

// TestSequenceSetupUnderAHostileSearchPath: the agent's sequence set-up
// (SequenceSettings, ConfigureSequences), on a session whose search_path
// finds decoys first (decoySQL), records the replica's place and aligns
// the sequences as under a clean one.
func TestSequenceSetupUnderAHostileSearchPath(t *testing.T) {
	c := newCluster(t, 1)
	c.commit(0, `CREATE TABLE counted (id serial PRIMARY KEY, v text); INSERT INTO counted (v) VALUES ('a'), ('b'), ('c')`)
	c.local(0, decoySQL)
	srv := c.nodes[0].srv
	conn := hostileSession(t, srv)
	ctx := tctx(t)
	if _, _, ok, err := SequenceSettings(ctx, conn); err != nil || ok {
		t.Fatalf("SequenceSettings before ConfigureSequences: ok %v, %v; want none", ok, err)
	}
	if err := ConfigureSequences(ctx, conn, 3, 16); err != nil {
		t.Fatalf("ConfigureSequences under the decoy search_path: %v", err)
	}
	if index, stride, ok, err := SequenceSettings(ctx, conn); err != nil || !ok || index != 3 || stride != 16 {
		t.Fatalf("SequenceSettings = %d, %d, %v, %v; want 3, 16", index, stride, ok, err)
	}
	vals := nextvals(t, cleanSession(t, srv), "counted_id_seq", 3)
	if vals[0] != 19 {
		t.Errorf("first value after alignment = %d, want 19 (past the column's 3, congruent to 3 mod 16)", vals[0])
	}
	checkAligned(t, "counted_id_seq", vals, 3, 16)
}

func TestConfigureSequencesRejectsBadSettings(t *testing.T) {
	for _, c := range []struct{ index, stride int }{{0, 16}, {17, 16}, {1, 0}, {1, SequenceStrideMax + 1}} {
		if err := ConfigureSequences(context.Background(), nil, c.index, c.stride); err == nil {
			t.Fatalf("index %d stride %d accepted", c.index, c.stride)
		}
	}
}
