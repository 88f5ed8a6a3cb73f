// Package testbin builds the tashkent binary once per test process, for
// tests that run it as a real process (crash tests kill it with SIGKILL),
// and collects output that other goroutines or processes write while a
// test reads it (Output: a process's stdout, a server's log).
//
// The binary (45 MB) goes into a temporary directory named after the
// building process's PID. Main removes it when the package's tests end; a
// test process that was killed never gets there, so the next Path removes
// the directories of processes that are gone.
package testbin

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tashkent-db/tashkent/internal/process"
)

// dirPrefix starts the name of every build directory; the builder's PID
// and a random suffix follow.
const dirPrefix = "tashkent-testbin-"

var (
	once    sync.Once
	dir     string
	path    string
	built   error
	mainRan bool
)

// Main runs a package's tests and removes the binary they built. Every
// package whose tests call Path runs it from TestMain.
func Main(m *testing.M) {
	mainRan = true
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// Path returns the path of a freshly built tashkent binary.
func Path(t testing.TB) string {
	t.Helper()
	if !mainRan {
		t.Fatal("testbin: the package's TestMain must call testbin.Main, which removes the binary afterwards")
	}
	once.Do(func() {
		removeStale(os.TempDir())
		dir, built = os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
		if built != nil {
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

// removeStale removes the build directories in tmp whose builder is no
// longer running, and returns how many it removed.
func removeStale(tmp string) int {
	matches, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
	removed := 0
	for _, m := range matches {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(m), dirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || process.Alive(pid) {
			continue
		}
		if os.RemoveAll(m) == nil {
			removed++
		}
	}
	return removed
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
