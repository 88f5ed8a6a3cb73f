package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/dashboard"
	"github.com/tashkent-db/tashkent/internal/dashboard/pagetest"
	"github.com/tashkent-db/tashkent/internal/metricsdoc"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestDashboardInChromium: a cluster of `tashkent up` (two replicas, a
// certifier group of three) serves the same dashboard from every process,
// and `tashkent status` lists its URLs. Headless Chromium shows each
// replica serving at its version, and no alert. Once replica2's agent is
// killed, the page shows replica2 unreachable with a critical alert, the
// leader's metrics say it is disconnected, and the screenshot has the
// alert's colour.
func TestDashboardInChromium(t *testing.T) {
	pagetest.NeedChromium(t)
	bin := testbin.Path(t)
	dir := newClusterDir(t, "tashkent-dashboard-test-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := cluster.Up(context.Background(), cluster.Options{Dir: dir, Replicas: 2, Certifiers: 3, Binary: bin})
	t.Cleanup(func() { cluster.Down(context.Background(), dir) }) // by recorded PID
	if err != nil {
		t.Fatal(err)
	}
	query(t, st.Replicas[0].DSN(), "CREATE TABLE seen (id int PRIMARY KEY)")
	for i := range 20 {
		query(t, st.Replicas[0].DSN(), "INSERT INTO seen VALUES ($1)", i)
	}

	urls := status(t, bin, dir).Dashboards
	if len(urls) != 5 {
		t.Fatalf("status lists %d dashboards, want 5 (3 certifier members, then 2 agents): %v", len(urls), urls)
	}
	version := checkEveryProcessServesTheCluster(t, urls)
	for _, url := range []string{urls[0], urls[4]} { // a certifier member's, an agent's
		dom := pagetest.DumpDOM(t, url, 3*time.Second)
		for _, name := range []string{"replica1", "replica2"} {
			row := fmt.Sprintf(`(?s)<tr data-replica="%s" data-state="serving".*?data-field="version">%d</td>`, name, version)
			if !regexp.MustCompile(row).MatchString(dom) {
				t.Errorf("%s: the page does not show %s serving at version %d:\n%s", url, name, version, dom)
			}
		}
		if !strings.Contains(dom, "No alerts") {
			t.Errorf("%s: the page shows alerts on a healthy cluster:\n%s", url, dom)
		}
	}

	agent2 := st.Replicas[1].Agent.PID
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", agent2)); err != nil || !strings.HasPrefix(string(raw), bin+"\x00agent\x00") {
		t.Fatalf("pid %d is not replica2's agent: %q %v", agent2, raw, err)
	}
	if err := syscall.Kill(agent2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agent1 := urls[3]
	waitForCluster(t, agent1, "replica2 unreachable", func(c *dashboard.Cluster) bool {
		return len(c.Replicas) == 2 && c.Replicas[1].State == dashboard.StateUnreachable && !c.Replicas[1].Connected
	})
	for _, url := range []string{agent1, urls[1]} {
		dom := pagetest.DumpDOM(t, url, 3*time.Second)
		if !strings.Contains(dom, `<tr data-replica="replica2" data-state="unreachable"`) {
			t.Errorf("%s: replica2 is not shown unreachable:\n%s", url, dom)
		}
		if !strings.Contains(dom, `class="alert critical" data-subject="replica2"><b>replica2</b> unreachable`) {
			t.Errorf("%s: no critical alert for replica2:\n%s", url, dom)
		}
	}
	leader := leaderMetrics(t, urls[:3])
	if !strings.Contains(leader, `tashkent_certifier_replica_connected{replica="replica2"} 0`) {
		t.Error("the leader's metrics do not say replica2 is disconnected")
	}
	checkMetricsDocumented(t, leader+httpBody(t, agent1+"metrics"))
	img := pagetest.Screenshot(t, agent1, 3*time.Second, 1200, 800, t.TempDir())
	if red, colours := pagetest.Pixels(img, pagetest.CriticalRGB, 8); colours < 20 || red < 10000 {
		t.Errorf("screenshot: %d colours, %d pixels of the critical colour; want a drawn page (20+) and the alert bar (10000+)", colours, red)
	}
	if table := mustRun(t, bin, "status", "--data-dir", dir); !strings.Contains(table, "dashboard: "+urls[0]) {
		t.Errorf("status does not print the dashboard's URL:\n%s", table)
	}
}

// checkEveryProcessServesTheCluster checks that every URL serves the same
// page, and a cluster of two replicas serving at one version, with three
// certifier members of which one leads. It returns the version.
func checkEveryProcessServesTheCluster(t *testing.T, urls []string) uint64 {
	t.Helper()
	page := httpBody(t, urls[0])
	var version uint64
	for _, url := range urls {
		if httpBody(t, url) != page {
			t.Errorf("%s serves another page", url)
		}
		c := waitForCluster(t, url, "both replicas serving at one version", func(c *dashboard.Cluster) bool {
			return len(c.Replicas) == 2 && c.Replicas[0].State == "serving" && c.Replicas[1].State == "serving" &&
				c.Replicas[0].Version >= 21 && c.Replicas[0].Version == c.Replicas[1].Version
		})
		version = c.Replicas[0].Version
		leaders := 0
		for _, m := range c.Certifier.Members {
			if m.Reachable && m.Role == "leader" {
				leaders++
			}
		}
		if len(c.Certifier.Members) != 3 || leaders != 1 || len(c.Alerts) != 0 {
			t.Errorf("%s: members %+v, alerts %+v: want 3 members, one leader, no alert", url, c.Certifier.Members, c.Alerts)
		}
	}
	return version
}

// httpBody is the body of a 200 answer to GET url.
func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// waitForCluster polls the dashboard at url until its /api/cluster
// satisfies ok, for at most 20 s.
func waitForCluster(t *testing.T, url, what string, ok func(*dashboard.Cluster) bool) *dashboard.Cluster {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var c dashboard.Cluster
		body := httpBody(t, url+"api/cluster")
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatalf("%sapi/cluster: %v", url, err)
		}
		if ok(&c) {
			return &c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%sapi/cluster: not %s after 20 s:\n%s", url, what, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkMetricsDocumented checks that every tashkent metric in a /metrics
// text is in docs/METRICS.md (internal/metricsdoc compares the table with
// the code's definitions; this, with what runs).
func checkMetricsDocumented(t *testing.T, text string) {
	t.Helper()
	tab, err := metricsdoc.ReadTable("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	exposed := metricsdoc.Referenced(text, tab)
	if len(exposed) < 20 {
		t.Fatalf("only %d tashkent metrics exposed: %v", len(exposed), exposed)
	}
	if missing := tab.Undocumented(exposed); len(missing) > 0 {
		t.Errorf("%v exposed but not in docs/METRICS.md", missing)
	}
}

// leaderMetrics is the /metrics of the certifier member that leads.
func leaderMetrics(t *testing.T, members []string) string {
	t.Helper()
	for _, url := range members {
		if m := httpBody(t, url+"metrics"); strings.Contains(m, "\ntashkent_certifier_leader 1\n") {
			return m
		}
	}
	t.Fatal("no certifier member says it leads (tashkent_certifier_leader 1)")
	return ""
}
