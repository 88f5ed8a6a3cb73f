package configfile

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// commentWidth is where Encode wraps comments: a file stays readable in
// an 80-column terminal with room for the "# ".
const commentWidth = 78

// Encode writes settings as a config file: header, if any, as a comment
// at the top, then each key on its line, after its Usage as a comment.
func Encode(w io.Writer, header string, settings []Setting) error {
	bw := bufio.NewWriter(w)
	if header != "" {
		writeComment(bw, header)
		bw.WriteString("\n")
	}
	for i, s := range settings {
		value, err := encodeValue(s.Value)
		if err != nil {
			return fmt.Errorf("key %q: %w", s.Key, err)
		}
		if s.Usage != "" && i > 0 {
			bw.WriteString("\n")
		}
		writeComment(bw, s.Usage)
		fmt.Fprintf(bw, "%s = %s\n", encodeKey(s.Key), value)
	}
	return bw.Flush()
}

// writeComment writes text as "# " lines wrapped at commentWidth; none
// when text is empty.
func writeComment(w *bufio.Writer, text string) {
	if text == "" {
		return
	}
	for _, paragraph := range strings.Split(text, "\n") {
		line := ""
		for _, word := range strings.Fields(paragraph) {
			if line != "" && len(line)+1+len(word) > commentWidth {
				fmt.Fprintf(w, "# %s\n", line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += word
		}
		fmt.Fprintln(w, strings.TrimRight("# "+line, " "))
	}
}

// encodeKey is key bare when TOML allows it, else quoted.
func encodeKey(key string) string {
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return quote(key)
		}
	}
	if key == "" {
		return `""`
	}
	return key
}

func encodeValue(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return quote(v), nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		if v > math.MaxInt64 {
			return "", fmt.Errorf("%d is above %d, the largest TOML integer", v, int64(math.MaxInt64))
		}
		return strconv.FormatUint(v, 10), nil
	case float64:
		return encodeFloat(v), nil
	case time.Duration:
		return quote(v.String()), nil
	case []string:
		quoted := make([]string, len(v))
		for i, s := range v {
			quoted[i] = quote(s)
		}
		return "[" + strings.Join(quoted, ", ") + "]", nil
	}
	return "", fmt.Errorf("a value of type %T has no config file form", v)
}

// encodeFloat writes f as TOML wants a float: with a fraction or an
// exponent, and inf and nan spelled its way.
func encodeFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// quote is s as a TOML basic string: in double quotes, with the
// backslash escapes TOML defines and \uXXXX for other control characters.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
