package bench

// The scale-out model of Jiménez-Peris et al. §2.1: with n replicas, each
// executing its share of the transactions locally and applying the
// writesets of everyone else's update transactions, the throughput of n
// replicas over one is
//
//	so(n) = n / (1 + wo·w·(n−1))
//
// where w is the fraction of update transactions and wo the writing
// overhead: the cost of applying a remote writeset over the cost of
// executing the transaction locally (the paper fitted wo = 0.15).
//
// The bench measures wo·w directly, as CPU: on an mw system with 2 or more
// replicas it sends every client to replica 1 for one run and reads the
// CPU time of every PostgreSQL process of replica 1 (local execution,
// capture triggers and the commit hook included) and of replica 2 (which
// only applies remote writesets) from /proc. wo·w = CPU(replica 2) / CPU
// (replica 1); wo = wo·w / w. Background processes (walwriter,
// checkpointer, autovacuum) count on both sides.
//
// Two cores cannot show scale-out: every replica of a local cluster
// shares the same two cores, so the measured throughput of n replicas
// over one stays near or below 1. The model is drawn from the measured wo
// beside those measurements; they are not expected to agree here.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ScaleOut is what the scale-out measurement found for one workload.
type ScaleOut struct {
	Workload Workload
	Probe    string // label of the system wo was measured on
	Clients  int
	// W is the workload's write fraction, WoW the measured wo·w, Wo the
	// writing overhead (NaN when W is 0).
	W, WoW, Wo float64
	// LocalCPU and ApplyCPU are the CPU times of replica 1 and 2.
	LocalCPU, ApplyCPU time.Duration
	Transactions       int64
	// Measured is tps(mw xN)/tps(mw x1) at the largest client count, for
	// every N this invocation ran (needs mw:1).
	Measured []ScalePoint
	// FittedWoW is the wo·w that fits Measured best (least squares); NaN
	// without at least two measured points.
	FittedWoW float64
}

// ScalePoint is one measured scale-out.
type ScalePoint struct {
	Replicas int
	SO       float64
}

// ScaleOutModel is so(n) for a given wo·w.
func ScaleOutModel(n int, woW float64) float64 {
	return float64(n) / (1 + woW*float64(n-1))
}

// FitWoW returns the wo·w in [0, 10] that minimizes the squared error of
// the model against the points, to 0.001.
func FitWoW(points []ScalePoint) float64 {
	if len(points) < 2 {
		return math.NaN()
	}
	best, bestErr := math.NaN(), math.Inf(1)
	for i := 0; i <= 10000; i++ {
		x := float64(i) / 1000
		var e float64
		for _, p := range points {
			d := ScaleOutModel(p.Replicas, x) - p.SO
			e += d * d
		}
		if e < bestErr {
			best, bestErr = x, e
		}
	}
	return best
}

// scaleOut measures wo on the first mw (else base) system with 2 or more
// replicas, then puts the measured scale-out of the mw systems beside it.
func (r *suiteRunner) scaleOut(ctx context.Context, rows []SuiteRow) (*ScaleOut, error) {
	probe := r.probeSystem()
	if probe == nil {
		return nil, errors.New("--scaleout needs a tashkent system with at least 2 replicas (e.g. --systems mw:2)")
	}
	w := r.scfg.Workload
	top := r.scfg.points()[len(r.scfg.points())-1]
	so := &ScaleOut{Workload: w, Probe: probe.label, Clients: top.clients, W: w.WriteFraction(), Wo: math.NaN()}
	r.progress("scale-out: measuring wo on %s, %d clients all on replica 1, %s", probe.label, top.clients, r.scfg.Duration)
	before, err := cpuOf(probe, 2)
	if err != nil {
		return nil, err
	}
	res, err := r.runOnce(ctx, probe, spread(probe.endpoints()[:1], top.clients), top, int(r.scfg.Duration/time.Second), nil)
	if err != nil {
		return nil, fmt.Errorf("scale-out run: %w", err)
	}
	if _, err := probe.converge(ctx, convergeTimeout); err != nil {
		return nil, err
	}
	after, err := cpuOf(probe, 2)
	if err != nil {
		return nil, err
	}
	so.LocalCPU, so.ApplyCPU, so.Transactions = after[0]-before[0], after[1]-before[1], res.Processed
	if so.LocalCPU > 0 {
		so.WoW = float64(so.ApplyCPU) / float64(so.LocalCPU)
	}
	if so.W > 0 {
		so.Wo = so.WoW / so.W
	}
	so.Measured = measuredScaleOut(rows, top)
	so.FittedWoW = FitWoW(so.Measured)
	r.progress("scale-out: %d transactions; CPU replica 1 (local) %s, replica 2 (apply) %s: wo·w = %.3f, wo = %.3f",
		so.Transactions, so.LocalCPU.Round(time.Millisecond), so.ApplyCPU.Round(time.Millisecond), so.WoW, so.Wo)
	return so, r.settle(ctx, probe)
}

func (r *suiteRunner) probeSystem() *system {
	for _, k := range []System{MW, Base} {
		for _, s := range r.systems {
			if s.kind == k && s.replicas >= 2 {
				return s
			}
		}
	}
	return nil
}

// cpuOf reads the PostgreSQL CPU time of the first n servers of s.
func cpuOf(s *system, n int) ([]time.Duration, error) {
	out := make([]time.Duration, n)
	for i := range n {
		d, err := postgresCPU(s.pgs[i].PID())
		if err != nil {
			return nil, fmt.Errorf("%s: CPU of replica %d: %w", s.label, i+1, err)
		}
		out[i] = d
	}
	return out, nil
}

// measuredScaleOut is tps(mw xN)/tps(mw x1) at point p.
func measuredScaleOut(rows []SuiteRow, p point) []ScalePoint {
	var one float64
	var pts []ScalePoint
	for _, row := range rows {
		if row.Kind != MW || row.Clients != p.clients || row.Param != p.param {
			continue
		}
		if row.Replicas == 1 {
			one = row.TPS
		}
		pts = append(pts, ScalePoint{Replicas: row.Replicas, SO: row.TPS})
	}
	if one == 0 {
		return nil
	}
	for i := range pts {
		pts[i].SO /= one
	}
	slices.SortFunc(pts, func(a, b ScalePoint) int { return a.Replicas - b.Replicas })
	return pts
}
