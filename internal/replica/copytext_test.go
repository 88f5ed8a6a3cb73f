package replica

import (
	"errors"
	"strings"
	"testing"
)

// A record's fields come out as record_in hands them to the columns'
// input functions, written as COPY's text format reads them back.
func TestAppendCopyLine(t *testing.T) {
	all := func(n int) []bool {
		b := make([]bool, n)
		for i := range b {
			b[i] = true
		}
		return b
	}
	for _, tc := range []struct {
		name, record string
		fields       []bool
		want         string
	}{
		{"plain", `(1,abc,2.5)`, all(3), "1\tabc\t2.5\n"},
		{"NULLs: unquoted empty fields", `(,x,)`, all(3), "\\N\tx\t\\N\n"},
		{"all NULL", `(,,)`, all(3), "\\N\t\\N\t\\N\n"},
		{"one NULL column", `()`, all(1), "\\N\n"},
		{"empty string: quoted", `("",x,"")`, all(3), "\tx\t\n"},
		{"quoted with spaces", `(1,"a b")`, all(2), "1\ta b\n"},
		{"doubled quote inside quotes", `(1,"x""y")`, all(2), "1\tx\"y\n"},
		{"backslash doubled inside quotes", `(1,"a\\b")`, all(2), "1\ta\\\\b\n"},
		{"backslash escapes outside quotes", `(1,a\,b\)c\\d)`, all(2), "1\ta,b)c\\\\d\n"},
		{"backslash escapes a quote", `(1,"a\"b")`, all(2), "1\ta\"b\n"},
		{"quotes in the middle of a field", `(ab"c,d"e)`, all(1), "abc,de\n"},
		{"commas and parentheses quoted", `("a,b","(c)")`, all(2), "a,b\t(c)\n"},
		{"tab, newline, CR inside values", "(\"a\tb\",\"c\nd\",\"e\rf\")", all(3), "a\\tb\tc\\nd\te\\rf\n"},
		{"a value that reads as COPY's NULL marker", `("\\N")`, all(1), "\\\\N\n"},
		{"a value that is COPY's end marker", `("\\.")`, all(1), "\\\\.\n"},
		{"whitespace unquoted is kept", `( a ,b )`, all(2), " a \tb \n"},
		{"whitespace around the parentheses", " \t(1,2)\n ", all(2), "1\t2\n"},
		{"array", `(1,"{1,2,3}","{""a b"",NULL,""c\\\\d""}")`, all(3), "1\t{1,2,3}\t{\"a b\",NULL,\"c\\\\\\\\d\"}\n"},
		{"nested composite", `(1,"(2,""(3,""""x y"""")"")")`, all(2), "1\t(2,\"(3,\"\"x y\"\")\")\n"},
		{"composite with NULL and empty fields", `(1,"(,"""")")`, all(2), "1\t(,\"\")\n"},
		{"json", `(1,"{""a"": [1, ""b\\\\""]}")`, all(2), "1\t{\"a\": [1, \"b\\\\\\\\\"]}\n"},
		{"multibyte", `(1,"naïve ☃")`, all(2), "1\tnaïve ☃\n"},
		{"generated column left out", `(1,2,3)`, []bool{true, false, true}, "1\t3\n"},
		{"first column left out", `(1,"a,b",3)`, []bool{false, true, true}, "a,b\t3\n"},
		{"last column left out", `(1,2,"x""y")`, []bool{true, true, false}, "1\t2\n"},
		{"NULL left out", `(1,,3)`, []bool{true, false, true}, "1\t3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := appendCopyLine([]byte("kept|"), []byte(tc.record), tc.fields)
			if err != nil {
				t.Fatalf("%s: %v", tc.record, err)
			}
			if string(got) != "kept|"+tc.want {
				t.Fatalf("%s:\n got %q\nwant %q", tc.record, got, "kept|"+tc.want)
			}
		})
	}
}

// What record_in refuses, appendCopyLine refuses (and a NUL byte, which
// record_in never sees): the statement then applies the row.
func TestAppendCopyLineRefuses(t *testing.T) {
	for _, tc := range []struct {
		record string
		fields int
		why    string
	}{
		{``, 1, "missing left parenthesis"},
		{`1,2)`, 2, "missing left parenthesis"},
		{`(1,2`, 2, "unexpected end of input"},
		{`(1)`, 2, "too few columns"},
		{`(1,2,3)`, 2, "too many columns"},
		{`(1,2) x`, 2, "junk after right parenthesis"},
		{`(1,"2)`, 2, "unexpected end of input"},
		{`(1,2\`, 2, "unexpected end of input"},
		{"(1,a\x00b)", 2, "NUL byte"},
		{"(1,a\\\x00)", 2, "unexpected end of input"},
		{`(1,2)`, 0, "too many columns"},
	} {
		fields := make([]bool, tc.fields)
		for i := range fields {
			fields[i] = true
		}
		_, err := appendCopyLine(nil, []byte(tc.record), fields)
		if !errors.Is(err, errMalformedRecord) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q (%d fields): %v, want %q", tc.record, tc.fields, err, tc.why)
		}
	}
}

// Against a model: values printed as record_out prints them, converted,
// and read back as COPY reads its text format, are the values.
func TestAppendCopyLineRoundTrips(t *testing.T) {
	values := []string{"", "a", "a b", `"`, `\`, `\\N`, `\N`, ",", "(", ")", "()", "\t", "\n", "\r\n", " x ",
		"{1,2}", `{"a,b",NULL}`, `("x",)`, "naïve", "\\.", "\v\f", "NULL", `""`, "a\"b\\c,d(e)f g"}
	for _, a := range values {
		for _, b := range values {
			row := []*string{&a, nil, &b}
			record := recordOutModel(row)
			line, err := appendCopyLine(nil, []byte(record), []bool{true, true, true})
			if err != nil {
				t.Fatalf("%q: %v", record, err)
			}
			got := copyTextModel(t, string(line))
			if len(got) != 3 || got[1] != nil || got[0] == nil || *got[0] != a || got[2] == nil || *got[2] != b {
				t.Fatalf("%q -> %q -> %v, want [%q NULL %q]", record, line, show(got), a, b)
			}
		}
	}
}

// FuzzAppendCopyLine: any values, printed as record_out prints them, come
// back from the COPY line as they were.
func FuzzAppendCopyLine(f *testing.F) {
	f.Add("a\x1fb c\x1f\x1e", "x\"y\\z")
	f.Add("\x1e\x1f", "")
	f.Fuzz(func(t *testing.T, s, extra string) {
		if strings.ContainsRune(s+extra, 0) {
			return
		}
		var row []*string
		for _, field := range strings.Split(s+"\x1f"+extra, "\x1f") {
			if field == "\x1e" {
				row = append(row, nil)
			} else {
				row = append(row, &field)
			}
		}
		fields := make([]bool, len(row))
		for i := range fields {
			fields[i] = true
		}
		line, err := appendCopyLine(nil, []byte(recordOutModel(row)), fields)
		if err != nil {
			t.Fatal(err)
		}
		if got := copyTextModel(t, string(line)); show(got) != show(row) {
			t.Fatalf("got %s, want %s", show(got), show(row))
		}
	})
}

// recordOutModel prints values as PostgreSQL's record_out does: NULL as
// nothing; a value quoted when it is empty or holds a quote, backslash,
// parenthesis, comma or space, with quotes and backslashes doubled.
func recordOutModel(row []*string) string {
	var sb strings.Builder
	sb.WriteByte('(')
	for i, v := range row {
		if i > 0 {
			sb.WriteByte(',')
		}
		if v == nil {
			continue
		}
		if *v != "" && !strings.ContainsAny(*v, "\"\\(), \t\n\r\v\f") {
			sb.WriteString(*v)
			continue
		}
		sb.WriteByte('"')
		for _, ch := range []byte(*v) {
			if ch == '"' || ch == '\\' {
				sb.WriteByte(ch)
			}
			sb.WriteByte(ch)
		}
		sb.WriteByte('"')
	}
	sb.WriteByte(')')
	return sb.String()
}

// copyTextModel reads one line of COPY's text format (default delimiter
// and NULL marker) as COPY FROM does.
func copyTextModel(t testing.TB, line string) []*string {
	t.Helper()
	if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 || strings.Contains(line, "\r") {
		t.Fatalf("not one line: %q", line)
	}
	var out []*string
	for _, f := range strings.Split(strings.TrimSuffix(line, "\n"), "\t") {
		if f == `\N` {
			out = append(out, nil)
			continue
		}
		var sb strings.Builder
		for i := 0; i < len(f); i++ {
			if f[i] != '\\' {
				sb.WriteByte(f[i])
				continue
			}
			i++
			if i == len(f) {
				t.Fatalf("a backslash ends field %q", f)
			}
			switch f[i] {
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 't':
				sb.WriteByte('\t')
			case '\\':
				sb.WriteByte('\\')
			default:
				t.Fatalf("escape \\%c in field %q, which the converter does not write", f[i], f)
			}
		}
		s := sb.String()
		out = append(out, &s)
	}
	return out
}

func show(row []*string) string {
	parts := make([]string, len(row))
	for i, v := range row {
		if v == nil {
			parts[i] = "NULL"
		} else {
			parts[i] = "'" + strings.ReplaceAll(*v, "'", "''") + "'"
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
