package configfile

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
)

// testFlags is a command's flag set with one flag of every kind.
type testFlags struct {
	name      string
	staleness time.Duration
	index     int
	limit     uint64
	trust     bool
	ratio     float64
	args      []string
	config    string
	fault     string
}

func newTestFlags() (*pflag.FlagSet, *testFlags) {
	v := &testFlags{}
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	fs.StringVar(&v.name, "name", "", "this replica's name")
	fs.DurationVar(&v.staleness, "staleness", 100*time.Millisecond, "how often")
	fs.IntVar(&v.index, "replica-index", 0, "the replica's number")
	fs.Uint64Var(&v.limit, "flow-control-limit", 1024, "versions waiting")
	fs.BoolVar(&v.trust, "trust-ddl-roles", false, "let roles run DDL")
	fs.Float64Var(&v.ratio, "ratio", 0.5, "a fraction")
	fs.StringArrayVar(&v.args, "agent-arg", nil, "extra flags")
	fs.StringVar(&v.config, "config", "", "the config file")
	fs.StringVar(&v.fault, "unsafe-fault", "", "a fault point")
	fs.MarkHidden("unsafe-fault")
	return fs, v
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestApplySetsFlagsFromTheFile(t *testing.T) {
	fs, v := newTestFlags()
	path := writeConfig(t, `# a comment
name = "replica2"
staleness = "250ms"
replica-index = 2
flow-control-limit = 4_096
trust-ddl-roles = true
ratio = 1
agent-arg = ["--a=1", "--b=x,y"]
`)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, path, "config"); err != nil {
		t.Fatal(err)
	}
	want := testFlags{name: "replica2", staleness: 250 * time.Millisecond, index: 2, limit: 4096, trust: true, ratio: 1,
		args: []string{"--a=1", "--b=x,y"}}
	if !reflect.DeepEqual(*v, want) {
		t.Fatalf("flags after Apply: %+v, want %+v", *v, want)
	}
	if !fs.Changed("name") || fs.Changed("unsafe-fault") {
		t.Errorf("Changed: name %v (want true), unsafe-fault %v (want false)", fs.Changed("name"), fs.Changed("unsafe-fault"))
	}
}

func TestTheCommandLineOverridesTheFile(t *testing.T) {
	fs, v := newTestFlags()
	path := writeConfig(t, "name = \"from-file\"\nreplica-index = 2\nstaleness = \"1s\"\n")
	if err := fs.Parse([]string{"--name", "from-flag", "--staleness=2s"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, path, "config"); err != nil {
		t.Fatal(err)
	}
	if v.name != "from-flag" || v.staleness != 2*time.Second || v.index != 2 {
		t.Fatalf("name %q staleness %s replica-index %d; want from-flag, 2s (flags) and 2 (file)", v.name, v.staleness, v.index)
	}
}

func TestUnknownKeysAreErrorsWithTheirLines(t *testing.T) {
	fs, _ := newTestFlags()
	path := writeConfig(t, "name = \"r1\"\n\nstalenes = \"1s\"\n# config cannot name itself\nconfig = \"/etc/other.toml\"\nlog.level = \"debug\"\n")
	err := Apply(fs, path, "config")
	if err == nil {
		t.Fatal("Apply accepted unknown keys")
	}
	for _, want := range []string{
		path + `:3: unknown key "stalenes" (did you mean "staleness"?)`,
		path + `:5: unknown key "config" (the keys are the command's flags; --print-config lists them)`,
		path + `:6: unknown key "log.level"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"segment-mb", "segment-mib", 1}, {"stalenes", "staleness", 1},
		{"metric", "metrics", 1}, {"listen", "silent", 4}, {"kitten", "sitting", 3},
	} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestValuesOfAnotherTypeAreErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`staleness = 100`, `:1: key "staleness" takes a duration with its unit, in quotes, such as "100ms" or "2s", not the integer 100`},
		{`staleness = "100"`, `:1: key "staleness": "100": time: missing unit in duration "100"`},
		{"name = \"r1\"\nreplica-index = \"2\"", `:2: key "replica-index" takes an integer, not the string "2"`},
		{`trust-ddl-roles = "yes"`, `:1: key "trust-ddl-roles" takes true or false, not the string "yes"`},
		{`name = 7`, `:1: key "name" takes a string, in quotes, not the integer 7`},
		{`flow-control-limit = -1`, `:1: key "flow-control-limit": "-1": `},
		{`agent-arg = "--a=1"`, `:1: key "agent-arg" takes an array of strings, such as ["a", "b"], not the string "--a=1"`},
		{`ratio = "half"`, `:1: key "ratio" takes a number, not the string "half"`},
	} {
		fs, _ := newTestFlags()
		path := writeConfig(t, c.text)
		err := Apply(fs, path, "config")
		if err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("%s: %v, want %q", c.text, err, c.want)
		}
	}
}

func TestSyntaxErrorsAndTablesNameTheirLine(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"name = \"r1\"\nname = \"r2\"\n", `:2:1: key name is already defined`},
		{"name = \"r1\"\nstaleness = 1s\n", `:2:`},
		{"name = \"r1\"\n\n[agent]\nname = \"r2\"\n", `:3: [agent]: a config file has no tables`},
	} {
		_, err := Parse("agent.toml", []byte(c.text))
		if err == nil || !strings.Contains(err.Error(), "agent.toml"+c.want) {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing.toml")); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestPrintedConfigShowsDefaultsAndFileValues checks what --print-config
// prints: every key that is not hidden, with the defaults, the file's
// values and the command line's, and that it reads back to the same flags.
func TestPrintedConfigShowsDefaultsAndFileValues(t *testing.T) {
	fs, v := newTestFlags()
	path := writeConfig(t, "replica-index = 3\nunsafe-fault = \"drop\"\n")
	if err := fs.Parse([]string{"--name", "r3", "--agent-arg", "--x=1"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, path, "config"); err != nil {
		t.Fatal(err)
	}
	settings, err := Effective(fs, "config")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Encode(&out, "tashkent agent: the effective configuration", settings); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("printed:\n%s", text)
	for _, want := range []string{
		"# tashkent agent: the effective configuration\n",
		"# this replica's name\nname = \"r3\"\n",
		"staleness = \"100ms\"\n",
		"replica-index = 3\n",
		"flow-control-limit = 1024\n",
		"trust-ddl-roles = false\n",
		"ratio = 0.5\n",
		"agent-arg = [\"--x=1\"]\n",
		"unsafe-fault = \"drop\"\n", // hidden, shown because set
	} {
		if !strings.Contains(text, want) {
			t.Errorf("printed config lacks %q", want)
		}
	}
	if strings.Contains(text, "config =") {
		t.Error("printed config has the key config")
	}
	if strings.Index(text, "name =") > strings.Index(text, "staleness =") {
		t.Error("printed config is not in the order the flags were defined")
	}

	again, w := newTestFlags()
	if err := again.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Apply(again, writeConfig(t, text), "config"); err != nil {
		t.Fatalf("the printed config does not read back: %v", err)
	}
	if !reflect.DeepEqual(*w, *v) {
		t.Errorf("read back: %+v, want %+v", *w, *v)
	}
}

func TestEffectiveLeavesOutHiddenFlagsNotSet(t *testing.T) {
	fs, _ := newTestFlags()
	settings, err := Effective(fs, "config")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range settings {
		keys = append(keys, s.Key)
	}
	want := []string{"name", "staleness", "replica-index", "flow-control-limit", "trust-ddl-roles", "ratio", "agent-arg"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}

// TestEncodedFileReadsBack encodes every value type Encode takes, strings
// that need escapes among them, and decodes the result with go-toml.
func TestEncodedFileReadsBack(t *testing.T) {
	odd := "tab\there \"quoted\" back\\slash\nnewline \x01 \x7f é 'single'"
	settings := []Setting{
		{Key: "data-dir", Value: "/var/lib/tashkent/certifier"},
		{Key: "odd", Value: odd},
		{Key: "id", Value: 2},
		{Key: "window-versions", Value: uint64(262144)},
		{Key: "offset", Value: int64(-5)},
		{Key: "join", Value: true},
		{Key: "ratio", Value: 2.0},
		{Key: "staleness", Value: 1500 * time.Millisecond},
		{Key: "args", Value: []string{"a", "b c"}},
		{Key: "needs quotes", Value: ""},
	}
	var b bytes.Buffer
	if err := Encode(&b, "written by a test\nsecond line", settings); err != nil {
		t.Fatal(err)
	}
	t.Logf("encoded:\n%s", b.String())
	if !strings.HasPrefix(b.String(), "# written by a test\n# second line\n\ndata-dir = ") {
		t.Errorf("header: %q", b.String())
	}
	var got map[string]any
	if err := toml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"data-dir": "/var/lib/tashkent/certifier", "odd": odd, "id": int64(2), "window-versions": int64(262144),
		"offset": int64(-5), "join": true, "ratio": 2.0, "staleness": "1.5s", "args": []any{"a", "b c"}, "needs quotes": "",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %#v\nwant %#v", got, want)
	}
	if err := Encode(&bytes.Buffer{}, "", []Setting{{Key: "big", Value: uint64(1) << 63}}); err == nil {
		t.Error("Encode took a uint64 above TOML's largest integer")
	}
}

func TestCommentsWrap(t *testing.T) {
	var out bytes.Buffer
	long := strings.Repeat("word ", 40)
	if err := Encode(&out, "", []Setting{{Key: "k", Value: "v", Usage: long}}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if len(line) > commentWidth+2 || !strings.HasPrefix(line, "# ") && line != `k = "v"` {
			t.Errorf("line %q", line)
		}
	}
}
