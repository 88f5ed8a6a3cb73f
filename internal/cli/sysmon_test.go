package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/netutil"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

func TestWithSysmonSetting(t *testing.T) {
	for _, c := range []struct {
		in, want string
		add      bool
	}{
		{"", sysmonSetting, true},
		{"gctrace=1", "gctrace=1," + sysmonSetting, true},
		{"schedtrace=0", "schedtrace=0", false},
		{"gctrace=1, schedtrace=1000", "gctrace=1, schedtrace=1000", false},
		{"myschedtrace=1", "myschedtrace=1," + sysmonSetting, true},
	} {
		got, add := withSysmonSetting(c.in)
		if got != c.want || add != c.add {
			t.Errorf("withSysmonSetting(%q) = %q, %v; want %q, %v", c.in, got, add, c.want, c.add)
		}
	}
}

// TestServerCommandsRunWithSysmonPolling starts a real certifier process
// and reads the environment its PID runs with: the process executed itself
// again with the setting, under the same PID, and left an explicit
// schedtrace alone.
func TestServerCommandsRunWithSysmonPolling(t *testing.T) {
	bin := testbin.Path(t)
	for _, c := range []struct{ godebug, want string }{
		{"", "GODEBUG=" + sysmonSetting},
		{"gctrace=0", "GODEBUG=gctrace=0," + sysmonSetting},
		{"schedtrace=0", "GODEBUG=schedtrace=0"},
	} {
		t.Run(fmt.Sprintf("GODEBUG=%q", c.godebug), func(t *testing.T) {
			env := withoutVariable(os.Environ(), "GODEBUG")
			if c.godebug != "" {
				env = append(env, "GODEBUG="+c.godebug)
			}
			pid := startCertifierProcess(t, bin, env)
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				t.Fatal(err)
			}
			var godebug []string
			for _, kv := range strings.Split(string(raw), "\x00") {
				if strings.HasPrefix(kv, "GODEBUG=") {
					godebug = append(godebug, kv)
				}
			}
			if len(godebug) != 1 || godebug[0] != c.want {
				t.Errorf("process %d runs with %q, want [%q]", pid, godebug, c.want)
			}
		})
	}
}

// startCertifierProcess starts `tashkent certifier` with env, waits until it
// is ready, and returns its PID; the test's cleanup kills it by that PID.
func startCertifierProcess(t *testing.T, bin string, env []string) int {
	t.Helper()
	port, err := netutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "certifier", "--data-dir", t.TempDir(), "--listen", addr, "--metrics-listen", "")
	cmd.Env = env
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if err := netutil.WaitListening(addr, 30*time.Second); err != nil {
		t.Fatalf("certifier did not start: %v\n%s", err, stderr.String())
	}
	return cmd.Process.Pid
}

// syncBuffer is a process's stderr, written by os/exec while the test may
// read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
