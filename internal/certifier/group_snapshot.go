package certifier

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The versioned log of a group member, around snapshots.
//
// A member normally applies every committed version to its versioned log
// (internal/wal), which serves Fetch and delivery. A member that installed
// a snapshot (it was too far behind the leader's first Raft entry, or it is
// new) never sees the versions the snapshot covers: its versioned log
// restarts after the snapshot's version (wal.RestartAfter), and a Fetch
// below it is refused with FailedPrecondition, which certclient answers by
// asking another member. The same happens after a restart when the
// versioned log, written without fsync in a group (the Raft log is the
// durable one), lost a tail that the Raft log no longer holds.
//
// Log retention removes old segments of the versioned log on every member
// alike (group_retention.go).

// restored is Callbacks.Restored: this member's state starts at a
// snapshot of version, whose entry is of epoch (in commit order with what
// the writer has).
func (g *groupMember) restored(version, epoch uint64) {
	g.writer.submit(func() bool { g.restartAt(version, epoch); return g.s.Err() == nil }, true)
}

func (g *groupMember) restartAt(version, epoch uint64) {
	s := g.s
	if s.log.LastVersion() >= version {
		return // the versioned log already holds everything up to it
	}
	if err := s.restartLogAfter(version, epoch); err != nil {
		s.fail(fmt.Errorf("restart the versioned log after snapshot version %d: %w", version, err))
		return
	}
	s.mu.Lock()
	s.recent = newRecentEntries(s.cfg.RecentEntriesMax)
	g.early.ringCommitted = version
	s.mu.Unlock()
	s.durable.advance(version)
	g.discardCoveredStages(version)
	s.cfg.Logger.Info("certifier group: this member starts at a snapshot; its versioned log restarts after it, and Fetch below it goes to other members",
		"member", g.node.ID(), "snapshot_version", version)
}

// discardCoveredStages removes the stages of the spans committed at or
// below the snapshot version: the versioned log restarts after them, so
// this member never writes them.
func (g *groupMember) discardCoveredStages(version uint64) {
	for _, txn := range g.s.staging.unclaimed() {
		if _, last, ok := g.node.CommittedSpan(txn); ok && last <= version {
			g.s.staging.discardCopy(txn)
		}
	}
}

// checkFetch refuses a Fetch that starts below what this member holds,
// naming the way out.
func (g *groupMember) checkFetch(after uint64) error {
	if base := g.s.log.StartsAfter(); after < base {
		return status.Errorf(codes.FailedPrecondition,
			"versions up to %d are compacted on this member (certifier member %d caught up by snapshot or applied retention); fetch from another member",
			base, g.node.ID())
	}
	return nil
}
