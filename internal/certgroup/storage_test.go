package certgroup_test

import (
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tashkent-db/tashkent/internal/certgroup"
)

func entries(from, to, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(term), Data: []byte{byte(i)}})
	}
	return out
}

func hardState(term, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(1), Commit: proto.Uint64(commit)}
}

func snapshotAt(index, term uint64) *raftpb.Snapshot {
	return &raftpb.Snapshot{Data: []byte("state"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(index), Term: proto.Uint64(term), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
}

func mustOpen(t *testing.T, dir certgroup.Dir) (*certgroup.DiskLog, certgroup.Persisted) {
	t.Helper()
	d, p, _, err := certgroup.OpenDiskLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d, p
}

// TestDiskLogCompactionKeepsWhatTheSnapshotDoesNotCover: entries in three
// segments, a snapshot at 25 and compaction to 20 drop only whole segments
// below 20; reopened, the log is the snapshot plus 26..30 with the latest
// hard state, and a later overwrite (a new leader) survives compaction.
func TestDiskLogCompactionKeepsWhatTheSnapshotDoesNotCover(t *testing.T) {
	dir := newSimDir()
	d, _ := mustOpen(t, dir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.Save(hardState(1, 10), entries(1, 10, 1), true))
	must(d.Compact(0, hardState(1, 10))) // a new segment, nothing dropped
	must(d.Save(hardState(2, 18), entries(11, 20, 1), true))
	must(d.Save(nil, entries(19, 30, 2), true)) // overwrites 19, 20
	must(d.SaveSnapshot(snapshotAt(25, 2)))
	must(d.Compact(20, hardState(2, 25)))
	if d.Segments() != 2 {
		t.Fatalf("%d segments after compaction to 20, want 2 (the one with 11..30 and the new one)", d.Segments())
	}
	must(d.Close())
	_, p := mustOpen(t, dir)
	if p.Snapshot.GetMetadata().GetIndex() != 25 || p.HardState.GetCommit() != 25 || p.HardState.GetTerm() != 2 {
		t.Fatalf("reopened: snapshot %v, hard state %v", p.Snapshot.GetMetadata(), p.HardState)
	}
	if len(p.Entries) != 5 || p.Entries[0].GetIndex() != 26 || p.Entries[0].GetTerm() != 2 {
		t.Fatalf("reopened: %d entries from %d", len(p.Entries), p.Entries[0].GetIndex())
	}
}

// TestDiskLogInstallDropsTheWholeLog: a snapshot received from the leader
// replaces the log, stale entries past it included.
func TestDiskLogInstallDropsTheWholeLog(t *testing.T) {
	dir := newSimDir()
	d, _ := mustOpen(t, dir)
	if err := d.Save(hardState(1, 5), entries(1, 12, 1), true); err != nil {
		t.Fatal(err)
	}
	if err := d.InstallSnapshot(snapshotAt(40, 3), hardState(3, 40)); err != nil {
		t.Fatal(err)
	}
	d.Close()
	_, p := mustOpen(t, dir)
	if p.Snapshot.GetMetadata().GetIndex() != 40 || len(p.Entries) != 0 || p.HardState.GetCommit() != 40 {
		t.Fatalf("after install: snapshot %v, %d entries, hard state %v", p.Snapshot.GetMetadata(), len(p.Entries), p.HardState)
	}
}

// TestDiskLogTornTails: a torn tail of the last segment is dropped; one in
// an earlier segment, which was synced before the next one started, is
// corruption; so is a damaged snapshot file.
func TestDiskLogTornTails(t *testing.T) {
	dir := newSimDir()
	d, _ := mustOpen(t, dir)
	if err := d.Save(hardState(1, 3), entries(1, 5, 1), true); err != nil {
		t.Fatal(err)
	}
	if err := d.SaveSnapshot(snapshotAt(3, 1)); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(0, hardState(1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(nil, entries(6, 8, 1), false); err != nil {
		t.Fatal(err)
	}
	names, _ := dir.List()
	first, last := dir.files[names[0]], dir.files[names[len(names)-2]]
	last.data = last.data[:len(last.data)-3] // torn while unsynced
	_, p, torn, err := certgroup.OpenDiskLog(dir)
	if err != nil || torn == 0 || p.Entries[len(p.Entries)-1].GetIndex() != 7 {
		t.Fatalf("torn last segment: %v, %d bytes dropped, last entry %d", err, torn, p.Entries[len(p.Entries)-1].GetIndex())
	}
	whole := first.data
	first.data = first.data[:len(first.data)-3]
	if _, _, _, err := certgroup.OpenDiskLog(dir); err == nil || !strings.Contains(err.Error(), "torn") {
		t.Fatalf("torn earlier segment: %v, want an error", err)
	}
	first.data = whole
	dir.files["raft.snap"].data[20] ^= 1
	if _, _, _, err := certgroup.OpenDiskLog(dir); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged snapshot: %v, want an error", err)
	}
}
