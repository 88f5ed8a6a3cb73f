package agent

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tashkent-db/tashkent/internal/verify"
)

// verifyMetrics keep the last periodic comparison's result.
type verifyMetrics struct {
	runs      *prometheus.CounterVec
	differing prometheus.Gauge
	version   prometheus.Gauge
}

func newVerifyMetrics(reg *prometheus.Registry) *verifyMetrics {
	m := &verifyMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tashkent_agent_verify_runs_total",
			Help: "Periodic comparisons of this replica with its peers (--verify-every), by result: equal, differ, error."}, []string{"result"}),
		differing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_agent_verify_differing_tables",
			Help: "Tables that differed between the replicas in the last periodic comparison that ran to its end."}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tashkent_agent_verify_version",
			Help: "The version the last periodic comparison that ran to its end compared the replicas at."}),
	}
	reg.MustRegister(m.runs, m.differing, m.version)
	return m
}

// verifyLoop compares this replica with Config.VerifyPeers every
// Config.VerifyEvery while it serves (internal/verify): a drift that
// certification cannot cause (a change under tashkent.maintenance, a
// replica restored from the wrong backup, a bug) shows in the metrics
// and the log instead of staying unseen.
func (a *Agent) verifyLoop(ctx context.Context) {
	if a.cfg.VerifyEvery <= 0 || len(a.cfg.VerifyPeers) == 0 {
		return
	}
	t := time.NewTicker(a.cfg.VerifyEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if state, _ := a.State(); state == StateServing {
			a.verifyOnce(ctx)
		}
	}
}

func (a *Agent) verifyOnce(ctx context.Context) {
	self, err := a.connConfig("tashkent verify")
	if err != nil {
		a.log.Warn("periodic verify: no connection settings for this replica", "err", err)
		return
	}
	rs := append([]verify.Replica{{Name: a.cfg.Name, Config: self}}, a.cfg.VerifyPeers...)
	report, err := verify.Run(ctx, verify.Options{Replicas: rs})
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		a.metrics.verify.runs.WithLabelValues("error").Inc()
		a.log.Warn("periodic verify could not compare the replicas", "err", err)
		return
	}
	n := report.Differences()
	a.metrics.verify.differing.Set(float64(n))
	a.metrics.verify.version.Set(float64(report.Version))
	if n == 0 {
		a.metrics.verify.runs.WithLabelValues("equal").Inc()
		a.log.Info("periodic verify: the replicas are equal", "version", report.Version, "tables", len(report.Tables), "held", report.Held)
		return
	}
	a.metrics.verify.runs.WithLabelValues("differ").Inc()
	var b strings.Builder
	report.WriteDifferences(&b)
	a.log.Error("periodic verify: the replicas differ; run tashkent verify for the rows", "version", report.Version, "tables", n, "differences", b.String())
}
