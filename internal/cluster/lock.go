package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile carries an advisory lock that serializes the commands that
// change one cluster directory (`up`, `down`, `replica add/remove/rebuild`,
// the supervisor's rebuilds). The kernel releases it when the process dies.
const lockFile = "cluster.lock"

// lockDir takes the cluster directory's lock, failing at once when another
// command holds it.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another tashkent command (up, down, replica add/remove/rebuild, or the supervisor rebuilding a replica) "+
				"is working on %s; `tashkent status --data-dir %s` shows a transfer in progress", dir, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
