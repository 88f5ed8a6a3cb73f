package configfile

import (
	"errors"
	"fmt"
	"os"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Setting is one key of a config file and its value.
type Setting struct {
	Key string
	// Value is what TOML decodes (string, bool, int64, float64, []any,
	// map[string]any, a date) when read; when written, a string, bool,
	// int, int64, uint64, float64, time.Duration or []string.
	Value any
	// Line is where Read found the key (from 1); 0 for a setting that was
	// not read from a file.
	Line int
	// Usage is written as a comment above the key (Encode); empty: none.
	Usage string
}

// Read reads the config file at path: its keys in the order of the file,
// with their values and lines.
func Read(path string) ([]Setting, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	return Parse(path, data)
}

// Parse reads the config file data, called name in errors.
func Parse(name string, data []byte) ([]Setting, error) {
	var values map[string]any
	if err := toml.Unmarshal(data, &values); err != nil {
		return nil, positioned(name, err)
	}
	var p unstable.Parser
	p.Reset(data)
	var out []Setting
	for p.NextExpression() {
		expr := p.Expression()
		var parts []string
		line := 0
		for it := expr.Key(); it.Next(); {
			k := it.Node()
			if line == 0 {
				line = p.Shape(k.Raw).Start.Line
			}
			parts = append(parts, string(k.Data))
		}
		key := strings.Join(parts, ".")
		if expr.Kind != unstable.KeyValue {
			return nil, fmt.Errorf("%s:%d: [%s]: a config file has no tables: every key is a flag name, at the top level", name, line, key)
		}
		out = append(out, Setting{Key: key, Value: lookup(values, parts), Line: line})
	}
	if err := p.Error(); err != nil {
		return nil, positioned(name, err)
	}
	return out, nil
}

// lookup finds the value of a (dotted) key in the decoded document.
func lookup(doc map[string]any, parts []string) any {
	var v any = doc
	for _, part := range parts {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	return v
}

// positioned turns a TOML syntax error into FILE:LINE:COLUMN: message.
func positioned(name string, err error) error {
	var decodeErr *toml.DecodeError
	if errors.As(err, &decodeErr) {
		line, col := decodeErr.Position()
		return fmt.Errorf("%s:%d:%d: %s", name, line, col, strings.TrimPrefix(decodeErr.Error(), "toml: "))
	}
	var parseErr *unstable.ParserError
	if errors.As(err, &parseErr) {
		return fmt.Errorf("%s: %s", name, parseErr.Message)
	}
	return fmt.Errorf("%s: %w", name, err)
}
