package dashboard

import (
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/dashboard/pagetest"
)

// scripted serves the page with a scripted /api/cluster: each answer is
// one second after the one before, replica1's counters grow by 100
// commits, 5 aborts and 50 applied versions a second and its lag by 10;
// replica2 is halted.
func scripted(t *testing.T) *httptest.Server {
	files, err := fs.Sub(page, "page")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(files))
	mux.HandleFunc("GET /api/cluster", func(w http.ResponseWriter, _ *http.Request) {
		i := uint64(n.Add(1))
		leader := MemberStatus{ID: 1, Addr: "127.0.0.1:7400", Role: "leader", Term: 3, Version: 1000 + 100*i, DurableVersion: 1000 + 100*i,
			Fsyncs: 20 * i, EntriesPerFsync: 5, Certifications: 105 * i, Aborts: 5 * i}
		c := &Cluster{ServedBy: "certifier member 1", Time: start.Add(time.Duration(i) * time.Second),
			Certifier: CertifierView{Reachable: true, Leader: &leader, Members: []MemberView{{Addr: leader.Addr, Reachable: true, MemberStatus: leader}}},
			Replicas: []ReplicaView{
				{ReplicaStatus: ReplicaStatus{Name: "replica1", State: "serving", Version: 990 + 100*i, Commits: 100 * i, Aborts: 5 * i, RemoteApplied: 50 * i},
					StatusAddr: "127.0.0.1:9101", Connected: true, Reachable: true, Lag: 10 * i},
				{ReplicaStatus: ReplicaStatus{Name: "replica2", State: "halted", Why: "version 7 could not be applied", Version: 7},
					StatusAddr: "127.0.0.1:9102", Connected: true, Reachable: true, Lag: 993 + 100*i},
			},
		}
		c.Alerts = alertsOf(c, DefaultThresholds)
		writeJSON(w, c)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// The page draws what /api/cluster says: the tables, the alerts, rates
// computed from consecutive samples, and a line per series in each chart.
func TestPageDrawsTheClusterAndItsHistory(t *testing.T) {
	srv := scripted(t)
	dom := pagetest.DumpDOM(t, srv.URL+"/", 8*time.Second)

	row := regexp.MustCompile(`(?s)<tr data-replica="replica1" data-state="serving"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if row == nil {
		t.Fatalf("no serving row of replica1 in the page:\n%s", dom)
	}
	cells := regexp.MustCompile(`<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(row[1], -1)
	var text []string
	for _, c := range cells {
		text = append(text, regexp.MustCompile(`<[^>]+>`).ReplaceAllString(c[1], ""))
	}
	// commits/s, abort rate and applied/s: 100/s, 5 of 105, 50/s.
	if len(text) < 7 || text[4] != "100" || text[5] != "4.8%" || text[6] != "50" {
		t.Errorf("replica1's cells %q: want commits/s 100, abort rate 4.8%%, applied/s 50", text)
	}
	if !regexp.MustCompile(`<tr data-replica="replica2" data-state="halted"`).MatchString(dom) {
		t.Error("replica2 is not shown halted")
	}
	if !strings.Contains(dom, `class="alert critical" data-subject="replica2"`) || !strings.Contains(dom, "version 7 could not be applied") {
		t.Error("no critical alert for the halted replica2")
	}
	if !strings.Contains(dom, "served by certifier member 1") {
		t.Error("the page does not say which process serves it")
	}
	for _, chart := range []string{"chart-commits", "chart-aborts", "chart-lag", "chart-fsync"} {
		svg := regexp.MustCompile(`(?s)<svg id="` + chart + `".*?</svg>`).FindString(dom)
		paths := regexp.MustCompile(`<path d="(M[^"]*)"`).FindAllStringSubmatch(svg, -1)
		want := 1
		if chart == "chart-lag" {
			want = 2 // a line per replica
		}
		if len(paths) != want {
			t.Errorf("%s: %d lines, want %d:\n%s", chart, len(paths), want, svg)
			continue
		}
		for _, p := range paths {
			if points := strings.Count(p[1], "L") + 1; points < 4 {
				t.Errorf("%s: a line of %d points after several samples: %s", chart, points, p[1])
			}
		}
	}
}

// The screenshot shows the page: it is as large as asked, not blank, and
// the critical alert is drawn in its colour.
func TestPageScreenshotShowsTheAlert(t *testing.T) {
	css, err := page.ReadFile("page/dashboard.css")
	if err != nil {
		t.Fatal(err)
	}
	c := pagetest.CriticalRGB
	if want := fmt.Sprintf("--critical: #%02x%02x%02x;", c[0], c[1], c[2]); !strings.Contains(string(css), want) {
		t.Fatalf("dashboard.css does not set %s: pagetest.CriticalRGB is the page's critical colour", want)
	}
	srv := scripted(t)
	img := pagetest.Screenshot(t, srv.URL+"/", 4*time.Second, 1000, 700, t.TempDir())
	red, colours := pagetest.Pixels(img, pagetest.CriticalRGB, 8)
	if colours < 20 {
		t.Errorf("the screenshot has %d colours: a blank page?", colours)
	}
	// The alert bar spans the page's width and a line of text.
	if red < 10000 {
		t.Errorf("%d pixels of the critical colour, want the alert bar's (at least 10000)", red)
	}
}
