package certifier

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// logOfEpochs writes versions 1..len(epochs) in small segments, version v
// certified in epochs[v-1].
func logOfEpochs(t *testing.T, dir string, epochs []uint64) *wal.Log {
	t.Helper()
	log := openSmallSegments(t, dir)
	entries := make([]wal.Entry, 0, len(epochs))
	for i, epoch := range epochs {
		v := uint64(i + 1)
		e := logentry.EncodePrefix(&pb.TxnID{Origin: "r", Seq: v}, &pb.Writeset{}).WithVersion(v, epoch)
		entries = append(entries, wal.Entry{Version: v, Payload: e.Bytes})
	}
	if err := log.Append(entries); err != nil {
		t.Fatal(err)
	}
	return log
}

func openSmallSegments(t *testing.T, dir string) *wal.Log {
	t.Helper()
	log, err := wal.Open(wal.Options{Dir: dir, SegmentBytes: 256, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// reopenedStartEpoch reopens the log in dir as Open does and returns
// where it starts and the epoch the runs know there.
func reopenedStartEpoch(t *testing.T, dir string) (start, epoch uint64) {
	t.Helper()
	log := openSmallSegments(t, dir)
	defer log.Close()
	runs, err := scanLogRuns(log)
	if err == nil {
		err = restoreLogStart(dir, log, runs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return log.StartsAfter(), runs.epochAt(log.StartsAfter())
}

// The epochs of the versions retention removes are recorded before the
// segments go: a crash that leaves any of them as the log's first still
// finds the epoch at the log's start; a start the record does not cover
// (a record from before, or none) is of an epoch not known.
func TestTheEpochAtTheLogStartSurvivesACrashDuringRetention(t *testing.T) {
	dir := t.TempDir()
	epochs := make([]uint64, 60)
	for i := range epochs {
		epochs[i] = 5
		if i >= 20 {
			epochs[i] = 9
		}
	}
	log := logOfEpochs(t, dir, epochs)
	segments := log.Segments()
	if len(segments) < 5 || segments[0].LastVersion >= 20 || segments[2].LastVersion <= 21 {
		t.Fatalf("segments %+v: want several on either side of version 20", segments)
	}
	runs, err := scanLogRuns(log)
	if err != nil {
		t.Fatal(err)
	}
	through := segments[2].LastVersion
	if err := saveLogStart(dir, newLogStartRecord(runs.view(1, through), through), false); err != nil {
		t.Fatal(err)
	}
	if err := log.TruncateBefore(segments[0].LastVersion + 1); err != nil { // a crash after the first removal
		t.Fatal(err)
	}
	log.Close()
	if start, epoch := reopenedStartEpoch(t, dir); start != segments[0].LastVersion || epoch != 5 {
		t.Fatalf("after a crash during the removal: the log starts after %d in epoch %d, want after %d in epoch 5", start, epoch, segments[0].LastVersion)
	}

	log = openSmallSegments(t, dir)
	if err := log.TruncateBefore(through + 1); err != nil {
		t.Fatal(err)
	}
	log.Close()
	if start, epoch := reopenedStartEpoch(t, dir); start != through || epoch != 9 {
		t.Fatalf("after the removal: the log starts after %d in epoch %d, want after %d in epoch 9", start, epoch, through)
	}

	log = openSmallSegments(t, dir)
	if err := log.TruncateBefore(segments[3].LastVersion + 1); err != nil { // removed without a record
		t.Fatal(err)
	}
	log.Close()
	if start, epoch := reopenedStartEpoch(t, dir); start != segments[3].LastVersion || epoch != 0 {
		t.Fatalf("past the record: the log starts after %d in epoch %d, want after %d in an epoch not known", start, epoch, segments[3].LastVersion)
	}
}

// A record whose epoch at the log's start is above the epoch of the log's
// first entry does not belong to this log: Open refuses it, naming the
// file.
func TestARecordAtTheLogStartThatDoesNotFitIsRefused(t *testing.T) {
	dir := t.TempDir()
	log := logOfEpochs(t, dir, []uint64{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3})
	through := log.Segments()[0].LastVersion
	if err := log.TruncateBefore(through + 1); err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if err := saveLogStart(dir, logStartRecord{Through: through, Runs: []logStartRun{{Epoch: 4, FirstVersion: 1}}}, false); err != nil {
		t.Fatal(err)
	}
	runs, err := scanLogRuns(log)
	if err != nil {
		t.Fatal(err)
	}
	if err := restoreLogStart(dir, log, runs); err == nil || !strings.Contains(err.Error(), logStartFileName) {
		t.Fatalf("a record of epoch 4 before entries of epoch 3: %v, want an error naming the file", err)
	}
}

// A group member whose versioned log restarts after a snapshot (here its
// versioned log, written without fsync in a group, was lost, and the Raft
// log is compacted behind the snapshot) knows the epoch of the snapshot's
// version from the snapshot, and after another restart from its record: a
// replica exactly at its log's start is compared by it.
func TestAGroupMemberKnowsTheEpochOfTheSnapshotItsLogStartsAfter(t *testing.T) {
	dir := t.TempDir()
	core := certgroup.Config{SnapshotEntries: 4, CatchUpEntries: 1}
	s := openOneMemberGroupWith(t, dir, core, Config{})
	for seq := uint64(1); seq <= 20; seq++ {
		commitRows(t, s, "r", seq, fmt.Sprint(seq))
	}
	epochs := map[uint64]uint64{}
	for _, e := range logged(t, s, 0, 20) {
		epochs[e.Version] = e.Epoch
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segments, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(segments) == 0 {
		t.Fatalf("the versioned log's segments: %v, %v", segments, err)
	}
	for _, path := range segments {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}

	s = openOneMemberGroupWith(t, dir, core, Config{})
	awaitCondition(t, "the versioned log restarts after the snapshot", func() bool { return s.log.StartsAfter() > 0 })
	start := s.log.StartsAfter()
	checkStartEpoch(t, s, "after the snapshot", start, epochs[start])
	for seq := uint64(21); seq <= 30; seq++ { // the versioned log holds versions after the start
		commitRows(t, s, "r", seq, fmt.Sprint(seq))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openOneMemberGroupWith(t, dir, core, Config{})
	defer s.Close()
	if s.log.StartsAfter() != start {
		t.Fatalf("after a restart the log starts after version %d, want %d", s.log.StartsAfter(), start)
	}
	checkStartEpoch(t, s, "after a restart", start, epochs[start])
}

// In a group, log retention records the epoch at the log's new start as
// a single certifier's does: the member compares a replica at its start
// by it, also after a restart.
func TestAGroupMemberKnowsTheEpochAtTheStartRetentionLeft(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1 << 10, Retention: RetentionPolicy{Bytes: -1, ReplicaTimeout: time.Hour, Interval: 20 * time.Millisecond}}
	s := openOneMemberGroupWith(t, dir, certgroup.Config{}, cfg)
	for seq := uint64(1); seq <= 60; seq++ {
		commitRows(t, s, "r", seq, fmt.Sprint(seq))
	}
	epochs := map[uint64]uint64{}
	for _, e := range logged(t, s, 0, 60) {
		epochs[e.Version] = e.Epoch
	}
	applied := uint64(50)
	s.replicas.opened("r", "", 0).report(&applied, time.Now())
	awaitCondition(t, "retention removes the log's start", func() bool {
		return s.StatusNow().Retention.GetKeepFrom() == 51 && s.log.StartsAfter() > 0
	})
	start := s.log.StartsAfter()
	checkStartEpoch(t, s, "as retention removed the start", start, epochs[start])
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Retention.Interval = time.Hour
	s = openOneMemberGroupWith(t, dir, certgroup.Config{}, cfg)
	defer s.Close()
	if s.log.StartsAfter() != start {
		t.Fatalf("after a restart the log starts after version %d, want %d", s.log.StartsAfter(), start)
	}
	checkStartEpoch(t, s, "after a restart", start, epochs[start])
}

// checkStartEpoch checks that s's log starts after version start, of
// epoch, and that a replica exactly there is admitted with that epoch
// and refused with another.
func checkStartEpoch(t *testing.T, s *Service, when string, start, epoch uint64) {
	t.Helper()
	if got := s.logHistory(); got.StartsAfter != start || got.StartEpoch != epoch || epoch == 0 {
		t.Fatalf("%s: the log starts after version %d in epoch %d, want after %d in epoch %d", when, got.StartsAfter, got.StartEpoch, start, epoch)
	}
	at := func(epoch uint64) *pb.OpenSession {
		return &pb.OpenSession{Replica: "r", ReplicaVersion: start, History: []*pb.EpochRun{{Epoch: epoch, FirstVersion: 1}}}
	}
	if err := s.checkOpen(at(epoch)); err != nil {
		t.Fatalf("%s: a replica at the log's start with the log's history is refused: %v", when, err)
	}
	if err := s.checkOpen(at(1)); err == nil {
		t.Fatalf("%s: a replica at the log's start %d in another epoch is admitted", when, start)
	}
}

// awaitCondition waits up to 10 s for cond.
func awaitCondition(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
