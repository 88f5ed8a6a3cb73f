package configfile

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Apply sets the flags of fs from the config file at path, except the
// flags the command line gave (Changed), which override the file. notKeys
// are flags that are not config keys (--config itself). It reports every
// key that is not a flag, or whose value is not of its flag's type, as
// FILE:LINE: key "k": ..., all in one error.
func Apply(fs *pflag.FlagSet, path string, notKeys ...string) error {
	settings, err := Read(path)
	if err != nil {
		return err
	}
	fromCommandLine := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { fromCommandLine[f.Name] = true })
	var errs []error
	for _, s := range settings {
		f := fs.Lookup(s.Key)
		var err error
		switch {
		case f == nil || slices.Contains(notKeys, s.Key):
			err = fmt.Errorf("unknown key %q (%s)", s.Key, hintFor(fs, s.Key, notKeys))
		case fromCommandLine[s.Key]:
			continue
		default:
			err = set(fs, f, s.Value)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", path, s.Line, err))
		}
	}
	return errors.Join(errs...)
}

// suggestDistanceMax is how many edits away from a key a flag may be to be
// suggested for it: typos, not other words.
const suggestDistanceMax = 2

// hintFor is the hint of an unknown key: the closest flag name, if one is
// near, else where the keys are listed.
func hintFor(fs *pflag.FlagSet, key string, notKeys []string) string {
	best, bestDistance := "", suggestDistanceMax+1
	fs.VisitAll(func(f *pflag.Flag) {
		if d := editDistance(key, f.Name); d < bestDistance && !f.Hidden && !slices.Contains(notKeys, f.Name) {
			best, bestDistance = f.Name, d
		}
	})
	if best != "" {
		return fmt.Sprintf("did you mean %q?", best)
	}
	return "the keys are the command's flags; --print-config lists them"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// kind is the TOML type a flag's value has in a config file.
type kind int

const (
	kindString kind = iota
	kindBool
	kindInteger
	kindFloat
	kindList
)

func kindOf(f *pflag.Flag) kind {
	if _, ok := f.Value.(pflag.SliceValue); ok {
		return kindList
	}
	switch t := f.Value.Type(); {
	case t == "bool":
		return kindBool
	case t == "count", strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return kindInteger
	case strings.HasPrefix(t, "float"):
		return kindFloat
	}
	return kindString
}

// set gives flag f the value v, as decoded from TOML.
func set(fs *pflag.FlagSet, f *pflag.Flag, v any) error {
	k := kindOf(f)
	if k == kindList {
		list, ok := v.([]any)
		if !ok {
			return wrongType(f, k, v)
		}
		texts := make([]string, len(list))
		for i, elem := range list {
			s, ok := elem.(string)
			if !ok {
				return wrongType(f, k, v)
			}
			texts[i] = s
		}
		if err := f.Value.(pflag.SliceValue).Replace(texts); err != nil {
			return fmt.Errorf("key %q: %w", f.Name, err)
		}
		f.Changed = true
		return nil
	}
	text, ok := scalarText(k, v)
	if !ok {
		return wrongType(f, k, v)
	}
	if err := f.Value.Set(text); err != nil {
		return fmt.Errorf("key %q: %q: %w", f.Name, text, err)
	}
	f.Changed = true
	return nil
}

// scalarText is v as the flag's command-line text, if v has the TOML
// type of kind k (an integer also does for a float).
func scalarText(k kind, v any) (string, bool) {
	switch v := v.(type) {
	case bool:
		return strconv.FormatBool(v), k == kindBool
	case int64:
		return strconv.FormatInt(v, 10), k == kindInteger || k == kindFloat
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), k == kindFloat
	case string:
		return v, k == kindString
	}
	return "", false
}

func wrongType(f *pflag.Flag, k kind, v any) error {
	return fmt.Errorf("key %q takes %s, not %s", f.Name, describeKind(f, k), describeValue(v))
}

func describeKind(f *pflag.Flag, k kind) string {
	switch k {
	case kindBool:
		return "true or false"
	case kindInteger:
		return "an integer"
	case kindFloat:
		return "a number"
	case kindList:
		return `an array of strings, such as ["a", "b"]`
	}
	if f.Value.Type() == "duration" {
		return `a duration with its unit, in quotes, such as "100ms" or "2s"`
	}
	return "a string, in quotes"
}

func describeValue(v any) string {
	switch v := v.(type) {
	case bool:
		return fmt.Sprintf("the boolean %t", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the float %g", v)
	case string:
		return fmt.Sprintf("the string %q", v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// Effective is the value every flag of fs has, in the order the flags
// were defined, as settings with the flag's usage: what --print-config
// prints. notKeys are left out, and so are hidden flags (debugging and
// fault-test switches) unless set.
func Effective(fs *pflag.FlagSet, notKeys ...string) ([]Setting, error) {
	var out []Setting
	var errs []error
	sorted := fs.SortFlags
	fs.SortFlags = false
	defer func() { fs.SortFlags = sorted }()
	fs.VisitAll(func(f *pflag.Flag) {
		if slices.Contains(notKeys, f.Name) || f.Hidden && !f.Changed {
			return
		}
		v, err := typedValue(f)
		if err != nil {
			errs = append(errs, err)
			return
		}
		out = append(out, Setting{Key: f.Name, Value: v, Usage: f.Usage})
	})
	return out, errors.Join(errs...)
}

// typedValue is the value of f with the TOML type of its kind.
func typedValue(f *pflag.Flag) (any, error) {
	text := f.Value.String()
	var v any
	var err error
	switch kindOf(f) {
	case kindList:
		return f.Value.(pflag.SliceValue).GetSlice(), nil
	case kindBool:
		v, err = strconv.ParseBool(text)
	case kindInteger:
		var u uint64
		if v, err = strconv.ParseInt(text, 10, 64); err != nil {
			// A uint64 above TOML's largest integer.
			if u, err = strconv.ParseUint(text, 10, 64); err == nil && u > math.MaxInt64 {
				err = fmt.Errorf("above %d, the largest TOML integer", int64(math.MaxInt64))
			}
		}
	case kindFloat:
		v, err = strconv.ParseFloat(text, 64)
	default:
		v = text
	}
	if err != nil {
		return nil, fmt.Errorf("flag --%s: value %q: %w", f.Name, text, err)
	}
	return v, nil
}
