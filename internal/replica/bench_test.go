package replica

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// BenchmarkApply applies batches of 100 remote writesets of one row each
// (consecutive versions, distinct keys, one table): one Apply call, one
// transaction and one commit per batch, as the agent's applier catching
// up. Reported: rows/s.
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
			c := newCluster(b, 1, mode.opts...)
			c.local(0, `CREATE TABLE bench (id bigint PRIMARY KEY, k int NOT NULL, c text NOT NULL, pad text NOT NULL)`)
			conn := c.nodes[0].apply
			if err := PrepareApplySession(tctx(b), conn); err != nil {
				b.Fatal(err)
			}
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

// BenchmarkApplyInserts applies versions that each insert rows new rows
// of a pgbench_accounts-like table, by the statements (copyRowsMin 0)
// and by COPY (copyRowsMin 1): what copyRowsMin is chosen from. Reported:
// rows/s.
//
//	go test -run '^$' -bench BenchmarkApplyInserts -benchtime 20x ./internal/replica/
func BenchmarkApplyInserts(b *testing.B) {
	for _, rows := range []int{100, 1000, 10000} {
		for _, way := range []struct {
			name        string
			copyRowsMin int
		}{{"statements", 0}, {"copy", 1}} {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, way.name), func(b *testing.B) {
				benchmarkInserts(b, rows, way.copyRowsMin)
			})
		}
	}
}

func benchmarkInserts(b *testing.B, rows, copyRowsMin int) {
	c := newCluster(b, 1, pgtest.SynchronousCommitOff())
	c.local(0, `CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84))`)
	conn := c.nodes[0].apply
	if err := PrepareApplySession(tctx(b), conn); err != nil {
		b.Fatal(err)
	}
	ap := NewApplier()
	ap.copyRowsMin = copyRowsMin
	id := 0
	entry := func(version uint64) []*certifierpb.LogEntry {
		cs := make([]*certifierpb.Change, rows)
		for i := range cs {
			id++
			aid := strconv.Itoa(id)
			cs[i] = &certifierpb.Change{Table: "public.accounts", Op: certifierpb.Op_OP_UPSERT, Key: []byte("[" + aid + "]"),
				Row: []byte("(" + aid + "," + strconv.Itoa(id/100000+1) + ",0,\"" + strings.Repeat(" ", 84) + "\")")}
		}
		return []*certifierpb.LogEntry{{Version: version, Writeset: &certifierpb.Writeset{Changes: cs}}}
	}
	ctx := tctx(b)
	if err := ap.Apply(ctx, conn, entry(1)); err != nil { // warm up
		b.Fatal(err)
	}
	batches := make([][]*certifierpb.LogEntry, b.N)
	for i := range batches {
		batches[i] = entry(uint64(i + 2))
	}
	b.ResetTimer()
	start := time.Now()
	for _, batch := range batches {
		if err := ap.Apply(ctx, conn, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*rows)/time.Since(start).Seconds(), "rows/s")
	if copied, _ := ap.Copies.Read(); (copied > 0) != (copyRowsMin > 0) {
		b.Fatalf("%d rows copied with copyRowsMin %d", copied, copyRowsMin)
	}
}
