package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// runTashkent runs the binary and returns its stdout, stderr and error.
func runTashkent(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrintConfig: the effective configuration of `tashkent agent` is the
// defaults, the file over them and the command line over the file, global
// flags included, and it reads back as a config file to the same result.
func TestPrintConfig(t *testing.T) {
	bin := testbin.Path(t)
	file := writeFile(t, "agent.toml", `name = "from-file"
staleness = "250ms"
replica-index = 2
log-format = "json"
`)
	out, stderr, err := runTashkent(t, bin, "agent", "--config", file, "--name", "from-flag", "--print-config")
	if err != nil {
		t.Fatalf("agent --print-config: %v\n%s", err, stderr)
	}
	t.Logf("printed:\n%s", out)
	for _, want := range []string{
		"# tashkent agent: the effective configuration, from the defaults,", // then the file, wrapped
		"\nname = \"from-flag\"\n",                         // the command line over the file
		"\nstaleness = \"250ms\"\n",                        // the file over the default
		"\nreplica-index = 2\n",                            // the file
		"\nlog-format = \"json\"\n",                        // a global flag, from the file
		"\ndatabase = \"postgres\"\n",                      // defaults
		"\nflow-control-limit = 1024\n",                    //
		"\nblocker-grace = \"1s\"\n",                       //
		"\ntrust-ddl-roles = false\n",                      //
		"\nlog-level = \"info\"\n",                         //
		"\nmax-procs = 0\n",                                //
		"\n# this replica's name, unique in the cluster\n", // the flag's usage
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q", want)
		}
	}
	for _, absent := range []string{"\nconfig =", "print-config =", "help =", "cpu-profile ="} {
		if strings.Contains(out, absent) {
			t.Errorf("--print-config prints %q", absent)
		}
	}
	again, stderr, err := runTashkent(t, bin, "agent", "--config", writeFile(t, "printed.toml", out), "--print-config")
	if err != nil {
		t.Fatalf("the printed config does not read back: %v\n%s", err, stderr)
	}
	if body(again) != body(out) {
		t.Errorf("read back, it prints\n%s\nnot\n%s", again, out)
	}
}

// body is a printed config without its first comment (which names the file).
func body(printed string) string {
	_, rest, _ := strings.Cut(printed, "\n\n")
	return rest
}

// TestCertifierPrintConfigDefaults: every certifier flag that is not
// hidden is a key, with its default.
func TestCertifierPrintConfigDefaults(t *testing.T) {
	bin := testbin.Path(t)
	out, stderr, err := runTashkent(t, bin, "certifier", "--print-config")
	if err != nil {
		t.Fatalf("certifier --print-config: %v\n%s", err, stderr)
	}
	for _, want := range []string{
		"\ndata-dir = \"\"\n", "\nlisten = \"127.0.0.1:7400\"\n", "\nmetrics-listen = \"127.0.0.1:7401\"\n",
		"\nid = 0\n", "\npeers = \"\"\n", "\njoin = false\n", "\nsegment-mib = 64\n", "\nwindow-versions = 262144\n",
		"\nsnapshot-entries = 100000\n", "\nlog-retention-versions = 0\n", "\nlog-retention-bytes = 4294967296\n",
		"\nlog-retention-replica-timeout = \"24h0m0s\"\n", "\ncertifier-tls-ca = \"\"\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("certifier --print-config lacks %q", want)
		}
	}
	if strings.Contains(out, "unsafe-fault") {
		t.Error("certifier --print-config prints a hidden fault point that is not set")
	}
}

// TestUnknownKeyIsAnErrorWithItsLine: a process refuses to start from a
// file with an unknown key, and says which key on which line.
func TestUnknownKeyIsAnErrorWithItsLine(t *testing.T) {
	bin := testbin.Path(t)
	file := writeFile(t, "certifier.toml", "data-dir = \"/nonexistent\"\n\nsegment-mb = 64\nlisten = 7400\n")
	_, stderr, err := runTashkent(t, bin, "certifier", "--config", file)
	if err == nil {
		t.Fatal("the certifier started from a file with an unknown key")
	}
	for _, want := range []string{
		file + `:3: unknown key "segment-mb"`,
		file + `:4: key "listen" takes a string, in quotes, not the integer 7400`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat("/nonexistent"); err == nil {
		t.Error("the certifier created its data directory despite the error")
	}
}

// TestCertifierRunsFromConfigFile starts a real certifier from a file that
// sets its address and a global flag, and checks that it serves there and
// logs as the file says.
func TestCertifierRunsFromConfigFile(t *testing.T) {
	bin := testbin.Path(t)
	port, err := netutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	file := writeFile(t, "certifier.toml", fmt.Sprintf(`data-dir = %q
listen = %q
metrics-listen = ""
log-format = "json"
`, t.TempDir(), addr))
	_, stderr := startCertifier(t, bin, nil, addr, "--config", file)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), `"msg":"certifier ready"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no JSON log line \"certifier ready\" (log-format = \"json\" in the file):\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
