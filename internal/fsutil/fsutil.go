// Package fsutil makes file-system changes durable: the few lines every
// package that writes state to disk needs, written once.
package fsutil

import "os"

// SyncDir makes the entries of a directory (files created, renamed or
// removed in it) durable: a rename is only crash-safe once its directory
// is fsynced.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
