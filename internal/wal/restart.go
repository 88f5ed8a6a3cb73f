package wal

import (
	"fmt"
	"os"
)

// RestartAfter empties the log and makes it continue after version: the
// next Append must start at version+1, and readers asking for anything at or
// below version get ErrCompacted once entries after it are stored (or
// nothing while none is). It is for a member of a certifier group that
// installed a snapshot of version (internal/certgroup): the versions before
// it never reach this member, and its log must start at the snapshot.
//
// The change is durable (segments removed, directory synced), but the
// version is not: reopened before the next Append, the log is empty and
// starts at version 1, and the caller restarts it again.
func (l *Log) RestartAfter(version uint64) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if l.active != nil {
		l.setZeroed(nil, 0, 0)
		if err := l.active.Close(); err != nil {
			return fmt.Errorf("wal: close active segment: %w", err)
		}
		l.active = nil
	}
	l.stateMu.Lock()
	old := l.segments
	l.segments, l.sizeBytes, l.restartedAfter = nil, 0, version
	l.stateMu.Unlock()
	for _, s := range old {
		if err := os.Remove(s.path); err != nil && !os.IsNotExist(err) {
			l.failed = fmt.Errorf("wal: log unusable after a failed restart: %w", err)
			return l.failed
		}
	}
	return l.syncLogDir()
}

// StartsAfter is the version before the first one this log can deliver:
// FirstVersion()-1, or the version given to RestartAfter while the log is
// still empty.
func (l *Log) StartsAfter() uint64 {
	l.stateMu.RLock()
	defer l.stateMu.RUnlock()
	if len(l.segments) == 0 {
		return l.restartedAfter
	}
	return l.segments[0].firstVersion - 1
}
