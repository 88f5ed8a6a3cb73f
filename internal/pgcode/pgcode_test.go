package pgcode

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// declaredCodes parses this package's source and returns every string
// constant it declares, by name, so that the tests see a constant added
// later without a list to keep up to date.
func declaredCodes(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "pgcode.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("constant %s is not a string literal", name.Name)
				}
				v, _ := strconv.Unquote(lit.Value)
				codes[name.Name] = v
			}
		}
	}
	return codes
}

func TestCodesAreWellFormedAndUnique(t *testing.T) {
	codes := declaredCodes(t)
	if len(codes) < 20 {
		t.Fatalf("parsed %d codes from pgcode.go, want all of them", len(codes))
	}
	sqlstate := regexp.MustCompile(`^[0-9A-Z]{5}$`)
	byCode := map[string]string{}
	for name, code := range codes {
		if !sqlstate.MatchString(code) {
			t.Errorf("%s = %q is not five digits or upper-case letters", name, code)
		}
		if other, dup := byCode[code]; dup {
			t.Errorf("%s and %s both name %s", name, other, code)
		}
		byCode[code] = name
	}
}

// TestTKCodesMatchExtension checks that class TK here is exactly the list
// in the extension's header, and that the SQL script raises no TK code
// missing from it.
func TestTKCodesMatchExtension(t *testing.T) {
	var here []string
	for _, code := range declaredCodes(t) {
		if strings.HasPrefix(code, "TK") {
			here = append(here, code)
		}
	}
	header, err := os.ReadFile("../../extension/src/tashkent.h")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../extension/sql/tashkent--1.0.sql")
	if err != nil {
		t.Fatal(err)
	}
	var inHeader []string
	for _, m := range regexp.MustCompile(`MAKE_SQLSTATE\('T','K','(\d)','(\d)','(\d)'\)`).FindAllStringSubmatch(string(header), -1) {
		inHeader = append(inHeader, "TK"+m[1]+m[2]+m[3])
	}
	sort.Strings(here)
	sort.Strings(inHeader)
	if fmt.Sprint(here) != fmt.Sprint(inHeader) {
		t.Errorf("TK codes: pgcode has %v, tashkent.h has %v", here, inHeader)
	}
	raised := regexp.MustCompile(`ERRCODE = '(TK\d{3})'`).FindAllStringSubmatch(string(script), -1)
	if len(raised) == 0 {
		t.Error("found no TK code raised in tashkent--1.0.sql: the pattern no longer matches the script")
	}
	for _, m := range raised {
		if !slices.Contains(inHeader, m[1]) {
			t.Errorf("tashkent--1.0.sql raises %s, which tashkent.h does not list", m[1])
		}
	}
}

func TestOf(t *testing.T) {
	wrapped := fmt.Errorf("apply: %w", &pgconn.PgError{Code: SerializationFailure})
	if got := Of(wrapped); got != SerializationFailure {
		t.Errorf("Of(a wrapped PgError) = %q, want %q", got, SerializationFailure)
	}
	if got := Of(errors.New("not from PostgreSQL")); got != "" {
		t.Errorf("Of(another error) = %q, want \"\"", got)
	}
	if got := Of(nil); got != "" {
		t.Errorf("Of(nil) = %q, want \"\"", got)
	}
}

func TestClass(t *testing.T) {
	for code, want := range map[string]string{
		UniqueViolation: IntegrityConstraintViolation, IntegrityConstraintViolation: IntegrityConstraintViolation,
		AlreadyCommitted: "TK000", "": "", "235": "",
	} {
		if got := Class(code); got != want {
			t.Errorf("Class(%q) = %q, want %q", code, got, want)
		}
	}
}

func TestMissingObject(t *testing.T) {
	for code, want := range map[string]bool{
		InvalidSchemaName: true, UndefinedTable: true, UndefinedFunction: true,
		SerializationFailure: false, "": false,
	} {
		if got := MissingObject(fmt.Errorf("query: %w", &pgconn.PgError{Code: code})); got != want {
			t.Errorf("MissingObject(%q) = %v, want %v", code, got, want)
		}
	}
}
