package replica

import (
	"context"
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

func TestConfigureSequencesAlignsExistingSequencesPastTheirColumn(t *testing.T) {
	_, conn := instance(t, `
		CREATE TABLE old (id serial PRIMARY KEY, v text);
		INSERT INTO old (v) SELECT 'x' FROM generate_series(1, 40);
		CREATE SEQUENCE down INCREMENT BY -1 START WITH -5 MAXVALUE -1;`)
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

// DDL run later, as a client runs it and as the applier replays it
// (session_replication_role = replica), gets aligned sequences: the event
// trigger fires in both.
func TestDDLCreatesAlignedSequences(t *testing.T) {
	for _, role := range []string{"origin", "replica"} {
		t.Run(role, func(t *testing.T) {
			_, conn := instance(t, "")
			if err := ConfigureSequences(tctx(t), conn, 2, 16); err != nil {
				t.Fatal(err)
			}
			mustExec(t, conn, `SET session_replication_role = `+role)
			mustExec(t, conn, `
				CREATE TABLE s (id serial PRIMARY KEY);
				CREATE TABLE b (id bigserial PRIMARY KEY);
				CREATE TABLE i (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY);
				CREATE TABLE sm (id smallserial PRIMARY KEY);
				CREATE SEQUENCE d INCREMENT -1;`)
			for _, seq := range []string{"s_id_seq", "b_id_seq", "i_id_seq", "sm_id_seq"} {
				checkAligned(t, seq, nextvals(t, conn, seq, 3), 2, 16)
			}
			checkAligned(t, "descending", nextvals(t, conn, "d", 3), 2, -16)

			// RESTART and a new INCREMENT are realigned, as is an identity
			// column restarted through ALTER TABLE.
			mustExec(t, conn, `ALTER SEQUENCE s_id_seq INCREMENT BY 1 RESTART WITH 1000`)
			got := nextvals(t, conn, "s_id_seq", 3)
			checkAligned(t, "restarted", got, 2, 16)
			if got[0] < 1000 || got[0] >= 1016 {
				t.Fatalf("after RESTART WITH 1000 the sequence hands out %v", got)
			}
			mustExec(t, conn, `ALTER TABLE i ALTER COLUMN id RESTART WITH 501`)
			got = nextvals(t, conn, "i_id_seq", 2)
			checkAligned(t, "identity restarted", got, 2, 16)
			if got[0] < 501 || got[0] >= 517 {
				t.Fatalf("after RESTART WITH 501 the identity hands out %v", got)
			}
			mustExec(t, conn, `ALTER TABLE s ADD COLUMN n bigserial`)
			checkAligned(t, "added column", nextvals(t, conn, "s_n_seq", 2), 2, 16)
		})
	}
}

func TestConfigureSequencesRejectsBadSettings(t *testing.T) {
	for _, c := range []struct{ index, stride int }{{0, 16}, {17, 16}, {1, 0}, {1, SequenceStrideMax + 1}} {
		if err := ConfigureSequences(context.Background(), nil, c.index, c.stride); err == nil {
			t.Fatalf("index %d stride %d accepted", c.index, c.stride)
		}
	}
}
