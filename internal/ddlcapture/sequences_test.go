package ddlcapture_test

import (
	"context"
	"testing"
)

// With replica settings, every sequence hands out only values congruent
// to the replica's index modulo the stride: sequences created before the
// settings (align_all_sequences), SERIAL and identity columns, CREATE and
// ALTER SEQUENCE. The alignment is this replica's own: never captured.
func TestSequencesHandOutThisReplicasValues(t *testing.T) {
	f := start(t)
	const index, stride = 3, 16
	f.exec(f.c, `CREATE TABLE early (id serial PRIMARY KEY, x int); INSERT INTO early (x) VALUES (1), (2)`)
	f.captured()
	f.exec(f.c, `INSERT INTO tashkent.replica_settings (replica_index, sequence_stride) VALUES (3, 16);
		SELECT tashkent.align_all_sequences()`)
	f.expectCaptured("the agent's settings and alignment")

	f.exec(f.c, `CREATE TABLE s (id serial PRIMARY KEY, x int)`)
	f.expectCaptured("SERIAL column", `CREATE TABLE s (id serial PRIMARY KEY, x int)`)
	f.exec(f.c, `CREATE TABLE ident (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, x int)`)
	f.exec(f.c, `CREATE SEQUENCE up; CREATE SEQUENCE down INCREMENT BY -1`)
	f.expectCaptured("identity column and sequences",
		`CREATE TABLE ident (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, x int)`,
		`CREATE SEQUENCE up`, `CREATE SEQUENCE down INCREMENT BY -1`)

	check := func(what string, values []int64, wantFirst int64) {
		t.Helper()
		for i, v := range values {
			if ((v-index)%stride+stride)%stride != 0 {
				t.Errorf("%s: value %d (%v) is not congruent to %d modulo %d", what, v, values, index, stride)
			}
			if i > 0 && v == values[i-1] {
				t.Errorf("%s: value %d twice", what, v)
			}
		}
		if wantFirst != 0 && values[0] != wantFirst {
			t.Errorf("%s: first value %d, want %d", what, values[0], wantFirst)
		}
	}
	ids := func(sql string) []int64 {
		rows, err := f.c.Query(context.Background(), sql)
		if err != nil {
			t.Fatal(err)
		}
		var vs []int64
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return vs
	}
	check("a sequence created before the settings", ids(`INSERT INTO early (x) VALUES (3), (4), (5) RETURNING id`), 3)
	check("SERIAL", ids(`INSERT INTO s (x) SELECT g FROM generate_series(1, 5) g RETURNING id`), 3)
	check("identity", ids(`INSERT INTO ident (x) SELECT g FROM generate_series(1, 5) g RETURNING id`), 3)
	check("CREATE SEQUENCE", ids(`SELECT nextval('up') FROM generate_series(1, 5)`), 3)
	check("descending", ids(`SELECT nextval('down') FROM generate_series(1, 5)`), 0)

	// ALTER SEQUENCE ... RESTART is replicated; each replica realigns it.
	f.exec(f.c, `ALTER SEQUENCE up RESTART WITH 100`)
	f.expectCaptured("RESTART", `ALTER SEQUENCE up RESTART WITH 100`)
	check("after RESTART WITH 100", ids(`SELECT nextval('up') FROM generate_series(1, 3)`), 115)
	// A restart never hands out a value the sequence's column holds (rows
	// that came from elsewhere).
	f.exec(f.c, `INSERT INTO s (id, x) VALUES (1000, 0); ALTER SEQUENCE s_id_seq RESTART`)
	f.captured()
	check("past the column's values", ids(`INSERT INTO s (x) VALUES (1) RETURNING id`), 1011)
}
