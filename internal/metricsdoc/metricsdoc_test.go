package metricsdoc_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/metricsdoc"
)

// root is the repository, from this package's directory.
const root = "../.."

func table(t *testing.T) metricsdoc.Table {
	t.Helper()
	tab, err := metricsdoc.ReadTable(filepath.Join(root, "docs", "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tab) == 0 {
		t.Fatal("docs/METRICS.md has no metrics table")
	}
	return tab
}

// Every metric the code defines has a row in docs/METRICS.md with its
// type and labels, and every row names a metric the code defines (or a
// collector's prefix).
func TestTheMetricsTableIsTheCode(t *testing.T) {
	tab := table(t)
	defined, err := metricsdoc.Defined(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 20 {
		t.Fatalf("found only %d metric definitions in the code: the reader misses some", len(defined))
	}
	for name, m := range defined {
		row, ok := tab[name]
		switch {
		case !ok:
			t.Errorf("%s: %s (%s) has no row in docs/METRICS.md", m.Where, name, m.Type)
		case m.Type != "" && row.Type != m.Type:
			t.Errorf("%s: %s is a %s; the table says %s", row.Where, name, m.Type, row.Type)
		case !slices.Equal(row.Labels, m.Labels):
			t.Errorf("%s: %s has labels %v; the table says %v", row.Where, name, m.Labels, row.Labels)
		}
	}
	for name, row := range tab {
		if _, ok := defined[name]; !ok && !strings.HasSuffix(name, "*") {
			t.Errorf("%s: %s is not defined in the code", row.Where, name)
		}
		if row.Meaning == "" {
			t.Errorf("%s: %s has no meaning", row.Where, name)
		}
	}
}

// The reader of the code finds what it should, and refuses what it
// cannot read.
func TestDefinedReadsTheClientLibrarysDefinitions(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "m.go", `package m

import prom "github.com/prometheus/client_golang/prometheus"

var (
	a = prom.NewCounterVec(prom.CounterOpts{Name: "x_total", Help: "h"}, []string{"k", "l"})
	b = prom.NewGaugeFunc(prom.GaugeOpts{Name: "y", Help: "h"}, func() float64 { return 0 })
	c = prom.NewDesc("z", "h", []string{"r"}, nil)
	d = []prom.HistogramOpts{{Name: "w_seconds"}}
)
`)
	got, err := metricsdoc.Defined(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, name := range []string{"w_seconds", "x_total", "y", "z"} {
		m := got[name]
		s = append(s, fmt.Sprintf("%s %s %v", m.Name, m.Type, m.Labels))
	}
	if want := "w_seconds histogram [];x_total counter [k l];y gauge [];z  [r]"; strings.Join(s, ";") != want || len(got) != 4 {
		t.Errorf("read %q (%d), want %q", strings.Join(s, ";"), len(got), want)
	}

	write(t, dir, "m.go", `package m

import "github.com/prometheus/client_golang/prometheus"

func gauge(name string) prometheus.GaugeOpts { return prometheus.GaugeOpts{Name: name} }

var e = prometheus.CounterOpts{Namespace: "tashkent", Name: "e_total"}
`)
	if _, err := metricsdoc.Defined(dir); err == nil || !strings.Contains(err.Error(), "Name is not a string literal") ||
		!strings.Contains(err.Error(), "with a Namespace") {
		t.Errorf("definitions it cannot read: %v", err)
	}
}
