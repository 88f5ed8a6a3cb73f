package certgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tashkent-db/tashkent/internal/certification"
)

// Snapshots (Tashkent §7.3: "a crashed certifier recovers by state
// transfer"). A snapshot is the member's state at an applied Raft index:
// Raft's metadata (index, term, configuration) plus, in its data, the last
// applied version, the members' addresses and the certification state
// (certification.State.Marshal). It is always of the applied state, never
// of a leader's speculation: a leader with versions certified and not yet
// applied rebuilds the applied state for it (appliedState).
//
// The data:
//
//	format (1 byte) = 3 | applied version | members: count, then (id, len(addr), addr) by id |
//	len(retention), retention | base | epoch | state
//
// where retention is the last log retention decision applied (Core.retention;
// empty: none), base the group's (base.go; 0: not fixed yet) and epoch
// that of the entry at the applied version (0: none). Formats 1 (without
// retention, base and epoch) and 2 (without base and epoch) are still
// read: base 0, and the epoch not known.
const (
	coreSnapshotFormatV1 = 1
	coreSnapshotFormatV2 = 2
	coreSnapshotFormat   = 3
)

func (cfg Config) withSnapshotDefaults() Config {
	if cfg.SnapshotEntries == 0 {
		cfg.SnapshotEntries = DefaultSnapshotEntries
	}
	if cfg.SnapshotBytes == 0 {
		cfg.SnapshotBytes = DefaultSnapshotBytes
	}
	if cfg.CatchUpEntries == 0 {
		cfg.CatchUpEntries = DefaultCatchUpEntries
	}
	return cfg
}

func encodeCoreSnapshot(snap coreSnapshot) []byte {
	b := make([]byte, 0, 48+len(snap.retention)+len(snap.state))
	b = append(b, coreSnapshotFormat)
	b = binary.AppendUvarint(b, snap.version)
	ids := make([]uint64, 0, len(snap.addrs))
	for id := range snap.addrs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
		b = binary.AppendUvarint(b, uint64(len(snap.addrs[id])))
		b = append(b, snap.addrs[id]...)
	}
	b = binary.AppendUvarint(b, uint64(len(snap.retention)))
	b = append(b, snap.retention...)
	b = binary.AppendUvarint(b, snap.base)
	b = binary.AppendUvarint(b, snap.epoch)
	return append(b, snap.state...)
}

var errBadCoreSnapshot = errors.New("certifier group: bad snapshot data")

// coreSnapshot is a snapshot's data, decoded.
type coreSnapshot struct {
	version   uint64
	addrs     map[uint64]string
	retention []byte // nil: none
	// base is the group's (0: not fixed yet), epoch that of the entry at
	// version (0: not known).
	base, epoch uint64
	state       []byte
}

func decodeCoreSnapshot(b []byte) (snap coreSnapshot, err error) {
	if len(b) < 1 || b[0] < coreSnapshotFormatV1 || b[0] > coreSnapshotFormat {
		return coreSnapshot{}, errBadCoreSnapshot
	}
	format := b[0]
	b = b[1:]
	next := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			err = errBadCoreSnapshot
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	snap.version = next()
	count := next()
	snap.addrs = map[uint64]string{}
	for i := uint64(0); i < count && err == nil; i++ {
		id, n := next(), next()
		if n > uint64(len(b)) {
			return coreSnapshot{}, errBadCoreSnapshot
		}
		snap.addrs[id] = string(b[:n])
		b = b[n:]
	}
	if format >= coreSnapshotFormatV2 && err == nil {
		n := next()
		if n > uint64(len(b)) {
			return coreSnapshot{}, errBadCoreSnapshot
		}
		if n > 0 {
			snap.retention = b[:n:n]
		}
		b = b[n:]
	}
	if format >= coreSnapshotFormat && err == nil {
		snap.base = next()
		snap.epoch = next()
	}
	if err != nil {
		return coreSnapshot{}, err
	}
	snap.state = b
	return snap, nil
}

// restoreSnapshot makes the snapshot this member's applied state.
func (c *Core) restoreSnapshot(snap *raftpb.Snapshot) error {
	decoded, err := decodeCoreSnapshot(snap.GetData())
	if err != nil {
		return fmt.Errorf("raft snapshot at index %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	version, addrs := decoded.version, decoded.addrs
	state, err := certification.Unmarshal(c.stateConfig(), decoded.state)
	if err != nil {
		return fmt.Errorf("raft snapshot at index %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	if state.Version() != version {
		return fmt.Errorf("raft snapshot at index %d: state at version %d, snapshot says %d", snap.GetMetadata().GetIndex(), state.Version(), version)
	}
	c.retention = decoded.retention
	c.base, c.appliedEpoch = decoded.base, decoded.epoch
	md := snap.GetMetadata()
	c.state, c.spec, c.batch, c.batchBytes = state, nil, nil, 0
	c.applied, c.appliedTerm, c.appliedVersion = md.GetIndex(), md.GetTerm(), version
	c.snapIndex, c.bytesSinceSnap, c.entriesSinceSnap = md.GetIndex(), 0, 0
	if md.GetConfState() != nil {
		c.confState = md.GetConfState()
	}
	for id, a := range addrs {
		c.addrs[id] = a
	}
	return nil
}

func (c *Core) stateConfig() certification.Config {
	return certification.Config{WindowVersions: c.cfg.WindowVersions, UnsafeSkipConflictCheck: c.cfg.UnsafeSkipConflictCheck}
}

// installSnapshot applies a snapshot the leader sent (Raft handed it over in
// a Ready: this member's log was too far behind the leader's first entry).
func (c *Core) installSnapshot(snap *raftpb.Snapshot, out *Applied) {
	if err := c.mem.ApplySnapshot(snap); err != nil {
		panic(fmt.Sprintf("certgroup: install raft snapshot at index %d: %v", snap.GetMetadata().GetIndex(), err))
	}
	if err := c.restoreSnapshot(snap); err != nil {
		panic(fmt.Sprintf("certgroup: the leader's snapshot does not decode: %v", err))
	}
	out.Installed, out.InstalledEpoch = c.appliedVersion, c.appliedEpoch
	out.MembersChanged = true
	if c.retention != nil {
		out.Retention = c.retention
	}
}

// maybeSnapshot takes a snapshot when one is due and compacts the log in
// memory behind it; the driver does the same on disk (Applied.Compaction).
func (c *Core) maybeSnapshot(out *Applied) {
	if c.applied <= c.snapIndex ||
		c.entriesSinceSnap < c.cfg.SnapshotEntries && c.bytesSinceSnap < c.cfg.SnapshotBytes && !c.snapshotDue {
		return
	}
	c.snapshotDue = false
	state := c.state
	if len(c.spec) > 0 || state.Version() != c.appliedVersion {
		state = c.appliedState()
	}
	data := encodeCoreSnapshot(coreSnapshot{version: c.appliedVersion, addrs: c.addrs, retention: c.retention,
		base: c.base, epoch: c.appliedEpoch, state: state.Marshal()})
	snap, err := c.mem.CreateSnapshot(c.applied, c.confState, data)
	if err != nil {
		panic(fmt.Sprintf("certgroup: snapshot at applied index %d: %v", c.applied, err))
	}
	c.snapIndex, c.bytesSinceSnap, c.entriesSinceSnap = c.applied, 0, 0
	compact := uint64(0)
	if c.applied > c.cfg.CatchUpEntries {
		compact = c.applied - c.cfg.CatchUpEntries
	}
	if first, _ := c.mem.FirstIndex(); compact >= first {
		if err := c.mem.Compact(compact); err != nil {
			panic(fmt.Sprintf("certgroup: compact the raft log to %d: %v", compact, err))
		}
	}
	hs, _, _ := c.mem.InitialState()
	out.Compaction = &Compaction{Snapshot: snap, Index: compact, HardState: hs}
}

// appliedState rebuilds the certification state at the applied index: the
// last snapshot's state plus the committed versions after it, restored as
// read from the log.
func (c *Core) appliedState() *certification.State {
	state := c.newState(0)
	from := uint64(1)
	if c.snapIndex > 0 {
		snap, err := c.mem.Snapshot()
		if err != nil {
			panic(err)
		}
		decoded, err := decodeCoreSnapshot(snap.GetData())
		if err == nil {
			state, err = certification.Unmarshal(c.stateConfig(), decoded.state)
		}
		if err != nil {
			panic(fmt.Sprintf("certgroup: own snapshot at index %d does not decode: %v", c.snapIndex, err))
		}
		from = c.snapIndex + 1
	}
	if first, _ := c.mem.FirstIndex(); from < first {
		from = first
	}
	if c.applied >= from {
		ents, err := c.mem.Entries(from, c.applied+1, ^uint64(0))
		if err != nil {
			panic(fmt.Sprintf("certgroup: read back the raft log: %v", err))
		}
		for _, e := range ents {
			c.restoreInto(state, e)
		}
	}
	if state.Version() != c.appliedVersion {
		panic(fmt.Sprintf("certgroup: rebuilt state at version %d, applied %d", state.Version(), c.appliedVersion))
	}
	return state
}

// restoreInto restores the versions of a committed Raft entry that state
// does not hold yet (a batch or span is skipped whole when it is older,
// without decoding it).
func (c *Core) restoreInto(state *certification.State, e *raftpb.Entry) {
	if _, ok := retentionOf(e.Data); ok || e.GetType() != raftpb.EntryNormal || len(e.Data) == 0 {
		return
	}
	if _, ok, _ := baseOf(e.Data); ok {
		return
	}
	if _, last := versionsOfData(e.Data); last <= state.Version() {
		return
	}
	entries, spanFirst, err := decodeCommitted(e.Data)
	if err != nil {
		panic(fmt.Sprintf("certgroup: committed raft entry %d: %v", e.GetIndex(), err))
	}
	for _, entry := range entries {
		if entry.Version > state.Version() {
			c.restore(state, entry, spanFirst)
		}
	}
}

// SnapshotVersion is the version of the last snapshot this member started
// from or took (0: none), and the epoch of its entry at that version (0:
// not known).
func (c *Core) SnapshotVersion() (version, epoch uint64) {
	if c.snapIndex == 0 {
		return 0, 0
	}
	snap, err := c.mem.Snapshot()
	if err != nil {
		return 0, 0
	}
	decoded, _ := decodeCoreSnapshot(snap.GetData())
	return decoded.version, decoded.epoch
}
