package certgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tashkent-db/tashkent/internal/wal"
)

// File is one append-only file of a member's Raft log. Write appends; Sync
// makes everything written so far survive a crash. The real one is an
// *os.File; the simulation's loses what was not synced when it crashes.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
}

// The Raft log on disk is a sequence of records:
//
//	length (u32, of kind+payload) | crc32c (u32, of kind+payload) | kind (1 byte) | payload
//
// kindHardState's payload is a raftpb.HardState, kindEntry's a raftpb.Entry.
// An entry at index i replaces the entry at i and every later one (a new
// leader overwrote them). Reading stops at the first record that is torn or
// fails its checksum: a crash can only tear the unsynced tail.
const (
	recordHeaderBytes = 9
	kindHardState     = 1
	kindEntry         = 2
	// recordBytesMax bounds one record: an entry holds one log entry,
	// itself bounded by wal.EntryBytesMax (64 MiB), plus Raft's fields.
	recordBytesMax = 65 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// DiskLog is a member's Raft state on disk (see storage.go for the files):
// the last snapshot, and the log after it as segment files of records.
// Save appends to the active segment; a snapshot starts a new segment and
// drops the oldest ones it covers (Compact). Not safe for concurrent use.
type DiskLog struct {
	dir      Dir
	active   File
	segments []segmentInfo // oldest first; the last one is active
	buf      []byte
	// Syncs and SyncedEntries count fsyncs and the certified log entries
	// they carried (versions: a Raft entry holds a batch of them).
	Syncs, SyncedEntries uint64
	// SyncDelay sleeps this long after every sync: an emulated slow disk
	// (Tashkent §9's 8 ms fsync) for benchmarks; durability stays real.
	SyncDelay time.Duration
}

// Save appends a batch's entries and hard state and, when sync, makes them
// durable with one sync: the group commit of every entry in the batch.
func (d *DiskLog) Save(hs *raftpb.HardState, entries []*raftpb.Entry, sync bool) error {
	d.buf = d.buf[:0]
	var err error
	for _, e := range entries {
		if d.buf, err = appendRecord(d.buf, kindEntry, e); err != nil {
			return err
		}
	}
	if hs != nil {
		if d.buf, err = appendRecord(d.buf, kindHardState, hs); err != nil {
			return err
		}
	}
	if len(d.buf) > 0 {
		if _, err := d.active.Write(d.buf); err != nil {
			return fmt.Errorf("write raft log: %w", err)
		}
	}
	if n := len(entries); n > 0 {
		seg := &d.segments[len(d.segments)-1]
		seg.maxIndex = max(seg.maxIndex, entries[n-1].GetIndex())
	}
	if sync {
		if err := d.active.Sync(); err != nil {
			return fmt.Errorf("sync raft log: %w", err)
		}
		wal.SlowDiskSleep(d.SyncDelay)
		d.Syncs++
		for _, e := range entries {
			d.SyncedEntries += certifiedCount(e)
		}
	}
	return nil
}

func appendRecord(b []byte, kind byte, m proto.Message) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, recordHeaderBytes)...)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b[:start], fmt.Errorf("encode raft record: %w", err)
	}
	body := b[start+8:]
	body[0] = kind
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b, nil
}

// ErrTornTail is reported (wrapped) when a segment ends in a torn or
// corrupt record.
var ErrTornTail = errors.New("raft log has a torn or corrupt tail")

// loadRecords reads one segment's records into p. valid is the length of
// its intact prefix (the caller cuts a last segment there before
// appending), maxIndex the highest entry index in it.
func loadRecords(data []byte, p *Persisted) (valid int, maxIndex uint64, err error) {
	for off := 0; off < len(data); {
		kind, payload, n := nextRecord(data[off:])
		if n == 0 {
			return off, maxIndex, fmt.Errorf("%w at byte %d of %d", ErrTornTail, off, len(data))
		}
		switch kind {
		case kindHardState:
			hs := &raftpb.HardState{}
			if err := proto.Unmarshal(payload, hs); err != nil {
				return off, maxIndex, fmt.Errorf("raft log: hard state at byte %d: %w", off, err)
			}
			p.HardState = hs
		case kindEntry:
			e := &raftpb.Entry{}
			if err := proto.Unmarshal(payload, e); err != nil {
				return off, maxIndex, fmt.Errorf("raft log: entry at byte %d: %w", off, err)
			}
			p.Entries = placeEntry(p.Entries, e)
			maxIndex = max(maxIndex, e.GetIndex())
		default:
			return off, maxIndex, fmt.Errorf("raft log: record of unknown kind %d at byte %d", kind, off)
		}
		off += n
	}
	return len(data), maxIndex, nil
}

// nextRecord returns the record at the start of b and its length, or n = 0
// when it is torn or fails its checksum.
func nextRecord(b []byte) (kind byte, payload []byte, n int) {
	if len(b) < recordHeaderBytes {
		return 0, nil, 0
	}
	size := int(binary.LittleEndian.Uint32(b))
	if size < 1 || size > recordBytesMax || len(b) < 8+size {
		return 0, nil, 0
	}
	body := b[8 : 8+size]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, nil, 0
	}
	return body[0], body[1:], 8 + size
}

// placeEntry puts e at its index, dropping the entries it replaces.
func placeEntry(ents []*raftpb.Entry, e *raftpb.Entry) []*raftpb.Entry {
	if len(ents) == 0 {
		return append(ents, e)
	}
	first := ents[0].GetIndex()
	i := e.GetIndex()
	switch {
	case i < first:
		return []*raftpb.Entry{e}
	case i > first+uint64(len(ents)):
		panic(fmt.Sprintf("certgroup: raft log on disk has a gap before index %d", i))
	default:
		return append(ents[:i-first], e)
	}
}
