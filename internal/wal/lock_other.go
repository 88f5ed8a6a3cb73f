//go:build !unix

package wal

import (
	"fmt"
	"os"
	"path/filepath"
)

const lockFileName = "LOCK"

// lockDir only creates the lock file: advisory locking is implemented for unix only.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wal: open lock file: %w", err)
	}
	return f, nil
}
