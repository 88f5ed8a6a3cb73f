// Package testbin builds the tashkent binary once per test process, for
// tests that run it as a real process (crash tests kill it with SIGKILL),
// and collects output that other goroutines or processes write while a
// test reads it (Output: a process's stdout, a server's log).
package testbin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once  sync.Once
	path  string
	built error
)

// Path returns the path of a freshly built tashkent binary.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, err := os.MkdirTemp("", "tashkent-testbin-")
		if err != nil {
			built = err
			return
		}
		path = filepath.Join(dir, "tashkent")
		cmd := exec.Command("go", "build", "-o", path, "github.com/tashkent-db/tashkent/cmd/tashkent")
		cmd.Stderr = os.Stderr
		built = cmd.Run()
	})
	if built != nil {
		t.Fatalf("build the tashkent binary: %v", built)
	}
	return path
}

// Output collects output written while the test reads it: a process's
// (cmd.Stdout or cmd.Stderr, written by os/exec) or a logger's.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String returns what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
