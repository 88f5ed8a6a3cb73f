package bench

// The TPC-C part of a suite report: tpmC per system with its ratio to the
// baseline, and per transaction type throughput, latency (go-tpc's
// histogram) and errors, medians over the repeats.

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// TPCCRow is one (system, point) cell of a TPC-C report: medians over the
// repeats that succeeded.
type TPCCRow struct {
	Label    string
	Kind     System
	Clients  int
	TpmC     float64
	RunsTpmC []float64
	// Ratio is TpmC over the baseline's at the same point.
	Ratio float64
	Txns  []TPCCTxnRow
	// ErrorCauses are the failed transactions by cause, over the repeats.
	ErrorCauses map[string]int64
}

// TPCCTxnRow is one transaction type of a TPCCRow.
type TPCCTxnRow struct {
	Name string
	// TPM, AvgMs and the percentiles are medians over the repeats;
	// Count and Errors are summed.
	TPM, AvgMs, P50Ms, P95Ms, P99Ms float64
	Count, Errors                   int64
	// LatencyRatio is AvgMs over the baseline's for the same type.
	LatencyRatio float64
}

// ErrorPct is the type's failed transactions over all it attempted.
func (t TPCCTxnRow) ErrorPct() float64 { return abortPct(t.Count, t.Errors, 0) }

// tpccRows summarizes the runs that carry go-tpc's report.
func (rep *SuiteReport) tpccRows() []TPCCRow {
	var rows []TPCCRow
	for _, p := range rep.Config.points() {
		start := len(rows)
		for _, sp := range rep.Config.Systems {
			row := TPCCRow{Label: sp.label(), Kind: sp.Kind, Clients: p.clients, ErrorCauses: map[string]int64{}}
			var runs []*TPCCResult
			for _, r := range rep.Runs {
				if r.Label == row.Label && r.Clients == p.clients && r.Error == "" && r.TPCC != nil {
					runs = append(runs, r.TPCC)
					row.RunsTpmC = append(row.RunsTpmC, r.TPCC.TpmC)
					for c, n := range r.TPCC.ErrorCauses {
						row.ErrorCauses[c] += n
					}
				}
			}
			if len(runs) == 0 {
				continue
			}
			row.TpmC = median(row.RunsTpmC)
			for _, name := range TPCCTypes {
				row.Txns = append(row.Txns, summarizeTxn(name, runs))
			}
			rows = append(rows, row)
		}
		var base *TPCCRow
		for i := start; i < len(rows); i++ {
			if rows[i].Label == rep.Config.Baseline {
				base = &rows[i]
			}
		}
		for i := start; i < len(rows); i++ {
			rows[i].Ratio = nan
			for j := range rows[i].Txns {
				rows[i].Txns[j].LatencyRatio = nan
			}
			if base == nil {
				continue
			}
			rows[i].Ratio = rows[i].TpmC / base.TpmC
			for j := range rows[i].Txns {
				rows[i].Txns[j].LatencyRatio = rows[i].Txns[j].AvgMs / base.Txns[j].AvgMs
			}
		}
	}
	return rows
}

// summarizeTxn takes one type's medians over the runs (latencies over the
// runs where the type completed at least once).
func summarizeTxn(name string, runs []*TPCCResult) TPCCTxnRow {
	out := TPCCTxnRow{Name: name}
	var tpm, avg, p50, p95, p99 []float64
	for _, r := range runs {
		t := r.txn(name)
		out.Count += t.Count
		out.Errors += t.Errors
		tpm = append(tpm, t.TPM)
		if t.Count > 0 {
			avg, p50, p95, p99 = append(avg, t.AvgMs()), append(p50, t.P50Ms), append(p95, t.P95Ms), append(p99, t.P99Ms)
		}
	}
	out.TPM = median(tpm)
	out.AvgMs, out.P50Ms, out.P95Ms, out.P99Ms = nan, nan, nan, nan
	if len(avg) > 0 {
		out.AvgMs, out.P50Ms, out.P95Ms, out.P99Ms = median(avg), median(p50), median(p95), median(p99)
	}
	return out
}

// tpccTypeLabel is a go-tpc transaction name as TPC-C spells it.
func tpccTypeLabel(name string) string {
	switch name {
	case "new_order":
		return "NewOrder"
	case "payment":
		return "Payment"
	case "order_status":
		return "OrderStatus"
	case "delivery":
		return "Delivery"
	case "stock_level":
		return "StockLevel"
	}
	return name
}

func fmtMs(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// tpccTables are the report's two tables: tpmC per system, and each
// transaction type per system.
func (rep *SuiteReport) tpccTables(rows []TPCCRow) (summary, types [][]string) {
	base := rep.Config.Baseline
	summary = [][]string{{"system", "clients", "tpmC", "vs " + base, "tpmC of each run", "errors %"}}
	types = [][]string{{"system", "clients", "transaction", "tpm", "avg ms", "p50 ms", "p95 ms", "p99 ms", "errors %", "avg ms vs " + base}}
	for _, r := range rows {
		runs := make([]string, len(r.RunsTpmC))
		for i, x := range r.RunsTpmC {
			runs[i] = fmt.Sprintf("%.0f", x)
		}
		var count, errs int64
		for _, t := range r.Txns {
			count, errs = count+t.Count, errs+t.Errors
			types = append(types, []string{r.Label, strconv.Itoa(r.Clients), tpccTypeLabel(t.Name), fmt.Sprintf("%.0f", t.TPM),
				fmtMs(t.AvgMs), fmtMs(t.P50Ms), fmtMs(t.P95Ms), fmtMs(t.P99Ms), fmt.Sprintf("%.2f", t.ErrorPct()), fmtRatio(t.LatencyRatio)})
		}
		summary = append(summary, []string{r.Label, strconv.Itoa(r.Clients), fmt.Sprintf("%.0f", r.TpmC), fmtRatio(r.Ratio),
			strings.Join(runs, " "), fmt.Sprintf("%.2f", abortPct(count, errs, 0))})
	}
	return summary, types
}

const tpccFootnote = "tpmC: NewOrder transactions per minute that ended without error (go-tpc's count, TPC-C's 1% rolled-back NewOrders included); " +
	"medians over the repeats, ratios to the baseline's medians at the same client count. avg ms is exact (go-tpc's summed latency over its count); " +
	"p50/p95/p99 come from go-tpc's histogram (1 ms floor, one significant digit). errors %: transactions that failed (go-tpc does not retry; " +
	"under tashkent a certification abort is SQLSTATE 40001) over all attempted, summed over the repeats."

// writeTPCC writes the TPC-C tables and the errors by cause.
func (rep *SuiteReport) writeTPCC(w io.Writer) {
	rows := rep.tpccRows()
	if len(rows) == 0 {
		return
	}
	summary, types := rep.tpccTables(rows)
	fmt.Fprintf(w, "\nTPC-C (go-tpc %s, %d warehouse(s), READ COMMITTED): tpmC\n\n", goTPCVersion, rep.Config.Warehouses)
	writeMarkdownTable(w, summary)
	fmt.Fprintf(w, "\nTPC-C per transaction type\n\n")
	writeMarkdownTable(w, types)
	fmt.Fprintf(w, "\n%s\n", tpccFootnote)
	for _, r := range rows {
		if len(r.ErrorCauses) == 0 {
			continue
		}
		causes := slices.SortedFunc(maps.Keys(r.ErrorCauses), func(a, b string) int { return int(r.ErrorCauses[b] - r.ErrorCauses[a]) })
		fmt.Fprintf(w, "\nErrors of %s at %d clients, by cause:\n", r.Label, r.Clients)
		for _, c := range causes {
			fmt.Fprintf(w, "  %6d  %s\n", r.ErrorCauses[c], c)
		}
	}
}

// tpccCSV is the per-type table as CSV rows (nil when no run carries
// go-tpc's report).
func (rep *SuiteReport) tpccCSV() [][]string {
	rows := rep.tpccRows()
	if len(rows) == 0 {
		return nil
	}
	f3 := func(x float64) string {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	out := [][]string{{"system", "kind", "clients", "warehouses", "tpmc_median", "ratio_tpmc_vs_baseline", "transaction", "tpm_median",
		"latency_avg_ms_median", "latency_p50_ms_median", "latency_p95_ms_median", "latency_p99_ms_median", "count", "errors", "error_pct",
		"ratio_latency_avg_vs_baseline", "baseline"}}
	for _, r := range rows {
		for _, t := range r.Txns {
			out = append(out, []string{r.Label, string(r.Kind), strconv.Itoa(r.Clients), strconv.Itoa(rep.Config.Warehouses), f3(r.TpmC), f3(r.Ratio),
				t.Name, f3(t.TPM), f3(t.AvgMs), f3(t.P50Ms), f3(t.P95Ms), f3(t.P99Ms), strconv.FormatInt(t.Count, 10),
				strconv.FormatInt(t.Errors, 10), f3(t.ErrorPct()), f3(t.LatencyRatio), rep.Config.Baseline})
		}
	}
	return out
}
