// Package metricsdoc reads the two places that name tashkent's Prometheus
// metrics, so that tests can hold them equal: the table in
// docs/METRICS.md, and the metric definitions in the Go code (Opts
// literals and NewDesc calls of the Prometheus client). The alert rules
// in deploy/prometheus and the dashboard in deploy/grafana are checked
// against the table with Referenced.
//
// Definitions are read from the source, not from running registries,
// because a labelled metric appears in a registry's output only once a
// label value was used. The price is a rule the code keeps: a metric's
// Name is a string literal in an Opts literal whose type is written (or
// that is an element of a slice of Opts), without Namespace or Subsystem;
// Defined reports a Name it cannot read as an error.
package metricsdoc

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Metric is one metric: its name, its type (gauge, counter, histogram,
// summary; "" where the code does not say, as for NewDesc), its label
// names, and what it means.
type Metric struct {
	Name    string
	Type    string
	Labels  []string
	Meaning string
	Where   string // file:line of its definition or its table row
}

// Table is the metrics of a document's table, by name. A row's name may
// end in "*": it then stands for every metric with that prefix (the
// client library's go_* and process_* collectors).
type Table map[string]Metric

// Covers returns the row that documents name.
func (t Table) Covers(name string) (Metric, bool) {
	if m, ok := t[name]; ok {
		return m, true
	}
	for prefix, m := range t {
		if strings.HasSuffix(prefix, "*") && strings.HasPrefix(name, strings.TrimSuffix(prefix, "*")) {
			return m, true
		}
	}
	return Metric{}, false
}

// tableHeader starts the metrics table.
const tableHeader = "| metric | type | labels | meaning |"

// Undocumented are the names the table does not cover.
func (t Table) Undocumented(names []string) []string {
	var out []string
	for _, name := range names {
		if _, ok := t.Covers(name); !ok {
			out = append(out, name)
		}
	}
	return out
}

// ReadTable reads the rows of the metrics table in the Markdown file at
// path: the table under tableHeader, rows "| `name` | type | `label`,
// `label` | meaning |".
func ReadTable(path string) (Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := Table{}
	sc := bufio.NewScanner(f)
	inTable := false
	for line := 1; sc.Scan(); line++ {
		row := sc.Text()
		if row == tableHeader {
			inTable = true
		}
		if inTable && !strings.HasPrefix(row, "|") {
			break
		}
		if !inTable || !strings.HasPrefix(row, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if len(cells) != 4 {
			return nil, fmt.Errorf("%s:%d: a metrics row has 4 cells (metric, type, labels, meaning), not %d", path, line, len(cells))
		}
		m := Metric{Name: strings.Trim(cells[0], "`"), Type: cells[1], Labels: backticked(cells[2]), Meaning: cells[3],
			Where: fmt.Sprintf("%s:%d", path, line)}
		if _, dup := t[m.Name]; dup {
			return nil, fmt.Errorf("%s: %s has two rows", m.Where, m.Name)
		}
		t[m.Name] = m
	}
	return t, sc.Err()
}

var backtickedRe = regexp.MustCompile("`([^`]+)`")

func backticked(cell string) []string {
	var out []string
	for _, m := range backtickedRe.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// optsTypes maps the client library's Opts types to metric types.
var optsTypes = map[string]string{"GaugeOpts": "gauge", "CounterOpts": "counter", "HistogramOpts": "histogram", "SummaryOpts": "summary"}

// Defined finds the metrics the Go code below root defines (test files
// and testdata left out). It fails on a definition it cannot read.
func Defined(root string) (map[string]Metric, error) {
	out := map[string]Metric{}
	var errs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, m := range definitions(fset, file, &errs) {
			if prev, dup := out[m.Name]; dup {
				errs = append(errs, fmt.Sprintf("%s: %s is also defined at %s", m.Where, m.Name, prev.Where))
			}
			out[m.Name] = m
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return out, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// definitions are the metrics one file defines.
func definitions(fset *token.FileSet, file *ast.File, errs *[]string) []Metric {
	prom := promImportName(file)
	if prom == "" {
		return nil
	}
	labelsOf := map[*ast.CompositeLit][]string{} // Opts given to a Vec constructor, with its labels
	var out []Metric
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fn := selected(call.Fun, prom); {
		case fn == "NewDesc" && len(call.Args) >= 3:
			name, ok := stringLit(call.Args[0])
			if !ok {
				*errs = append(*errs, fmt.Sprintf("%s: a NewDesc whose name is not a string literal", fset.Position(call.Pos())))
				return true
			}
			out = append(out, Metric{Name: name, Labels: stringList(call.Args[2]), Where: fset.Position(call.Pos()).String()})
		case len(call.Args) >= 2:
			if lit, ok := call.Args[0].(*ast.CompositeLit); ok {
				labelsOf[lit] = stringList(call.Args[1])
			}
		}
		return true
	})
	elided := map[*ast.CompositeLit]string{} // Opts literals in a slice of Opts, their type left out
	ast.Inspect(file, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		if arr, ok := lit.Type.(*ast.ArrayType); ok && optsTypes[selected(arr.Elt, prom)] != "" {
			for _, el := range lit.Elts {
				if opts, ok := el.(*ast.CompositeLit); ok && opts.Type == nil {
					elided[opts] = selected(arr.Elt, prom)
				}
			}
		}
		typ := selected(lit.Type, prom)
		if lit.Type == nil {
			typ = elided[lit]
		}
		if optsTypes[typ] == "" {
			return true
		}
		m := Metric{Type: optsTypes[typ], Labels: labelsOf[lit], Where: fset.Position(lit.Pos()).String()}
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			if key == nil {
				continue
			}
			switch key.Name {
			case "Name":
				m.Name, ok = stringLit(kv.Value)
				if !ok {
					*errs = append(*errs, fmt.Sprintf("%s: a metric whose Name is not a string literal", m.Where))
				}
			case "Namespace", "Subsystem":
				*errs = append(*errs, fmt.Sprintf("%s: a metric with a %s: give its whole Name instead", m.Where, key.Name))
			}
		}
		if m.Name != "" {
			out = append(out, m)
		}
		return true
	})
	return out
}

// promImportName is the name the file imports the Prometheus client
// under, "" when it does not.
func promImportName(file *ast.File) string {
	for _, imp := range file.Imports {
		if imp.Path.Value == `"github.com/prometheus/client_golang/prometheus"` {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return "prometheus"
		}
	}
	return ""
}

// selected is Sel of an expression pkg.Sel, "" for anything else.
func selected(e ast.Expr, pkg string) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if x, ok := sel.X.(*ast.Ident); ok && x.Name == pkg {
		return sel.Sel.Name
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// stringList is the strings of a []string{...} literal; nil otherwise.
func stringList(e ast.Expr) []string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range lit.Elts {
		if s, ok := stringLit(el); ok {
			out = append(out, s)
		}
	}
	return out
}

var metricNameRe = regexp.MustCompile(`\btashkent_[a-z0-9_]+`)

// histogramSeries are the suffixes of a histogram's series.
var histogramSeries = []string{"_bucket", "_sum", "_count"}

// Referenced returns the tashkent metrics text refers to (a PromQL
// expression, a rules file, a dashboard), each once, sorted, with a
// histogram's series (_bucket, _sum, _count) named by the histogram when
// the table has it so.
func Referenced(text string, t Table) []string {
	seen := map[string]bool{}
	for _, name := range metricNameRe.FindAllString(text, -1) {
		if _, ok := t[name]; !ok {
			for _, suffix := range histogramSeries {
				if base := strings.TrimSuffix(name, suffix); base != name && t[base].Type == "histogram" {
					name = base
					break
				}
			}
		}
		seen[name] = true
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
