package replica

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// BenchmarkApply applies batches of 100 remote writesets of one row each
// (consecutive versions, distinct keys, one table): one Apply call, one
// transaction and one commit per batch, as a proxy catching up or applying
// what a certification reply brought. Reported: rows/s.
//
//	go test -run '^$' -bench BenchmarkApply -benchtime 200x ./internal/replica/
func BenchmarkApply(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []pgtest.Option
	}{
		{"sync_commit=on", nil},
		{"sync_commit=off", []pgtest.Option{pgtest.SynchronousCommitOff()}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			_, conn := instance(b, `CREATE TABLE bench (id bigint PRIMARY KEY, k int NOT NULL, c text NOT NULL, pad text NOT NULL)`, mode.opts...)
			ctx := tctx(b)
			ap := NewApplier()
			const perBatch = 100
			version := uint64(0)
			batch := func() []*certifierpb.LogEntry {
				es := make([]*certifierpb.LogEntry, perBatch)
				for i := range es {
					version++
					id := strconv.FormatUint(version, 10)
					es[i] = &certifierpb.LogEntry{Version: version, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{{
						Table: "public.bench",
						Op:    certifierpb.Op_OP_UPSERT,
						Key:   []byte("[" + id + "]"),
						Row:   []byte(fmt.Sprintf("(%s,%d,%s,%s)", id, version%1000, "value-"+id, "padding-padding-padding-padding-padding-padding")),
					}}}}
				}
				return es
			}
			// Warm up: statement preparation and metadata loading.
			if err := ap.Apply(ctx, conn, batch()); err != nil {
				b.Fatal(err)
			}
			batches := make([][]*certifierpb.LogEntry, b.N)
			for i := range batches {
				batches[i] = batch()
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := ap.Apply(ctx, conn, batches[i]); err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N*perBatch)/el.Seconds(), "rows/s")
			if v, err := ReadVersion(ctx, conn); err != nil || v != version {
				b.Fatalf("ReadVersion = %d, %v; want %d", v, err, version)
			}
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM bench`).Scan(&n); err != nil || n != int(version) {
				b.Fatalf("bench has %d rows, %v; want %d", n, err, version)
			}
		})
	}
}

// BenchmarkCapture measures what writeset capture costs a local
// transaction: 10 single-row INSERT statements and a COMMIT, with capture
// (trigger + CollectWriteset) and without (the same statements with
// session_replication_role = replica, so that no trigger fires), on a table
// without a unique index other than its primary key (plain) and on one
// with a UNIQUE column (unique), whose values capture also records, and
// on one with a foreign key (fk), whose parent keys capture records as
// references. capture=off also turns off the foreign-key check (it is a
// trigger too): compare fk/capture=on with plain/capture=on for what the
// check and the references cost together.
//
//	go test -run '^$' -bench BenchmarkCapture -benchtime 200x ./internal/replica/
func BenchmarkCapture(b *testing.B) {
	srv, _ := instance(b, `CREATE TABLE ev (id bigint PRIMARY KEY, k int NOT NULL, c text NOT NULL);
		CREATE TABLE ev_unique (id bigint PRIMARY KEY, k int NOT NULL, c text NOT NULL UNIQUE);
		CREATE TABLE ev_parent (id int PRIMARY KEY);
		CREATE TABLE ev_fk (id bigint PRIMARY KEY, k int NOT NULL REFERENCES ev_parent, c text NOT NULL)`,
		pgtest.SynchronousCommitOff())
	ctx := tctx(b)
	parents := session(b, srv)
	mustExec(b, parents, `SET session_replication_role = replica; INSERT INTO ev_parent SELECT generate_series(0, 9)`)
	var seq int64 // b.Run calls the function several times: keys must not repeat
	for _, table := range []string{"plain", "unique", "fk"} {
		for _, captured := range []bool{false, true} {
			name := table + "/capture=off"
			if captured {
				name = table + "/capture=on"
			}
			insert := `INSERT INTO ev VALUES ($1, $2, $3)`
			switch table {
			case "unique":
				insert = `INSERT INTO ev_unique VALUES ($1, $2, $3)`
			case "fk":
				insert = `INSERT INTO ev_fk VALUES ($1, $2, $3)`
			}
			b.Run(name, func(b *testing.B) {
				s := session(b, srv)
				if !captured {
					mustExec(b, s, `SET session_replication_role = replica`)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					tx, err := s.Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					for j := 0; j < 10; j++ {
						seq++
						if _, err := tx.Exec(ctx, insert, seq, j, "some text "+strconv.FormatInt(seq, 10)); err != nil {
							b.Fatal(err)
						}
					}
					if captured {
						ws, err := CollectWriteset(ctx, tx)
						if err != nil || len(ws) < 10 {
							b.Fatalf("writeset of %d changes, %v", len(ws), err)
						}
					}
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
