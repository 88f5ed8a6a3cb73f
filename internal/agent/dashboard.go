package agent

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tashkent-db/tashkent/internal/dashboard"
)

// DashboardStatus is what the agent says of itself on /api/status and on
// the dashboard. Its counters are the Prometheus metrics' own values.
func (a *Agent) DashboardStatus() dashboard.ReplicaStatus {
	state, why := a.State()
	m := a.metrics
	return dashboard.ReplicaStatus{
		Name: a.cfg.Name, Mode: string(a.cfg.Mode), State: string(state), Why: why,
		Version: a.seq.committed(), DeliveredVersion: a.seq.delivered(),
		CertifierDurableVersion: a.certifierDurable.Load(), LagVersions: a.LagVersions(),
		FlowControlPausing:  metricValue(m.flowControlPausing) == 1,
		ApplyStalledSeconds: a.ApplyStalled().Seconds(),
		Commits:             uint64(metricValue(m.certifications.WithLabelValues("commit"))),
		Aborts:              uint64(metricValue(m.certifications.WithLabelValues("abort"))),
		RemoteApplied:       uint64(metricValue(m.applied)),
		Backends:            int(metricValue(m.backends)),
	}
}

// metricValue reads a counter's or a gauge's value.
func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// newDashboard is the agent's view of the cluster: it knows the
// certifier addresses it was given, and answers for itself.
func (a *Agent) newDashboard() *dashboard.Viewer {
	return dashboard.NewViewer(dashboard.Config{
		ServedBy:    "agent " + a.cfg.Name,
		Self:        func() any { return a.DashboardStatus() },
		Replica:     a.DashboardStatus,
		Certifiers:  func() []string { return splitAddrs(a.cfg.Certifier) },
		DialOptions: a.cfg.CertifierDialOptions,
	})
}

func splitAddrs(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
