package wal

// SyncAll makes everything the log holds durable, whatever Options.NoSync
// says. A certifier group member writes its versioned log without fsync,
// because the Raft log is the durable copy of the same versions; before
// the Raft log drops entries behind a snapshot (which holds certification
// keys, not writesets), the member calls SyncAll so that the versions the
// Raft log forgets are on disk here. Without it, a power loss of every
// member would lose acknowledged writesets.
//
// It syncs the segments not synced by an earlier SyncAll (the active one
// and those closed since), then the directory.
func (l *Log) SyncAll() error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	l.stateMu.RLock()
	var paths []string
	for _, s := range l.segments {
		if s.firstVersion >= l.syncedBefore {
			paths = append(paths, s.path)
		}
	}
	activeFirst := uint64(0)
	if n := len(l.segments); n > 0 {
		activeFirst = l.segments[n-1].firstVersion
	}
	l.stateMu.RUnlock()
	for _, path := range paths {
		if err := syncPath(path); err != nil {
			return err
		}
		l.fsyncs.Add(1)
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	l.fsyncs.Add(1)
	l.syncedBefore = activeFirst
	return nil
}
