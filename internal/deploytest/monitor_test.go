package deploytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/dashboard"
)

// dashboardTimeout bounds the wait for a dashboard to show the whole
// cluster: agents make themselves known when they open their session.
const dashboardTimeout = 15 * time.Second

// What the guide says to check once the cluster runs, and what it says of
// its channels, checked the way an operator would.

// checkMonitoring runs the guide's checks: `tashkent certifier members`
// on host 1, every agent's and member's /metrics, and the dashboard of an
// agent and of a member, from the monitoring host.
func (l *lab) checkMonitoring(ctx context.Context) {
	t := l.t
	out := l.membersOnHostOne(ctx, l.adminTLS().Args()...)
	t.Logf("tashkent certifier members on host 1:\n%s", out)
	if n := strings.Count(out, " leader "); n != 1 {
		t.Errorf("tashkent certifier members lists %d leaders, want 1", n)
	}
	if n := strings.Count(out, " follower "); n != 2 {
		t.Errorf("tashkent certifier members lists %d followers, want 2", n)
	}
	for _, h := range l.hosts {
		for port, metric := range map[int]string{
			agentMetricsPort:     "tashkent_agent_replica_version",
			certifierMetricsPort: "tashkent_certifier_durable_version",
		} {
			url := fmt.Sprintf("http://%s/metrics", hostPort(h.addr, port))
			code, body, err := httpGet(ctx, url)
			if err != nil || code != http.StatusOK || !strings.Contains(body, metric) {
				t.Errorf("%s: %d, %v; want 200 with %s", url, code, err, metric)
			}
		}
	}
	l.checkDashboard(ctx, hostPort(l.hosts[0].addr, agentMetricsPort))
	l.checkDashboard(ctx, hostPort(l.hosts[1].addr, certifierMetricsPort))
}

// checkDashboard waits until the dashboard at addr shows every member
// reachable with a leader, and every replica serving: the process behind
// it reached the others across the hosts' firewalls.
func (l *lab) checkDashboard(ctx context.Context, addr string) {
	url := "http://" + addr + "/api/cluster"
	deadline := time.Now().Add(dashboardTimeout)
	for {
		why := l.dashboardShortOf(ctx, url)
		if why == "" {
			l.t.Logf("%s shows the three replicas serving and the three members", url)
			return
		}
		if time.Now().After(deadline) || !sleep(ctx, pollInterval) {
			l.t.Errorf("%s after %s: %s", url, dashboardTimeout, why)
			return
		}
	}
}

// dashboardShortOf says what the dashboard at url lacks ("" for nothing).
func (l *lab) dashboardShortOf(ctx context.Context, url string) string {
	code, body, err := httpGet(ctx, url)
	if err != nil || code != http.StatusOK {
		return fmt.Sprintf("%d, %v", code, err)
	}
	var c dashboard.Cluster
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		return err.Error()
	}
	if c.Certifier.Leader == nil || len(c.Certifier.Members) != hostCount {
		return fmt.Sprintf("leader %v, %d members", c.Certifier.Leader, len(c.Certifier.Members))
	}
	for _, m := range c.Certifier.Members {
		if !m.Reachable {
			return fmt.Sprintf("member %s unreachable: %s", m.Addr, m.Error)
		}
	}
	if len(c.Replicas) != hostCount {
		return fmt.Sprintf("%d replicas", len(c.Replicas))
	}
	for _, r := range c.Replicas {
		if !r.Reachable || r.State != "serving" {
			return fmt.Sprintf("replica %s at %s: %s %s", r.Name, r.StatusAddr, r.State, r.Error)
		}
	}
	return ""
}

// membersOnHostOne runs `tashkent certifier members` on host 1 with args.
func (l *lab) membersOnHostOne(ctx context.Context, args ...string) string {
	first := l.hosts[0]
	args = append([]string{"certifier", "members", "--certifier", hostPort(first.addr, certifierPort)}, args...)
	out, err := first.ns.Command(l.bin, args...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("tashkent %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// checkChannelsRequireTLS checks that each network channel refuses a
// client without TLS, and that the firewall drops what the guide does not
// open.
func (l *lab) checkChannelsRequireTLS(ctx context.Context) {
	t := l.t
	if out := l.membersOnHostOne(ctx); strings.Contains(out, "leader") || !strings.Contains(out, "unreachable") {
		t.Errorf("a plaintext client got an answer from a certifier member:\n%s", out)
	}
	h := l.hosts[0]
	plain := fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres sslmode=disable connect_timeout=5", h.addr, pgPort, appRole, appPassword)
	if conn, err := pgx.Connect(ctx, plain); err == nil {
		conn.Close(ctx)
		t.Errorf("%s's PostgreSQL accepted a client without TLS from the network", h)
	} else if sqlState(err) != "28000" {
		t.Errorf("%s's PostgreSQL refused a client without TLS with %v, want 28000 (pg_hba.conf: reject)", h, err)
	}
	// The monitoring host may scrape, not reach the certifier's port.
	if c, err := net.DialTimeout("tcp", hostPort(h.addr, certifierPort), time.Second); err == nil {
		c.Close()
		t.Errorf("the firewall of %s lets the monitoring host reach the certifier's port %d", h, certifierPort)
	}
}
