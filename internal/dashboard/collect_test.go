package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A certifier member (answering for itself in process) gathers its group
// and the replicas it lists: a member that does not answer, a replica
// that answers, one whose agent is gone, one without an HTTP listener.
func TestViewerGathersWhatAnswersAndNamesWhatDoesNot(t *testing.T) {
	replica1 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/status" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(ReplicaStatus{Name: "r1", State: "serving", Version: 45, Commits: 7})
	}))
	defer replica1.Close()
	down := closedAddr(t)
	self := "127.0.0.1:7400"
	status := &pb.StatusReply{MemberId: 1, Role: "leader", Term: 2, LeaderId: 1, DurableVersion: 50,
		Members: []*pb.Member{{Id: 1, Addr: self}, {Id: 2, Addr: down}},
		Replicas: []*pb.ReplicaSession{
			{Name: "r1", StatusAddr: strings.TrimPrefix(replica1.URL, "http://"), Connected: true, SinceUnixMs: 1000},
			{Name: "r2", StatusAddr: down, Connected: false, SinceUnixMs: 2000},
			{Name: "r3", Connected: true, SinceUnixMs: 3000},
		}}
	v := NewViewer(Config{ServedBy: "certifier member 1", Self: func() any { return nil },
		Certifiers: func() []string { return []string{self} }, LocalCertifier: func() *pb.StatusReply { return status }, LocalCertifierAddr: self})
	defer v.Close()

	c := v.Cluster(context.Background())
	var members []string
	for _, m := range c.Certifier.Members {
		members = append(members, fmt.Sprintf("%d %s %v %s", m.ID, m.Addr, m.Reachable, m.Role))
	}
	if want := fmt.Sprintf("[1 %s true leader 2 %s false ]", self, down); fmt.Sprint(members) != want || c.Certifier.Leader == nil || c.Certifier.Leader.ID != 1 {
		t.Errorf("members %v, want %s, member 1 leading", members, want)
	}
	var replicas []string
	for _, r := range c.Replicas {
		replicas = append(replicas, fmt.Sprintf("%s %s %v v%d lag %d", r.Name, r.State, r.Connected, r.Version, r.Lag))
	}
	if want := "[r1 serving true v45 lag 5 r2 unreachable false v0 lag 0 r3 unreachable true v0 lag 0]"; fmt.Sprint(replicas) != want {
		t.Errorf("replicas %v, want %s", replicas, want)
	}
	var alerts []string
	for _, a := range c.Alerts {
		alerts = append(alerts, a.Severity+" "+a.Subject)
	}
	if want := "[critical r2 critical r3 warning certifier member 2]"; fmt.Sprint(alerts) != want {
		t.Errorf("alerts %v, want %s", alerts, want)
	}
	if !strings.Contains(c.Replicas[2].Error, "no HTTP listener") {
		t.Errorf("r3: %q", c.Replicas[2].Error)
	}
	if again := v.Cluster(context.Background()); again != c {
		t.Error("a second request within cacheFor gathered again")
	}
}

// An agent answers for itself, also when no certifier answers.
func TestAgentViewWithoutCertifier(t *testing.T) {
	down := closedAddr(t)
	self := ReplicaStatus{Name: "r1", State: "recovering", Why: "waiting for the certifier", Version: 9, LagVersions: 3}
	v := NewViewer(Config{ServedBy: "agent r1", Self: func() any { return self }, Replica: func() ReplicaStatus { return self },
		Certifiers: func() []string { return []string{down} }})
	defer v.Close()
	c := v.Cluster(context.Background())
	if c.Certifier.Reachable || len(c.Certifier.Members) != 1 || c.Certifier.Members[0].Error == "" {
		t.Errorf("certifier: %+v", c.Certifier)
	}
	if len(c.Replicas) != 1 || !c.Replicas[0].Reachable || c.Replicas[0].Lag != 3 || c.Replicas[0].State != "recovering" {
		t.Errorf("replicas: %+v", c.Replicas)
	}
	if len(c.Alerts) != 2 || c.Alerts[0].Subject != "certifier" || c.Alerts[1].Subject != "r1" {
		t.Errorf("alerts: %+v", c.Alerts)
	}
}
