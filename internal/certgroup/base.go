package certgroup

import "time"

// The group's base and its epochs.
//
// Every log entry carries the epoch that certified it (LogEntry.epoch),
// and admission tells histories apart by (version, epoch) pairs. A Raft
// term alone does not name a leader across groups: a group re-created
// from empty directories counts its terms from 1 again, and would reuse
// the old group's pairs at the same versions. So a group fixes a base
// once, and a leader's epoch is base + term.
//
// The base is a clock value in microseconds, as a single certifier's
// generation is: the first leader that finds none applied (its barrier
// applied, so its whole log before it is) proposes its clock's now in an
// entry of its own (entry.go, kindBase), and certifies only once one is
// applied; every member applies the first base entry in log order and
// ignores later ones (two leaders may each have proposed one). Snapshots
// carry it. A group re-created later reads a later clock; its terms grow
// far slower than a microsecond clock (a term lasts at least an election
// timeout), so its epochs differ from (and, with a sane clock, are above)
// every epoch of the group before, and are comparable with a single
// certifier's generations.
//
// A log written before the base existed holds epochs equal to terms
// (base 0). Its first leader after the upgrade proposes a base like any
// other, and epochs go on from base + term, above every term: epochs
// never decrease along the log, and no entry is certified before the
// base is known.

// epoch is the epoch of the entries this leader certifies.
func (c *Core) epoch() uint64 { return c.base + c.leaderTerm }

// proposeBase proposes the group's base, once per term, when this member
// leads, has applied its whole log and found none. A proposal Raft
// refuses is tried again at the next Ready.
func (c *Core) proposeBase() {
	if c.base != 0 || c.leaderTerm == 0 || c.appliedTerm != c.leaderTerm || c.baseProposed == c.leaderTerm {
		return
	}
	now := time.Now
	if c.cfg.Now != nil {
		now = c.cfg.Now
	}
	if err := c.rn.Propose(encodeBase(uint64(max(now().UnixMicro(), 1)))); err != nil {
		return
	}
	c.baseProposed = c.leaderTerm
}

// applyBase applies the base of a committed base entry: the first one
// fixes the base.
func (c *Core) applyBase(base uint64) {
	if c.base == 0 {
		c.base = base
	}
}

// Base is the group's base (0: not fixed yet).
func (c *Core) Base() uint64 { return c.base }
