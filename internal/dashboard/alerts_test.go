package dashboard

import (
	"strings"
	"testing"
	"time"
)

func serving(name string) ReplicaView {
	return ReplicaView{ReplicaStatus: ReplicaStatus{Name: name, State: "serving"}, Reachable: true, Connected: true, Since: time.Unix(1, 0)}
}

func TestAlerts(t *testing.T) {
	leader := &MemberStatus{ID: 1, Role: "leader"}
	healthy := CertifierView{Reachable: true, Leader: leader, Members: []MemberView{{Addr: "a:1", Reachable: true, MemberStatus: *leader}}}
	th := DefaultThresholds
	for _, tc := range []struct {
		name string
		c    Cluster
		want []string // "severity subject: text fragment", in order
	}{
		{"healthy", Cluster{Certifier: healthy, Replicas: []ReplicaView{serving("r1"), serving("r2")}}, nil},
		{"replica unreachable", Cluster{Certifier: healthy, Replicas: []ReplicaView{serving("r1"),
			{ReplicaStatus: ReplicaStatus{Name: "r2", State: StateUnreachable}, Error: "connection refused", Since: time.Unix(1, 0)}}},
			[]string{"critical r2: unreachable: its agent does not answer (connection refused)"}},
		{"halted", Cluster{Certifier: healthy, Replicas: []ReplicaView{func() ReplicaView {
			r := serving("r1")
			r.State, r.Why, r.ApplyStalledSeconds = "halted", "version 7 could not be applied", 60
			return r
		}()}}, []string{"critical r1: halted, it stopped applying: version 7"}},
		{"stalled, behind, flow control", Cluster{Certifier: healthy, Replicas: []ReplicaView{func() ReplicaView {
			r := serving("r1")
			r.ApplyStalledSeconds, r.Lag, r.FlowControlPausing = th.ApplyStalledSeconds, th.LagVersions+1, true
			return r
		}()}}, []string{"critical r1: stopped applying: remote versions have waited 10 s", "warning r1: falls behind: 10001 versions", "warning r1: flow control engaged"}},
		{"catching up, no session", Cluster{Certifier: healthy, Replicas: []ReplicaView{func() ReplicaView {
			r := serving("r1")
			r.State, r.Why = "catching_up", "the replica is catching up with the cluster"
			return r
		}(), func() ReplicaView {
			r := serving("r2")
			r.Connected = false
			return r
		}()}}, []string{"warning r1: catching up: the replica is catching up", "warning r2: serving, but no certifier holds a session"}},
		{"certifier unreachable", Cluster{Certifier: CertifierView{Members: []MemberView{{Addr: "a:1", Error: "connection refused"}}}, Replicas: []ReplicaView{serving("r1")}},
			[]string{"critical certifier: unreachable: no certifier answers (connection refused)"}},
		{"no leader, one member down", Cluster{Certifier: CertifierView{Reachable: true, Members: []MemberView{
			{Addr: "a:1", Reachable: true, MemberStatus: MemberStatus{ID: 1, Role: "candidate"}},
			{Addr: "b:1", Error: "deadline exceeded", MemberStatus: MemberStatus{ID: 2}}}}},
			[]string{"critical certifier: no leader", "warning certifier member 2: unreachable: deadline exceeded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := alertsOf(&tc.c, th)
			if len(got) != len(tc.want) {
				t.Fatalf("alerts %v, want %d: %v", got, len(tc.want), tc.want)
			}
			for i, a := range got {
				s := a.Severity + " " + a.Subject + ": " + a.Text
				if !strings.HasPrefix(s, tc.want[i]) {
					t.Errorf("alert %d: %q, want it to start with %q", i, s, tc.want[i])
				}
			}
		})
	}
}
