package certifier

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/fsutil"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// The epoch at the log's start. Log retention removes the oldest segments
// of the versioned log (and a group member's log restarts after a
// snapshot), so a scan at start finds no entry at StartsAfter, the last
// version removed. Admission compares a replica exactly there by that
// entry's epoch (commonAtLogStart), so it is kept in a file of the data
// directory, written before the segments go: the runs of the versions
// from the log's start before the removal through its start after it.
// Whichever of those versions a crash during the removal leaves as the
// start, the file names its epoch. A data directory without the file
// (written before it existed) starts with that epoch unknown, and
// admission then takes the start as common, as the version alone says.

// logStartFileName is the file, in the data directory.
const logStartFileName = "log-start.json"

// logStartRecord is the file's content: the runs of the versions the log
// may start after, up to Through.
type logStartRecord struct {
	Through uint64        `json:"through"`
	Runs    []logStartRun `json:"runs"`
}

type logStartRun struct {
	Epoch        uint64 `json:"epoch"`
	FirstVersion uint64 `json:"first_version"`
}

// epochAt is the epoch of the entry at version, 0 if the record does not
// hold that version.
func (r logStartRecord) epochAt(version uint64) uint64 {
	if version > r.Through {
		return 0
	}
	for i := len(r.Runs) - 1; i >= 0; i-- {
		if r.Runs[i].FirstVersion <= version {
			return r.Runs[i].Epoch
		}
	}
	return 0
}

func newLogStartRecord(runs []*pb.EpochRun, through uint64) logStartRecord {
	r := logStartRecord{Through: through, Runs: make([]logStartRun, 0, len(runs))}
	for _, run := range runs {
		r.Runs = append(r.Runs, logStartRun{Epoch: run.GetEpoch(), FirstVersion: run.GetFirstVersion()})
	}
	return r
}

// withoutLogStartHint is what an operator can do about a record that
// does not read or does not fit the log: without it, a replica exactly
// at the log's start is admitted by its version alone.
const withoutLogStartHint = "remove the file to start without them"

// loadLogStart reads the record in dir (none: an empty one). A record
// that does not read stops the start rather than being taken as missing:
// it is written atomically, so it is damaged, and going on without it
// would loosen admission without anyone deciding to.
func loadLogStart(dir string) (logStartRecord, error) {
	path := filepath.Join(dir, logStartFileName)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return logStartRecord{}, nil
	case err != nil:
		return logStartRecord{}, fmt.Errorf("read the epochs at the log's start %s: %w", path, err)
	}
	var r logStartRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return logStartRecord{}, fmt.Errorf("the epochs at the log's start %s do not read (%s): %w", path, withoutLogStartHint, err)
	}
	return r, nil
}

func saveLogStart(dir string, r logStartRecord, sync bool) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomically(dir, logStartFileName, b, sync); err != nil {
		return fmt.Errorf("write the epochs at the log's start %s: %w", filepath.Join(dir, logStartFileName), err)
	}
	return nil
}

// restoreLogStart gives runs, scanned from log, the epoch of the entry
// the log starts after, if the record in dir names it.
func restoreLogStart(dir string, log *wal.Log, runs *logRuns) error {
	start := log.StartsAfter()
	if start == 0 {
		return nil
	}
	r, err := loadLogStart(dir)
	if err != nil {
		return err
	}
	if err := runs.startAfter(start, r.epochAt(start)); err != nil {
		return fmt.Errorf("the epochs at the log's start %s do not fit the log (%s): %w",
			filepath.Join(dir, logStartFileName), withoutLogStartHint, err)
	}
	return nil
}

// trimLogBefore removes the segments TruncateBefore(keepFrom) would, up
// to the durable version (the runs of later versions, such as a span's
// fragments written before its run is noted, may not be known yet), after
// recording the epochs of the versions from the log's start through its
// new start. If the record cannot be written, nothing is removed: the log
// only keeps versions longer than the decision asked, and the next
// decision tries again, whereas removing them would leave a start whose
// epoch a restart does not know.
func (s *Service) trimLogBefore(keepFrom uint64) error {
	through := removableThrough(s.log.Segments(), min(keepFrom, s.DurableVersion()+1))
	if through == 0 {
		return nil
	}
	from := max(s.log.StartsAfter(), 1)
	if err := saveLogStart(s.cfg.DataDir, newLogStartRecord(s.runs.view(from, through), through), !s.cfg.NoSync); err != nil {
		s.cfg.Logger.Warn("log retention: could not record the epochs of the versions it would remove; the log keeps them", "err", err)
		return nil
	}
	return s.log.TruncateBefore(through + 1)
}

// removableThrough is the last version of the segments TruncateBefore
// (keepFrom) removes: those wholly below keepFrom, oldest first, never the
// last. 0: none.
func removableThrough(segments []wal.SegmentInfo, keepFrom uint64) uint64 {
	through := uint64(0)
	for i := 0; i+1 < len(segments) && segments[i].LastVersion < keepFrom; i++ {
		through = segments[i].LastVersion
	}
	return through
}

// restartLogAfter restarts the versioned log after version (a group
// member's snapshot, whose entry is of epoch, 0 if the snapshot does not
// say), recording that epoch first. The runs restart before the log does:
// admission meanwhile finds the epoch at the old start not known, never
// the old log's last epoch taken for the new start's.
func (s *Service) restartLogAfter(version, epoch uint64) error {
	var runs []*pb.EpochRun
	if epoch != 0 {
		runs = []*pb.EpochRun{{Epoch: epoch, FirstVersion: version}}
	}
	if err := saveLogStart(s.cfg.DataDir, newLogStartRecord(runs, version), !s.cfg.NoSync); err != nil {
		s.cfg.Logger.Warn("could not record the epoch of the snapshot's version; after a restart this member compares no replica at its log's start", "err", err)
	}
	s.runs.restartAfter(version, epoch)
	return s.log.RestartAfter(version)
}
