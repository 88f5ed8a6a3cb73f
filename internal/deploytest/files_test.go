package deploytest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/tashkent-db/tashkent/internal/configfile"
)

// The guide's files, and how a host of the test gets its copy. The guide
// writes host 1's config files for 10.0.0.1-3 and system paths; host K of
// the test gets the same file with the per-host keys changed as the guide
// tells (1 becomes K), the guide's network 10.0.0.0/24 replaced by the
// test's, and the system directories by the host's directories.

const (
	// repoRoot is the repository, from this package's directory.
	repoRoot = "../.."
	// guideNet is the network of the guide's examples; guideMonitor is
	// its monitoring host, which the test's own address on the bridge
	// plays.
	guideNet     = "10.0.0."
	guideMonitor = "10.0.0.10"
)

// perHostKeys are the keys of each config file that differ between hosts
// (docs/DEPLOYMENT.md lists them): host K's value is host 1's with the
// host's number 1 replaced by K. Every other key is the same on every host.
var perHostKeys = map[string][]string{
	"agent":     {"name", "replica-index", "metrics", "certifier-tls-cert", "certifier-tls-key"},
	"certifier": {"id", "listen", "metrics-listen", "certifier-tls-cert", "certifier-tls-key"},
}

// hostOneNames are host 1's number in the values of perHostKeys.
var hostOneNames = regexp.MustCompile(`\b10\.0\.0\.1\b|\breplica1\b|\bcertifier-1\b`)

// forHost turns host 1's value of a per-host key into host k's.
func forHost(v any, k int) any {
	switch v := v.(type) {
	case int64:
		if v == 1 {
			return int64(k)
		}
	case string:
		return hostOneNames.ReplaceAllStringFunc(v, func(m string) string {
			return strings.TrimSuffix(m, "1") + fmt.Sprint(k)
		})
	}
	return v
}

// localizer maps the guide's addresses and system paths to a test host's.
type localizer struct {
	prefix string // the test's "10.0.0."
	root   string // the host's directory, standing in for /
	socket string // the host's PostgreSQL socket directory
}

func (l localizer) apply(s string) string {
	s = strings.ReplaceAll(s, guideNet, l.prefix)
	s = strings.ReplaceAll(s, "/var/run/postgresql", l.socket)
	for _, dir := range []string{"/etc/tashkent/", "/var/lib/tashkent/"} {
		s = strings.ReplaceAll(s, dir, filepath.Join(l.root, dir)+"/")
	}
	return s
}

// renderConfig writes host k's copy of deploy/config/<sub>.toml to path.
func renderConfig(sub string, k int, loc localizer, path string) error {
	example := filepath.Join(repoRoot, "deploy", "config", sub+".toml")
	settings, err := configfile.Read(example)
	if err != nil {
		return err
	}
	for _, key := range perHostKeys[sub] {
		i := slices.IndexFunc(settings, func(s configfile.Setting) bool { return s.Key == key })
		if i < 0 {
			return fmt.Errorf("%s has no key %q, which differs per host", example, key)
		}
		if k != 1 && forHost(settings[i].Value, k) == settings[i].Value {
			return fmt.Errorf("%s: %s = %v does not name host 1 (10.0.0.1, replica1, certifier-1 or 1)", example, key, settings[i].Value)
		}
	}
	for i, s := range settings {
		if slices.Contains(perHostKeys[sub], s.Key) {
			s.Value = forHost(s.Value, k)
		}
		if text, ok := s.Value.(string); ok {
			s.Value = loc.apply(text)
		}
		settings[i] = s
	}
	var b bytes.Buffer
	header := fmt.Sprintf("Host %d's copy of deploy/config/%s.toml (docs/DEPLOYMENT.md), for the test's network and directories.", k, sub)
	if err := configfile.Encode(&b, header, settings); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// postgresSettings reads deploy/config/postgresql.conf: the settings the
// guide puts into conf.d, localized. A line is `name = 'value'` or
// `name = value`, with an optional comment.
func postgresSettings(loc localizer) (map[string]string, error) {
	path := filepath.Join(repoRoot, "deploy", "config", "postgresql.conf")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line := regexp.MustCompile(`^([a-z_.]+)\s*=\s*(?:'([^']*)'|([^'\s#]+))\s*(#.*)?$`)
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		m := line.FindStringSubmatch(text)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: not a setting = 'value' line: %s", path, n, text)
		}
		out[m[1]] = loc.apply(m[2] + m[3])
	}
	return out, sc.Err()
}

// localizedFile reads a file of deploy/ with the host's addresses and paths.
func localizedFile(rel string, loc localizer) (string, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", rel))
	if err != nil {
		return "", err
	}
	return loc.apply(string(b)), nil
}

// checkGuideListsPerHostKeys checks that the table of docs/DEPLOYMENT.md
// that follows "<!-- per-host keys -->" names exactly perHostKeys: rows of
// | `FILE.toml` | `key`, `key` | ... |.
func checkGuideListsPerHostKeys() error {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "DEPLOYMENT.md"))
	if err != nil {
		return err
	}
	_, section, ok := strings.Cut(string(b), "<!-- per-host keys -->")
	if !ok {
		return fmt.Errorf("docs/DEPLOYMENT.md has no <!-- per-host keys --> table")
	}
	section, _, _ = strings.Cut(strings.TrimSpace(section), "\n\n")
	quoted := regexp.MustCompile("`([^`]+)`")
	listed := map[string][]string{}
	for _, row := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
		if len(cells) < 2 {
			continue
		}
		file := quoted.FindStringSubmatch(cells[0])
		if file == nil || !strings.HasSuffix(file[1], ".toml") {
			continue // the header and its rule
		}
		sub := strings.TrimSuffix(file[1], ".toml")
		for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
			listed[sub] = append(listed[sub], m[1])
		}
	}
	for sub, keys := range perHostKeys {
		got := slices.Sorted(slices.Values(listed[sub]))
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			return fmt.Errorf("docs/DEPLOYMENT.md's table of per-host keys lists %v for %s.toml; the test changes %v", got, sub, want)
		}
	}
	return nil
}
