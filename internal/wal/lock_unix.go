//go:build unix

package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFileName is the file that carries the directory's advisory lock.
const lockFileName = "LOCK"

// lockDir takes an exclusive flock on dir/LOCK so that two certifiers (or two Logs in one process)
// never append to the same log. Closing the returned file releases the lock, also when the process dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wal: open lock file: %w", err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return f, nil
	}
	f.Close()
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	return nil, fmt.Errorf("wal: lock %s: %w", dir, err)
}
