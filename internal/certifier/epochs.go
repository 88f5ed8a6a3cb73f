package certifier

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/fsutil"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// Every log entry carries the epoch that certified it (LogEntry.epoch): a
// group's base plus its leader's Raft term (certgroup/base.go), or a
// single certifier's generation. Epochs never decrease along the
// versioned log, so the log's history is a short list of runs, (epoch,
// first version), which admission compares with a replica's (Admit). logRuns keeps that list as the log grows; it is
// rebuilt at start by scanning the log (scanLogRuns). The one epoch a scan
// cannot find is that of the entry just before the log's start, once log
// retention or a group's snapshot removed it: it is kept in a file of its
// own (logstart.go) and, in a group, in the snapshots.

// logRuns are the runs of the versioned log. The writer notes what it
// appends (note) before the durable version passes it; admission reads
// them (view). Safe for concurrent use.
type logRuns struct {
	mu   sync.Mutex
	runs []*pb.EpochRun // first versions increasing, epochs increasing
}

// note records that the log holds version, certified in epoch, and every
// version after it up to the next note: a new run unless epoch is the
// last run's.
func (r *logRuns) note(epoch, version uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.runs); n > 0 {
		last := r.runs[n-1]
		if last.GetEpoch() == epoch {
			return
		}
		if epoch < last.GetEpoch() || version <= last.GetFirstVersion() {
			// A group's epochs (its base fixed, terms growing) and a
			// single certifier's generations only grow, and the log only
			// appends: a broken invariant, not a disk fault.
			panic(fmt.Sprintf("certifier: log version %d of epoch %d follows run (epoch %d from version %d)",
				version, epoch, last.GetEpoch(), last.GetFirstVersion()))
		}
	}
	r.runs = append(r.runs, &pb.EpochRun{Epoch: epoch, FirstVersion: version})
}

// restartAfter forgets every run: the log restarts empty after version,
// whose entry is of epoch (0: not known).
func (r *logRuns) restartAfter(version, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = nil
	if epoch != 0 {
		r.runs = append(r.runs, &pb.EpochRun{Epoch: epoch, FirstVersion: version})
	}
}

// startAfter records that the entry at version, just before the first one
// the log holds, is of epoch (0: not known): the first run reaches back
// to it. The runs are the log's as scanned (scanLogRuns), so an epoch
// above the first run's is a record that does not belong to this log.
func (r *logRuns) startAfter(version, epoch uint64) error {
	if epoch == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.runs) > 0 {
		first := r.runs[0]
		switch {
		case first.GetFirstVersion() <= version:
			// The caller passes the scanned log's StartsAfter, and a scan's
			// first run starts at the log's first entry, after it.
			panic(fmt.Sprintf("certifier: the log's runs start at version %d, not after version %d where the log starts",
				first.GetFirstVersion(), version))
		case first.GetEpoch() == epoch:
			first.FirstVersion = version
			return nil
		case first.GetEpoch() < epoch:
			return fmt.Errorf("the log's first entry, version %d, is of epoch %d, below epoch %d recorded for version %d before it",
				first.GetFirstVersion(), first.GetEpoch(), epoch, version)
		}
	}
	r.runs = append([]*pb.EpochRun{{Epoch: epoch, FirstVersion: version}}, r.runs...)
	return nil
}

// epochAt is the epoch of the entry at version, 0 if the runs do not
// reach back to it. Retention does not trim the runs (a handful, one per
// epoch), so they still know the epochs of versions it removed.
func (r *logRuns) epochAt(version uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.runs) - 1; i >= 0; i-- {
		if r.runs[i].GetFirstVersion() <= version {
			return r.runs[i].GetEpoch()
		}
	}
	return 0
}

// view returns the runs over the versions first..last the log holds: runs
// starting after last are left out, and the first run kept starts at first
// at the earliest (retention removes the log's start). Empty when the log
// is.
func (r *logRuns) view(first, last uint64) []*pb.EpochRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	if first == 0 || last < first {
		return nil
	}
	var out []*pb.EpochRun
	for i, run := range r.runs {
		if run.GetFirstVersion() > last {
			break
		}
		if i+1 < len(r.runs) && r.runs[i+1].GetFirstVersion() <= first {
			continue // ends before the log starts
		}
		out = append(out, &pb.EpochRun{Epoch: run.GetEpoch(), FirstVersion: max(run.GetFirstVersion(), first)})
	}
	return out
}

// top is the epoch of the last run (0: none).
func (r *logRuns) top() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.runs) == 0 {
		return 0
	}
	return r.runs[len(r.runs)-1].GetEpoch()
}

// noteEntries notes a batch of entries the log appends in version order:
// only the first and the last are read unless they differ from the last
// run (epochs never decrease, so equal ends mean one epoch throughout).
func (r *logRuns) noteEntries(entries []logentry.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	firstEpoch, err := epochOf(entries[0].Bytes)
	if err != nil {
		return err
	}
	lastEpoch, err := epochOf(entries[len(entries)-1].Bytes)
	if err != nil {
		return err
	}
	if firstEpoch == lastEpoch {
		r.note(firstEpoch, entries[0].Version)
		return nil
	}
	for _, e := range entries {
		epoch, err := epochOf(e.Bytes)
		if err != nil {
			return err
		}
		r.note(epoch, e.Version)
	}
	return nil
}

func epochOf(entry []byte) (uint64, error) {
	h, err := logentry.RawHeaderOf(entry)
	return h.Epoch, err
}

// errFound stops a log read once it found what it looked for.
var errFound = errors.New("found")

// scanLogRuns reads the runs of the log it holds: the epoch of each
// segment's first entry, and every entry of a segment where the epoch
// changes before the next segment (the last segment always). Epochs never
// decrease, so that is every boundary.
func scanLogRuns(log *wal.Log) (*logRuns, error) {
	segments := log.Segments()
	firsts := make([]uint64, len(segments))
	for i, seg := range segments {
		epoch, err := epochAt(log, seg.FirstVersion)
		if err != nil {
			return nil, err
		}
		firsts[i] = epoch
	}
	runs := &logRuns{}
	for i, seg := range segments {
		if i+1 < len(segments) && firsts[i] == firsts[i+1] {
			runs.note(firsts[i], seg.FirstVersion)
			continue
		}
		err := log.ReadFrom(seg.FirstVersion-1, func(e wal.Entry) error {
			if e.Version > seg.LastVersion {
				return errFound
			}
			epoch, err := epochOf(e.Payload)
			if err != nil {
				return fmt.Errorf("log entry %d: %w", e.Version, err)
			}
			runs.note(epoch, e.Version)
			return nil
		})
		if err != nil && !errors.Is(err, errFound) {
			return nil, fmt.Errorf("read the log's epochs: %w", err)
		}
	}
	return runs, nil
}

// epochAt reads the epoch of the log's entry at version.
func epochAt(log *wal.Log, version uint64) (uint64, error) {
	var epoch uint64
	err := log.ReadFrom(version-1, func(e wal.Entry) error {
		var err error
		if epoch, err = epochOf(e.Payload); err != nil {
			return fmt.Errorf("log entry %d: %w", e.Version, err)
		}
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return 0, fmt.Errorf("read the log's epochs: %w", err)
	}
	return epoch, nil
}

// generationFileName holds a single certifier's generation: the epoch of
// the entries it certifies, a new one at every start.
const generationFileName = "generation"

// nextGeneration makes a generation above both the one on disk and every
// epoch in the log (logTop) durable in dir, and returns it. It runs before
// the certifier serves, so no two starts certify under one generation,
// even if the generation file was lost. It is the start's time in
// microseconds when that is higher: two certifiers created from empty
// directories, which reuse version numbers, then tell their entries apart
// too.
func nextGeneration(dir string, logTop uint64, now time.Time, sync bool) (uint64, error) {
	path := filepath.Join(dir, generationFileName)
	last := uint64(0)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, fmt.Errorf("read the certifier's generation: %w", err)
	default:
		if last, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return 0, fmt.Errorf("read the certifier's generation %s: %w", path, err)
		}
	}
	next := max(last+1, logTop+1, uint64(max(now.UnixMicro(), 0)))
	if err := fsutil.WriteFileAtomically(dir, generationFileName, []byte(strconv.FormatUint(next, 10)+"\n"), sync); err != nil {
		return 0, fmt.Errorf("write the certifier's generation: %w", err)
	}
	return next, nil
}
