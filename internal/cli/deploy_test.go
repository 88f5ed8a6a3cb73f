package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// deployDir holds the systemd units and the example config files that
// docs/OPERATIONS.md installs.
const deployDir = "../../deploy"

// installedBinary is where the units expect tashkent (deploy/systemd/README.md).
const installedBinary = "/usr/local/bin/tashkent"

// exposureMax bounds `systemd-analyze security`'s overall exposure of each
// unit, in its tenths (15 is the 1.5 it prints): the units keep their
// hardening.
const exposureMax = "20"

// execStart is a unit's command line: tashkent, its subcommand and the
// config file in /etc/tashkent named after the subcommand.
var execStart = regexp.MustCompile(`(?m)^ExecStart=` + regexp.QuoteMeta(installedBinary) + ` (agent|certifier) --config /etc/tashkent/(agent|certifier)\.toml$`)

// TestSystemdUnitsVerify runs `systemd-analyze verify` and `systemd-analyze
// security --offline` on every unit in deploy/systemd, and checks that the
// example config file each unit reads is accepted by its command.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed: it comes with Debian's systemd package (apt-get install systemd; .ci/run installs it): %v", err)
	}
	bin := testbin.Path(t)
	units, err := filepath.Glob(filepath.Join(deployDir, "systemd", "*.service"))
	if err != nil || len(units) < 2 {
		t.Fatalf("units in %s/systemd: %v %v", deployDir, units, err)
	}
	copies := t.TempDir()
	var unitCopies []string
	for _, unit := range units {
		text, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		m := execStart.FindSubmatch(text)
		if m == nil || string(m[1]) != string(m[2]) {
			t.Errorf("%s: no line ExecStart=%s <command> --config /etc/tashkent/<command>.toml", unit, installedBinary)
			continue
		}
		checkExampleConfig(t, bin, string(m[1]))
		// verify requires ExecStart's program to exist and be executable
		// (else "Command ... is not executable", exit status 1). The unit
		// names where an installation puts tashkent, which a test machine
		// does not have: the copy names the binary this test built.
		copied := filepath.Join(copies, filepath.Base(unit))
		fixed := strings.Replace(string(text), "ExecStart="+installedBinary+" ", "ExecStart="+bin+" ", 1)
		if err := os.WriteFile(copied, []byte(fixed), 0o644); err != nil {
			t.Fatal(err)
		}
		unitCopies = append(unitCopies, copied)
	}
	// verify exits 0 on warnings such as an unknown key or a bad value,
	// which it prints prefixed with the unit's path or name: any line that
	// names one of ours fails the test. Lines about other units of this
	// machine, which verify loads as dependencies, do not.
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, unitCopies...)...).CombinedOutput()
	t.Logf("systemd-analyze verify:\n%s", out)
	if err != nil {
		t.Errorf("systemd-analyze verify: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, unit := range units {
			if strings.Contains(line, filepath.Base(unit)) {
				t.Errorf("systemd-analyze verify: %s", line)
			}
		}
	}
	for _, unit := range unitCopies {
		out, err := exec.Command(analyze, "security", "--offline=true", "--threshold="+exposureMax, unit).CombinedOutput()
		summary := regexp.MustCompile(`Overall exposure level for .*`).Find(out)
		t.Logf("%s", summary)
		if err != nil || summary == nil {
			t.Errorf("systemd-analyze security --threshold=%s %s: %v\n%s", exposureMax, filepath.Base(unit), err, out)
		}
	}
}

// checkExampleConfig checks that `tashkent <sub>` accepts the example
// deploy/config/<sub>.toml.
func checkExampleConfig(t *testing.T, bin, sub string) {
	t.Helper()
	file := filepath.Join(deployDir, "config", sub+".toml")
	out, err := exec.Command(bin, sub, "--config", file, "--print-config").CombinedOutput()
	if err != nil {
		t.Errorf("tashkent %s --config %s: %v\n%s", sub, file, err, out)
	}
}
