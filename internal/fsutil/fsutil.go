// Package fsutil makes file-system changes durable: the few lines every
// package that writes state to disk needs, written once.
package fsutil

import (
	"os"
	"path/filepath"
)

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

// WriteFileAtomically replaces dir/name with b: a crash leaves the old
// content or the new one, and with sync the new one once it returns.
func WriteFileAtomically(dir, name string, b []byte, sync bool) error {
	path := filepath.Join(dir, name)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil && sync {
		err = SyncDir(dir)
	}
	return err
}
