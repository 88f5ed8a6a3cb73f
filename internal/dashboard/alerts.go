package dashboard

import (
	"fmt"
	"strings"
)

// Alert is one thing an operator should look at.
type Alert struct {
	Severity string `json:"severity"` // critical or warning
	Subject  string `json:"subject"`  // the replica's name, "certifier", "certifier member N"
	Text     string `json:"text"`
}

const (
	severityCritical = "critical"
	severityWarning  = "warning"
)

// AlertThresholds are the limits past which the page alerts. They match
// deploy/prometheus/alerts.yml, which also waits a while before firing.
type AlertThresholds struct {
	// LagVersions: a replica further behind the certifier's durable
	// version falls behind. Flow control holds the cluster once a
	// replica's backlog passes 1024 versions (the agent's default), so a
	// lag several times that means flow control is not keeping it close.
	LagVersions uint64 `json:"lag_versions"`
	// ApplyStalledSeconds: versions that waited this long without the
	// apply making progress mean the replica stopped applying. The lock
	// watch frees a blocked apply within a second or two.
	ApplyStalledSeconds float64 `json:"apply_stalled_seconds"`
}

// DefaultThresholds are the page's alert thresholds.
var DefaultThresholds = AlertThresholds{LagVersions: 10000, ApplyStalledSeconds: 10}

// alertsOf derives the alerts of a gathered cluster, most serious first:
// the certifier's, then each replica's in name order.
func alertsOf(c *Cluster, th AlertThresholds) []Alert {
	var out []Alert
	out = append(out, certifierAlerts(c.Certifier)...)
	for _, r := range c.Replicas {
		out = append(out, replicaAlerts(r, th)...)
	}
	critical := make([]Alert, 0, len(out))
	var warnings []Alert
	for _, a := range out {
		if a.Severity == severityCritical {
			critical = append(critical, a)
		} else {
			warnings = append(warnings, a)
		}
	}
	return append(critical, warnings...)
}

func certifierAlerts(cv CertifierView) []Alert {
	if !cv.Reachable {
		var errs []string
		for _, m := range cv.Members {
			errs = append(errs, m.Error)
		}
		return []Alert{{severityCritical, "certifier", "unreachable: no certifier answers (" + strings.Join(errs, "; ") + "); replicas cannot commit writes"}}
	}
	var out []Alert
	if cv.Leader == nil {
		out = append(out, Alert{severityCritical, "certifier", "no leader: no member of the certifier group certifies; replicas cannot commit writes"})
	}
	for _, m := range cv.Members {
		if !m.Reachable {
			out = append(out, Alert{severityWarning, memberSubject(m), "unreachable: " + m.Error})
		}
	}
	return out
}

func memberSubject(m MemberView) string {
	if m.ID == 0 {
		return "certifier " + m.Addr
	}
	return fmt.Sprintf("certifier member %d", m.ID)
}

func replicaAlerts(r ReplicaView, th AlertThresholds) []Alert {
	alert := func(sev, format string, args ...any) Alert {
		return Alert{sev, r.Name, fmt.Sprintf(format, args...)}
	}
	if !r.Reachable {
		return []Alert{alert(severityCritical, "unreachable: its agent does not answer (%s)", r.Error)}
	}
	var out []Alert
	switch r.State {
	case "serving":
	case "halted":
		out = append(out, alert(severityCritical, "halted, it stopped applying: %s", r.Why))
	default:
		out = append(out, alert(severityWarning, "%s: %s", strings.ReplaceAll(r.State, "_", " "), r.Why))
	}
	if r.State != "halted" && r.ApplyStalledSeconds >= th.ApplyStalledSeconds {
		out = append(out, alert(severityCritical, "stopped applying: remote versions have waited %.0f s without progress", r.ApplyStalledSeconds))
	}
	if r.Lag > th.LagVersions {
		out = append(out, alert(severityWarning, "falls behind: %d versions behind the certifier's durable version", r.Lag))
	}
	if r.FlowControlPausing {
		out = append(out, alert(severityWarning, "flow control engaged: it fell behind, and the certifier holds the other replicas' commits until it catches up"))
	}
	if !r.Since.IsZero() && !r.Connected && r.State == "serving" {
		out = append(out, alert(severityWarning, "serving, but no certifier holds a session of it"))
	}
	return out
}
