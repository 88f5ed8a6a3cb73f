package metricsdoc_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/metricsdoc"
)

// promtool is Prometheus's own checker of rule files. The test fails
// without it, naming the package: CI installs it.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is needed to check the alert rules and the dashboard's queries: apt-get install prometheus (Debian's package; .ci/run installs it)")
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The example alert rules pass promtool's check and their unit tests,
// use only documented metrics, and are the ones docs/METRICS.md lists.
func TestAlertRules(t *testing.T) {
	dir := filepath.Join(root, "deploy", "prometheus")
	promtool(t, dir, "check", "rules", "alerts.yml")
	promtool(t, dir, "test", "rules", "alerts_test.yml")

	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tab := table(t)
	checkDocumented(t, "deploy/prometheus/alerts.yml", string(rules), tab)

	doc, err := os.ReadFile(filepath.Join(root, "docs", "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	inRules := names(`(?m)^\s*- alert: (\w+)`, string(rules))
	inDoc := names("(?m)^\\| `(Tashkent\\w+)` \\|", string(doc))
	if len(inRules) == 0 || !slices.Equal(inRules, inDoc) {
		t.Errorf("alerts.yml has alerts %v; docs/METRICS.md lists %v", inRules, inDoc)
	}
}

func names(pattern, text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}

// checkDocumented fails for every tashkent metric text uses that the
// table does not have.
func checkDocumented(t *testing.T, what, text string, tab metricsdoc.Table) {
	t.Helper()
	used := metricsdoc.Referenced(text, tab)
	if len(used) == 0 {
		t.Errorf("%s uses no tashkent metric", what)
	}
	if missing := tab.Undocumented(used); len(missing) > 0 {
		t.Errorf("%s uses %v, which docs/METRICS.md does not have", what, missing)
	}
}

// grafanaDashboard is the part of Grafana's dashboard model the test
// checks.
type grafanaDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// The Grafana dashboard is a well-formed dashboard (unique panel ids,
// panels inside the 24-column grid and not overlapping, every query on
// the datasource variable), its queries parse as PromQL (promtool checks
// them as recording rules), and it uses only documented metrics.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "tashkent.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("tashkent.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 || len(d.Templating.List) != 1 ||
		d.Templating.List[0].Name != "datasource" || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Fatalf("tashkent.json: uid %q, title %q, schemaVersion %d, templating %+v: want a uid, a title, a schema version and one Prometheus datasource variable",
			d.UID, d.Title, d.SchemaVersion, d.Templating.List)
	}
	var exprs []string
	ids := map[int]bool{}
	for i, p := range d.Panels {
		if ids[p.ID] || p.Title == "" {
			t.Errorf("panel %d (%q): id %d repeated, or no title", i, p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is outside the 24-column grid", p.Title, g)
		}
		for _, q := range d.Panels[:i] {
			if h := q.GridPos; g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", q.Title, p.Title)
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: want queries on the ${datasource} variable", p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" {
				t.Errorf("panel %q: a query without expr or refId", p.Title)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	checkDocumented(t, "deploy/grafana/tashkent.json", strings.Join(exprs, "\n"), table(t))

	// Grafana's $__rate_interval is a duration when Grafana sends the query.
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: grafana\n    rules:\n")
	for i, e := range exprs {
		e = strings.ReplaceAll(e, "$__rate_interval", "1m")
		quoted, _ := json.Marshal(e)
		fmt.Fprintf(&rules, "      - record: tashkent_dashboard_query_%d\n        expr: %s\n", i, quoted)
	}
	dir := t.TempDir()
	write(t, dir, "queries.yml", rules.String())
	promtool(t, dir, "check", "rules", "queries.yml")
}
