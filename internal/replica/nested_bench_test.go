package replica

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkCaptureNestedStatePath measures what a statement costs when it
// is captured by state (a nested capture ran earlier in the transaction,
// see "Nested statements" in doc.go) against the normal path: one-row
// UPDATEs of a 1,000-row table from a DO block in one backend, in rounds
// of 2,000 alternating the two paths (the state path forced by setting
// the depth-1 flag at the start of the transaction), rolled back.
// Reported: backend CPU µs per statement of each path (medians of the
// rounds) and the median per-round ratio.
//
//	go test -run '^$' -bench BenchmarkCaptureNestedStatePath -benchtime 10x ./internal/replica/
func BenchmarkCaptureNestedStatePath(b *testing.B) {
	srv, _ := instance(b, `CREATE TABLE t (id int PRIMARY KEY, v int);
		INSERT INTO t SELECT g, 0 FROM generate_series(1, 1000) AS g;`)
	s := session(b, srv)
	ctx := tctx(b)
	const perRound = 2000
	round := func(state bool) float64 {
		flag := ""
		if state {
			flag = `SELECT pg_catalog.set_config('tashkent.nested_capture_1', 'on', true);`
		}
		before := backendCPU(ctx, b, s)
		mustExec(b, s, fmt.Sprintf(`BEGIN; %s
			DO $$ BEGIN FOR i IN 1..%d LOOP UPDATE t SET v = v + 1 WHERE id = 1 + i %% 1000; END LOOP; END $$;
			ROLLBACK`, flag, perRound))
		return float64(backendCPU(ctx, b, s)-before) / float64(time.Microsecond) / perRound
	}
	round(false)
	round(true)
	var normal, state, ratio []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, st := round(false), round(true)
		normal, state, ratio = append(normal, n), append(state, st), append(ratio, st/n)
	}
	b.StopTimer()
	median := func(v []float64) float64 {
		sort.Float64s(v)
		return v[len(v)/2]
	}
	b.ReportMetric(median(normal), "normal-µs/stmt")
	b.ReportMetric(median(state), "state-µs/stmt")
	b.ReportMetric(median(ratio), "state/normal")
}
