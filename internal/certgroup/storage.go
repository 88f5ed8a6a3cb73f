package certgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A member's Raft directory holds:
//
//	raft.snap                  the last snapshot (snapshotFileName)
//	raft-<seq, 16 hex>.log     segments of the log, in seq order
//	raft.log                   a segment of seq 0 (the layout before snapshots)
//
// Why segments: the log is compacted by dropping whole files, never by
// rewriting one, so every step is crash-safe. A snapshot is written to a
// temporary name, synced, renamed over raft.snap and the directory synced;
// only then a new segment is started (its first record is the hard state,
// so no older segment is needed for it) and the oldest segments whose
// entries the snapshot covers are removed, oldest first, each removal
// synced. A crash anywhere leaves either the old snapshot with every
// segment it needs, or the new one with a superset of the segments it needs.
// Only a prefix of segments is ever removed: a later segment may overwrite
// entries of an earlier one (a new leader truncated them), and keeping every
// segment after the first one kept keeps every such overwrite.
const (
	snapshotFileName  = "raft.snap"
	legacySegmentName = "raft.log"
	snapshotMagic     = "TKRS"
	// snapshotHeaderBytes: magic, crc32c of the payload, payload length.
	snapshotHeaderBytes = 4 + 4 + 8
)

// Dir is the directory under a DiskLog. Every method that changes the
// directory makes the change durable before it returns. The real one is
// OSDir; the simulation has its own.
type Dir interface {
	// List returns the names of the files in the directory.
	List() ([]string, error)
	ReadFile(name string) ([]byte, error)
	// OpenAppend opens name for appending, creating it if missing, after
	// cutting it to size bytes (size < 0: as it is).
	OpenAppend(name string, size int64) (File, error)
	// WriteAtomic replaces name with data: a crash leaves the old content
	// or the new one, whole.
	WriteAtomic(name string, data []byte) error
	Remove(name string) error
}

type segmentInfo struct {
	seq      uint64
	name     string
	maxIndex uint64 // highest entry index written to it (0: none)
}

func segmentName(seq uint64) string {
	if seq == 0 {
		return legacySegmentName
	}
	return fmt.Sprintf("raft-%016x.log", seq)
}

func parseSegmentName(name string) (uint64, bool) {
	if name == legacySegmentName {
		return 0, true
	}
	hex, ok := strings.CutPrefix(name, "raft-")
	if !ok {
		return 0, false
	}
	hex, ok = strings.CutSuffix(hex, ".log")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	return seq, err == nil && seq > 0
}

// OpenDiskLog reads a member's Raft state back from dir (the snapshot, then
// every segment; a torn tail of the last segment, left by a crash during an
// unsynced write, is cut off) and opens it for appending. It returns what
// the snapshot and the log after it hold, and how many bytes of a torn tail
// it dropped.
func OpenDiskLog(dir Dir) (d *DiskLog, p Persisted, tornBytes int, err error) {
	names, err := dir.List()
	if err != nil {
		return nil, p, 0, fmt.Errorf("raft log: list: %w", err)
	}
	if p.Snapshot, err = readSnapshotFile(dir, names); err != nil {
		return nil, p, 0, err
	}
	d = &DiskLog{dir: dir}
	for _, name := range names {
		if seq, ok := parseSegmentName(name); ok {
			d.segments = append(d.segments, segmentInfo{seq: seq, name: name})
		}
	}
	sort.Slice(d.segments, func(i, j int) bool { return d.segments[i].seq < d.segments[j].seq })
	if tornBytes, err = d.loadSegments(&p); err != nil {
		return nil, p, 0, err
	}
	if err := trimToSnapshot(&p); err != nil {
		return nil, p, 0, err
	}
	return d, p, tornBytes, nil
}

// loadSegments reads every segment into p and opens the last one (or a new
// one) for appending.
func (d *DiskLog) loadSegments(p *Persisted) (tornBytes int, err error) {
	size := int64(-1)
	for i := range d.segments {
		seg := &d.segments[i]
		data, err := d.dir.ReadFile(seg.name)
		if err != nil {
			return 0, fmt.Errorf("raft log: read %s: %w", seg.name, err)
		}
		var valid int
		valid, seg.maxIndex, err = loadRecords(data, p)
		last := i == len(d.segments)-1
		if err != nil && (!last || !errors.Is(err, ErrTornTail)) {
			return 0, fmt.Errorf("raft log segment %s: %w", seg.name, err)
		}
		if last {
			tornBytes, size = len(data)-valid, int64(valid)
		}
	}
	if len(d.segments) == 0 {
		d.segments = []segmentInfo{{seq: 1, name: segmentName(1)}}
	}
	d.active, err = d.dir.OpenAppend(d.segments[len(d.segments)-1].name, size)
	if err != nil {
		return 0, fmt.Errorf("raft log: open for appending: %w", err)
	}
	return tornBytes, nil
}

// trimToSnapshot drops the entries the snapshot covers and checks that the
// rest continues it. The hard state's commit index is at least the
// snapshot's (a snapshot is only of committed entries; a crash between a
// received snapshot and the next hard state can leave an older one).
func trimToSnapshot(p *Persisted) error {
	if p.Snapshot == nil {
		return nil
	}
	idx := p.Snapshot.GetMetadata().GetIndex()
	i := 0
	for i < len(p.Entries) && p.Entries[i].GetIndex() <= idx {
		i++
	}
	p.Entries = p.Entries[i:]
	if len(p.Entries) > 0 && p.Entries[0].GetIndex() != idx+1 {
		return fmt.Errorf("raft log: the log starts at index %d but the snapshot ends at %d: entries are missing", p.Entries[0].GetIndex(), idx)
	}
	if p.HardState == nil {
		p.HardState = &raftpb.HardState{Term: p.Snapshot.GetMetadata().Term}
	}
	if p.HardState.GetCommit() < idx {
		p.HardState.Commit = proto.Uint64(idx)
	}
	return nil
}

// SaveSnapshot makes snap the member's snapshot, durably.
func (d *DiskLog) SaveSnapshot(snap *raftpb.Snapshot) error {
	data, err := encodeSnapshotFile(snap)
	if err != nil {
		return err
	}
	if err := d.dir.WriteAtomic(snapshotFileName, data); err != nil {
		return fmt.Errorf("write raft snapshot: %w", err)
	}
	return nil
}

// Compact starts a new segment holding hs and removes the oldest segments
// whose entries are all at or below index (which a durable snapshot must
// cover).
func (d *DiskLog) Compact(index uint64, hs *raftpb.HardState) error {
	if err := d.roll(hs); err != nil {
		return err
	}
	for len(d.segments) > 1 && d.segments[0].maxIndex <= index {
		if err := d.dir.Remove(d.segments[0].name); err != nil {
			return fmt.Errorf("remove compacted raft log segment: %w", err)
		}
		d.segments = d.segments[1:]
	}
	return nil
}

// InstallSnapshot makes a snapshot received from the leader the member's
// and drops the whole log before it: Raft discarded it. hs is the batch's
// hard state; the new segment starts with it committing no further than
// the snapshot, since the batch's entries are not written yet (Save writes
// them, then hs itself): a crash in between must not leave a commit index
// beyond the log, which Raft refuses at every start.
func (d *DiskLog) InstallSnapshot(snap *raftpb.Snapshot, hs *raftpb.HardState) error {
	if err := d.SaveSnapshot(snap); err != nil {
		return err
	}
	idx := snap.GetMetadata().GetIndex()
	if hs != nil && hs.GetCommit() > idx {
		hs = proto.Clone(hs).(*raftpb.HardState)
		hs.Commit = proto.Uint64(idx)
	}
	return d.Compact(^uint64(0), hs)
}

// roll syncs and closes the active segment and starts the next one with hs
// as its first record.
func (d *DiskLog) roll(hs *raftpb.HardState) error {
	if err := d.active.Sync(); err != nil {
		return fmt.Errorf("sync raft log: %w", err)
	}
	if err := d.active.Close(); err != nil {
		return fmt.Errorf("close raft log segment: %w", err)
	}
	next := segmentInfo{seq: d.segments[len(d.segments)-1].seq + 1}
	next.name = segmentName(next.seq)
	f, err := d.dir.OpenAppend(next.name, 0)
	if err != nil {
		return fmt.Errorf("start raft log segment: %w", err)
	}
	d.active = f
	d.segments = append(d.segments, next)
	if hs == nil {
		hs = &raftpb.HardState{}
	}
	return d.Save(hs, nil, true)
}

// Segments is the number of segment files (for status and tests).
func (d *DiskLog) Segments() int { return len(d.segments) }

// Close closes the active segment.
func (d *DiskLog) Close() error { return d.active.Close() }

func encodeSnapshotFile(snap *raftpb.Snapshot) ([]byte, error) {
	payload, err := proto.Marshal(snap)
	if err != nil {
		return nil, fmt.Errorf("encode raft snapshot: %w", err)
	}
	b := make([]byte, snapshotHeaderBytes, snapshotHeaderBytes+len(payload))
	copy(b, snapshotMagic)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint64(b[8:], uint64(len(payload)))
	return append(b, payload...), nil
}

func readSnapshotFile(dir Dir, names []string) (*raftpb.Snapshot, error) {
	found := false
	for _, n := range names {
		found = found || n == snapshotFileName
	}
	if !found {
		return nil, nil
	}
	b, err := dir.ReadFile(snapshotFileName)
	if err != nil {
		return nil, fmt.Errorf("read raft snapshot: %w", err)
	}
	// The file is replaced atomically: a damaged one is corruption, not a
	// torn write, and the member must not start from it.
	if len(b) < snapshotHeaderBytes || string(b[:4]) != snapshotMagic ||
		binary.LittleEndian.Uint64(b[8:]) != uint64(len(b)-snapshotHeaderBytes) ||
		crc32.Checksum(b[snapshotHeaderBytes:], castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, fmt.Errorf("raft snapshot %s is damaged (%d bytes): restore the member's directory, or wipe it and re-add the member", snapshotFileName, len(b))
	}
	snap := &raftpb.Snapshot{}
	if err := proto.Unmarshal(b[snapshotHeaderBytes:], snap); err != nil {
		return nil, fmt.Errorf("raft snapshot: %w", err)
	}
	return snap, nil
}

// OSDir is a Dir on the file system. NoSync skips every fsync (benchmarks
// only: it voids durability).
type OSDir struct {
	Path   string
	NoSync bool
}

// List implements Dir.
func (o OSDir) List() ([]string, error) {
	ents, err := os.ReadDir(o.Path)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// ReadFile implements Dir.
func (o OSDir) ReadFile(name string) ([]byte, error) { return os.ReadFile(filepath.Join(o.Path, name)) }

// OpenAppend implements Dir.
func (o OSDir) OpenAppend(name string, size int64) (File, error) {
	path := filepath.Join(o.Path, name)
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, err
		}
	}
	if _, err := f.Seek(0, 2); err != nil {
		f.Close()
		return nil, err
	}
	if os.IsNotExist(statErr) {
		if err := o.syncDir(); err != nil {
			f.Close()
			return nil, err
		}
	}
	return syncFile{f, o.NoSync}, nil
}

// WriteAtomic implements Dir: temporary file, fsync, rename, directory fsync.
func (o OSDir) WriteAtomic(name string, data []byte) error {
	tmp := filepath.Join(o.Path, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := (syncFile{f, o.NoSync}).Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(o.Path, name)); err != nil {
		return err
	}
	return o.syncDir()
}

// Remove implements Dir.
func (o OSDir) Remove(name string) error {
	if err := os.Remove(filepath.Join(o.Path, name)); err != nil {
		return err
	}
	return o.syncDir()
}

func (o OSDir) syncDir() error {
	if o.NoSync {
		return nil
	}
	d, err := os.Open(o.Path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type syncFile struct {
	*os.File
	noSync bool
}

func (f syncFile) Sync() error {
	if f.noSync {
		return nil
	}
	return f.File.Sync()
}
