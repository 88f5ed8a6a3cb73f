package certifier

import (
	"fmt"
	"log/slog"
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

// serviceOverLog is a Service around a log of versions 1..len(epochs),
// version v certified in epochs[v-1], in small segments, durable up to
// durable and with the runs noted up to it (a span's fragments reach the
// log before its run is noted and before the durable version passes
// them): what trimLogBefore reads.
func serviceOverLog(t *testing.T, dir string, epochs []uint64, durable uint64) *Service {
	t.Helper()
	log := logOfEpochs(t, dir, epochs)
	t.Cleanup(func() { log.Close() })
	scanned, err := scanLogRuns(log)
	if err != nil {
		t.Fatal(err)
	}
	return &Service{
		cfg:     Config{DataDir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)},
		log:     log,
		runs:    &logRuns{runs: scanned.view(1, durable)},
		durable: newWatermark(durable),
	}
}

// epochsStepping is n versions whose epoch changes every 5 versions.
func epochsStepping(n int) []uint64 {
	epochs := make([]uint64, n)
	for i := range epochs {
		epochs[i] = 3 + uint64(i/5)
	}
	return epochs
}

// checkRecordCovers checks that the record in dir names the epoch of
// every version from..through.
func checkRecordCovers(t *testing.T, dir string, epochs []uint64, from, through uint64) {
	t.Helper()
	r, err := loadLogStart(dir)
	if err != nil {
		t.Fatal(err)
	}
	for v := from; v <= through; v++ {
		if got := r.epochAt(v); got != epochs[v-1] {
			t.Fatalf("the record names epoch %d for version %d, want %d (record %+v)", got, v, epochs[v-1], r)
		}
	}
}

// Retention records the epochs of every version it removes, and of the
// log's start before the removal, so that a crash that leaves any of them
// as the log's start still finds its epoch.
func TestRetentionRecordsTheEpochsOfEveryVersionItRemoves(t *testing.T) {
	dir := t.TempDir()
	epochs := epochsStepping(60)
	s := serviceOverLog(t, dir, epochs, 60)
	segments := s.log.Segments()
	if len(segments) < 7 || segments[0].LastVersion < 2 {
		t.Fatalf("segments %+v: want several of a few versions each", segments)
	}
	through := segments[3].LastVersion
	if err := s.trimLogBefore(through + 1); err != nil {
		t.Fatal(err)
	}
	if s.log.StartsAfter() != through {
		t.Fatalf("the log starts after %d, want after %d", s.log.StartsAfter(), through)
	}
	checkRecordCovers(t, dir, epochs, 1, through)

	start, through := through, segments[5].LastVersion
	if err := s.trimLogBefore(through + 1); err != nil {
		t.Fatal(err)
	}
	if s.log.StartsAfter() != through {
		t.Fatalf("the log starts after %d, want after %d", s.log.StartsAfter(), through)
	}
	checkRecordCovers(t, dir, epochs, start, through)
}

// Retention removes nothing when it cannot record the epochs of what it
// would remove, and does once it can.
func TestRetentionRemovesNothingWhenItCannotRecordTheEpochs(t *testing.T) {
	dir := t.TempDir()
	epochs := epochsStepping(60)
	s := serviceOverLog(t, dir, epochs, 60)
	through := s.log.Segments()[3].LastVersion
	blocker := filepath.Join(dir, logStartFileName+".tmp") // the atomic write's temporary file
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.trimLogBefore(through + 1); err != nil {
		t.Fatal(err)
	}
	if s.log.StartsAfter() != 0 {
		t.Fatalf("the record could not be written, yet the log starts after %d", s.log.StartsAfter())
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := s.trimLogBefore(through + 1); err != nil {
		t.Fatal(err)
	}
	if s.log.StartsAfter() != through {
		t.Fatalf("once the record can be written the log starts after %d, want after %d", s.log.StartsAfter(), through)
	}
	checkRecordCovers(t, dir, epochs, 1, through)
}

// Retention removes only durable versions, however far the decision
// reaches: the runs of the versions after the durable one may not be
// noted yet.
func TestRetentionRemovesOnlyDurableVersions(t *testing.T) {
	dir := t.TempDir()
	epochs := epochsStepping(60)
	probe := logOfEpochs(t, t.TempDir(), epochs)
	segments := probe.Segments()
	probe.Close()
	if len(segments) < 6 || segments[2].FirstVersion == segments[2].LastVersion {
		t.Fatalf("segments %+v: want several of a few versions each", segments)
	}
	durable := segments[2].FirstVersion // in the middle of segment 2
	s := serviceOverLog(t, dir, epochs, durable)
	if err := s.trimLogBefore(segments[4].LastVersion + 1); err != nil {
		t.Fatal(err)
	}
	if want := segments[1].LastVersion; s.log.StartsAfter() != want {
		t.Fatalf("durable up to %d, retention to keep from %d: the log starts after %d, want after %d",
			durable, segments[4].LastVersion+1, s.log.StartsAfter(), want)
	}
	checkRecordCovers(t, dir, epochs, 1, segments[1].LastVersion)
}

// A record that does not belong to this log (its epoch at the log's
// start is above the epoch of the log's first entry), or does not read,
// stops Open with an error that names the file and says what to do.
func TestARecordAtTheLogStartThatDoesNotFitOrReadIsRefused(t *testing.T) {
	for name, record := range map[string][]byte{
		"does not fit":  []byte(`{"through":%d,"runs":[{"epoch":4,"first_version":1}]}`),
		"does not read": []byte(`{"through":%d,"runs":[{"epoch":`),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			log := logOfEpochs(t, dir, []uint64{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3})
			defer log.Close()
			through := log.Segments()[0].LastVersion
			if err := log.TruncateBefore(through + 1); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, logStartFileName), fmt.Appendf(nil, string(record), through), 0o600); err != nil {
				t.Fatal(err)
			}
			runs, err := scanLogRuns(log)
			if err != nil {
				t.Fatal(err)
			}
			err = restoreLogStart(dir, log, runs)
			if err == nil || !strings.Contains(err.Error(), logStartFileName) || !strings.Contains(err.Error(), "remove the file") {
				t.Fatalf("a record that %s before entries of epoch 3: %v, want an error naming the file and saying to remove it", name, err)
			}
		})
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
