package archdoc

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// tableHeader opens the package table.
const tableHeader = "| package | what it is | why it is separate |"

// Every Go package of the module has a row in the package table, and every
// package the table names exists.
func TestPackageTableListsEveryPackage(t *testing.T) {
	listed := listedPackages(t, filepath.Join(root, "docs", "ARCHITECTURE.md"))
	packages := modulePackages(t)
	for _, p := range packages {
		if !slices.Contains(listed, p) {
			t.Errorf("package %s has no row in the package table of docs/ARCHITECTURE.md", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(packages, p) {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which is not a package of the module", p)
		}
	}
}

// codeSpan is a name in backquotes.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// listedPackages reads the package paths the first column of the table
// names (a trailing slash dropped; file names, which end in .go, left out).
func listedPackages(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var listed []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == tableHeader:
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		}
		first := strings.SplitN(strings.TrimPrefix(line, "|"), "|", 2)[0]
		for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
			if name := strings.TrimSuffix(m[1], "/"); !strings.HasSuffix(name, ".go") {
				listed = append(listed, name)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(listed) == 0 {
		t.Fatalf("%s has no package table (a line %q)", path, tableHeader)
	}
	return listed
}

// modulePackages lists the directories that hold Go files, as paths from
// the repository's root, as `go list ./...` names them.
func modulePackages(t *testing.T) []string {
	t.Helper()
	var packages []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		if dir = filepath.ToSlash(dir); !slices.Contains(packages, dir) {
			packages = append(packages, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return packages
}
