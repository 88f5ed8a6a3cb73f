package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRemoveStaleKeepsTheDirectoriesOfRunningProcesses: a build directory
// whose builder is gone is removed, one whose builder runs (this process),
// or whose name carries no PID, is kept.
func TestRemoveStaleKeepsTheDirectoriesOfRunningProcesses(t *testing.T) {
	tmp := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{ // name: kept
		fmt.Sprintf("%s%d-123", dirPrefix, gone.Process.Pid): false,
		fmt.Sprintf("%s%d-456", dirPrefix, os.Getpid()):      true,
		dirPrefix + "789": true,
		"other-" + "1-2":  true,
	}
	for name := range dirs {
		if err := os.MkdirAll(filepath.Join(tmp, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name, "tashkent"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if n := removeStale(tmp); n != 1 {
		t.Errorf("removeStale removed %d directories, want 1", n)
	}
	for name, kept := range dirs {
		_, err := os.Stat(filepath.Join(tmp, name))
		if exists := err == nil; exists != kept {
			t.Errorf("%s: exists=%v, want %v", name, exists, kept)
		}
	}
}
