package wiretest

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/proxy"
)

var update = flag.Bool("update", false, "rewrite the expected output in testdata/*.wt from PostgreSQL (never from the proxy)")

// targets are the two servers every script runs against: PostgreSQL 15
// itself, and a proxy of a one-replica cluster (real PostgreSQL, in-process
// certifier and proxy, as internal/proxy's cluster_test.go starts them).
type targets struct {
	direct  string
	proxy   string
	replica *pgserver.Server
}

func startTargets(t *testing.T) targets {
	t.Helper()
	direct := pgtest.Start(t)
	replica := pgtest.Start(t, pgtest.SynchronousCommitOff())
	cert, err := certifier.Listen(certifier.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cert.Close() })
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("WIRETEST_LOG") != "" { // the proxy's log on stderr, for debugging a script
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := proxy.New(proxy.Config{
		Name: "wiretest", Listen: "127.0.0.1:0", BackendAddr: tcpAddr(replica),
		Certifier: cert.Addr().String(), Logger: logger,
		AllowPasswordlessLogins: true, // pgtest's PostgreSQL trusts local connections
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, "") }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the proxy did not stop")
		}
	})
	select {
	case <-p.Ready():
	case err := <-done:
		done <- err // for the cleanup above
		t.Fatalf("the proxy did not start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the proxy did not start in 60s")
	}
	return targets{direct: tcpAddr(direct), proxy: p.Addr().String(), replica: replica}
}

func tcpAddr(db *pgserver.Server) string { return fmt.Sprintf("127.0.0.1:%d", db.Port()) }

// TestGolden runs every script directly and through the proxy; both must
// give the expected answers.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.wt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	tg := startTargets(t)
	for _, path := range files {
		if only := os.Getenv("WIRETEST_ONLY"); only != "" && !strings.Contains(path, only) {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".wt")
		t.Run(name, func(t *testing.T) { runGolden(t, path, tg) })
	}
}

func runGolden(t *testing.T, path string, tg targets) {
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
	if *update {
		if err := os.WriteFile(path, []byte(rewrite(string(text), script, direct)), 0o644); err != nil {
			t.Fatal(err)
		}
		if script, err = Parse(path, strings.NewReader(rewrite(string(text), script, direct))); err != nil {
			t.Fatal(err)
		}
	}
	if diff := compare(script, direct); diff != "" {
		t.Errorf("PostgreSQL (run with -update if the script changed): %s", diff)
	}
	proxied, err := Run(ctx, tg.proxy, script)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	diff := compare(script, proxied)
	switch {
	case script.KnownProxyBug != "" && diff == "":
		t.Errorf("%s passes through the proxy now: remove its known-proxy-bug line (%s)", path, script.KnownProxyBug)
	case script.KnownProxyBug != "":
		t.Logf("KNOWN PROXY BUG (%s), as expected: %s", script.KnownProxyBug, diff)
		unstick(t, tg.replica)
	case diff != "":
		t.Errorf("the proxy: %s", diff)
	}
}

// unstick ends the replica's backends of the scripts' connections: after a
// known proxy bug, a proxy session may wait for its backend forever (the
// proxy would not stop).
func unstick(t *testing.T, replica *pgserver.Server) {
	conn := pgtest.Connect(t, replica, "postgres")
	if _, err := conn.Exec(context.Background(),
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", ApplicationName); err != nil {
		t.Errorf("ending the stuck backends: %v", err)
	}
}

// compare checks every until block's answer against the script's, and
// describes the first difference ("" when there is none).
func compare(s *Script, results []Result) string {
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
		if strings.Join(r.Got, "\n") != strings.Join(step.Want, "\n") {
			return fmt.Sprintf("%s:%d: answered\n%s\nwant\n%s", s.Name, step.Line, strings.Join(r.Got, "\n"), strings.Join(step.Want, "\n"))
		}
	}
	return ""
}

// rewrite replaces the expected output of every until block with results.
func rewrite(text string, s *Script, results []Result) string {
	got := map[int][]string{} // by the block's first line
	for _, r := range results {
		got[s.Steps[r.Step].Line] = r.Got
	}
	lines := strings.Split(text, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out = append(out, line)
		if strings.TrimSpace(line) != "until" {
			continue
		}
		want := got[i+1]
		i++
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != "" && lines[i] != "----"; i++ {
			out = append(out, lines[i])
		}
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
		}
		out = append(out, "----")
		out = append(out, want...)
		if i < len(lines) {
			out = append(out, lines[i])
		}
	}
	return strings.Join(out, "\n")
}
