//go:build !linux

package wal

import (
	"os"
	"time"
)

// fdatasync falls back to fsync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }

// SlowDiskSleep sleeps d: an emulated slow fsync (see the Linux version).
func SlowDiskSleep(d time.Duration) { time.Sleep(d) }
