package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestPeerDelayNeedsAGroup: a single certifier has no peers to delay, so
// it refuses --unsafe-fault-peer-delay before it opens anything.
func TestPeerDelayNeedsAGroup(t *testing.T) {
	bin := testbin.Path(t)
	dir := filepath.Join(t.TempDir(), "cert")
	_, stderr, err := runTashkent(t, bin, "certifier", "--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--unsafe-fault-peer-delay", "1ms")
	if err == nil {
		t.Fatal("a single certifier started with --unsafe-fault-peer-delay")
	}
	if want := "--unsafe-fault-peer-delay delays the Raft messages between certifier group members: it needs --id and --peers"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the certifier created its data directory despite the error")
	}
}
