package wiretest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

var update = flag.Bool("update", false, "rewrite the expected output in testdata/*.wt from PostgreSQL, and the replica sections that exist from the replica")

// targets are the two servers every script runs against: PostgreSQL 15
// itself, and a replica of a one-replica tashkent cluster
// (internal/clustertest: PostgreSQL with the extension, an in-process
// certifier and agent), to which clients connect directly.
type targets struct {
	direct  string
	replica string
}

func startTargets(t *testing.T) targets {
	t.Helper()
	settings := map[string]string{"max_prepared_transactions": "2"} // script 26
	direct := pgtest.Start(t, pgtest.WithSettings(settings))
	c := clustertest.Start(t, 1, clustertest.Options{Settings: settings})
	return targets{direct: tcpAddr(direct), replica: tcpAddr(c.DBs[0])}
}

func tcpAddr(db *pgserver.Server) string { return fmt.Sprintf("127.0.0.1:%d", db.Port()) }

// TestGolden runs every script against PostgreSQL and against a replica;
// both must give the expected answers, the replica those of its replica
// sections where a script has them. It logs the differences (the scripts'
// "# differs:" lines).
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.wt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	tg := startTargets(t)
	var differences []string
	for _, path := range files {
		if only := os.Getenv("WIRETEST_ONLY"); only != "" && !strings.Contains(path, only) {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".wt")
		t.Run(name, func(t *testing.T) {
			if why := runGolden(t, path, tg); why != "" {
				differences = append(differences, name+": "+why)
			}
		})
	}
	if len(differences) > 0 {
		t.Logf("where a replica answers differently from PostgreSQL:\n%s", strings.Join(differences, "\n"))
	}
}

// runGolden runs one script on both targets and returns why the replica's
// answers differ (its "# differs:" text).
func runGolden(t *testing.T, path string, tg targets) string {
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	script, err := Parse(path, strings.NewReader(string(text)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, err := Run(ctx, tg.direct, script)
	if err != nil {
		t.Fatalf("direct: %v", err)
	}
	onReplica, err := Run(ctx, tg.replica, script)
	if err != nil {
		t.Fatalf("replica: %v", err)
	}
	if *update {
		rewritten := rewrite(string(text), script, direct, onReplica)
		if err := os.WriteFile(path, []byte(rewritten), 0o644); err != nil {
			t.Fatal(err)
		}
		if script, err = Parse(path, strings.NewReader(rewritten)); err != nil {
			t.Fatal(err)
		}
	}
	if diff := compare(script, direct, false); diff != "" {
		t.Errorf("PostgreSQL (run with -update if the script changed): %s", diff)
	}
	if diff := compare(script, onReplica, true); diff != "" {
		t.Errorf("the replica: %s", diff)
	}
	return script.Differs
}

// compare checks every until block's answer against the script's (its
// replica section for a replica's answer, where it has one), and describes
// the first difference ("" when there is none).
func compare(s *Script, results []Result, replica bool) string {
	byStep := map[int]Result{}
	for _, r := range results {
		byStep[r.Step] = r
	}
	for i, step := range s.Steps {
		if step.Until == nil {
			continue
		}
		r, ok := byStep[i]
		if !ok {
			return fmt.Sprintf("%s:%d: not run (an earlier block failed)", s.Name, step.Line)
		}
		if r.Err != nil {
			return fmt.Sprintf("%s:%d: %v\ngot so far:\n%s", s.Name, step.Line, r.Err, strings.Join(r.Got, "\n"))
		}
		want := step.Want
		if replica && step.ReplicaWant != nil {
			want = step.ReplicaWant
		}
		if strings.Join(r.Got, "\n") != strings.Join(want, "\n") {
			return fmt.Sprintf("%s:%d: answered\n%s\nwant\n%s", s.Name, step.Line, strings.Join(r.Got, "\n"), strings.Join(want, "\n"))
		}
	}
	return ""
}

// rewrite replaces the expected output of every until block with direct's
// answer, and its replica section, where it has one, with onReplica's.
func rewrite(text string, s *Script, direct, onReplica []Result) string {
	got := map[int][]string{} // by the block's first line
	for _, r := range direct {
		got[s.Steps[r.Step].Line] = r.Got
	}
	gotReplica := map[int][]string{}
	for _, r := range onReplica {
		gotReplica[s.Steps[r.Step].Line] = r.Got
	}
	lines := strings.Split(text, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out = append(out, line)
		if strings.TrimSpace(line) != "until" {
			continue
		}
		block := i + 1
		i++
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != "" && lines[i] != "----"; i++ {
			out = append(out, lines[i])
		}
		hasReplica := false
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			hasReplica = hasReplica || lines[i] == replicaSection
		}
		out = append(out, "----")
		out = append(out, got[block]...)
		if hasReplica {
			out = append(out, replicaSection)
			out = append(out, gotReplica[block]...)
		}
		if i < len(lines) {
			out = append(out, lines[i])
		}
	}
	return strings.Join(out, "\n")
}
