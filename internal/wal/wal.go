package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tashkent-db/tashkent/internal/fsutil"
)

// Entry is one committed version of the global log. Payload is opaque bytes (the caller marshals a
// protobuf).
type Entry struct {
	Version uint64
	Payload []byte
}

// Options configures Open.
type Options struct {
	Dir          string       // created if missing
	SegmentBytes int64        // roll to a new segment file after this many bytes (default 64 MiB)
	Logger       *slog.Logger // default slog.Default()
	// NoSync skips fsync, ONLY for tests/benchmarks that say so. Default false.
	NoSync bool
	// SyncDelay sleeps this long after every real data sync of appended entries: an emulated slow
	// disk (the Tashkent paper's 8 ms fsync, §9) for benchmarks. Durability stays real. Default 0.
	SyncDelay time.Duration
	// LockWait is how long Open waits for another holder of the directory's lock to let it go
	// before it returns ErrLocked: a process killed with SIGKILL holds it until the kernel has
	// finished its exit, which on a busy disk can take seconds. Default 0 (no wait).
	LockWait time.Duration
}

var (
	// ErrCompacted is returned by ReadFrom when some of the requested entries were removed by
	// TruncateBefore.
	ErrCompacted = errors.New("wal: requested entries were removed by retention")
	// ErrCorrupt is wrapped (see CorruptError) when a record in the middle of the log, or in a segment
	// that is not the last one, fails verification. The log is never repaired silently past such a
	// record: an operator has to look at it.
	ErrCorrupt = errors.New("wal: log is corrupt")
	// ErrEntryTooLarge is returned by Append, before anything is written, for a payload larger than
	// EntryBytesMax (64 MiB). The log stays usable.
	ErrEntryTooLarge = errors.New("wal: entry payload too large")
	// ErrClosed is returned by operations on a closed log.
	ErrClosed = errors.New("wal: log is closed")
	// ErrLocked is returned by Open when another Log (in this or another process) has the directory open.
	ErrLocked = errors.New("wal: directory is locked by another log")
)

// CorruptError describes a damaged record. It matches ErrCorrupt with errors.Is.
type CorruptError struct {
	File    string // segment file path
	Offset  int64  // byte offset of the damaged record (or header) in File
	Version uint64 // version the damaged record should carry
	Reason  string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: log is corrupt: %s at offset %d (version %d): %s", e.File, e.Offset, e.Version, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Stats are cumulative counters since Open.
type Stats struct {
	Appends uint64 // successful Append calls with at least one entry
	Entries uint64 // entries made durable
	Writes  uint64 // write system calls on segment files
	Fsyncs  uint64 // fsync calls on segment files and on the directory, zeroing excepted
	// ZeroedChunks counts the chunks of zeros written ahead of the records, each with an fsync of its
	// own (prealloc.go), mostly by a background goroutine: not part of any append's cost.
	ZeroedChunks    uint64
	BytesWritten    uint64 // bytes written to segment files, headers included
	SegmentsCreated uint64
}

// segment is the in-memory index entry of one segment file. Every indexed segment holds at least one
// record.
type segment struct {
	path         string
	firstVersion uint64
	lastVersion  uint64
	sizeBytes    int64 // durable bytes; readers never read past it
}

// Log is the certifier's durable, append-only log. Its methods are safe for concurrent use; appends
// are serialized.
type Log struct {
	dir             string
	segmentBytesMax int64
	noSync          bool
	syncDelay       time.Duration
	logger          *slog.Logger
	dirLock         *os.File

	// appendMu serializes the writers: Append, TruncateBefore and Close.
	appendMu sync.Mutex
	active   *os.File // last segment, open for writing; nil while the log is empty
	buf      []byte   // encoding buffer, reused across appends
	failed   error    // set when an append failed; the log refuses further writes
	closed   atomic.Bool
	// Pipelined appends (pipeline.go): batches written and not yet
	// published, oldest first; published is signalled, with appendMu,
	// whenever one is (or the log fails).
	unpublished  []*Pending
	writeSeq     uint64
	publishedSeq uint64
	published    sync.Cond

	// allocMu guards zeroed.file and the zeroing of the active segment
	// ahead of the writer (prealloc.go).
	allocMu      sync.Mutex
	zeroed       zeroedFile
	preallocWake chan struct{}
	preallocDone chan struct{}

	// stateMu guards the index. It is only written with appendMu held too, and only after the bytes it
	// describes are durable, so readers that snapshot it under RLock see durable data only.
	stateMu   sync.RWMutex
	segments  []segment
	sizeBytes int64
	// restartedAfter is the version RestartAfter continues after while the
	// log is empty (restart.go).
	restartedAfter uint64
	// syncedBefore: the segments that start below it are durable and
	// immutable (SyncAll, for a log opened with NoSync).
	syncedBefore uint64

	appends, entries, writes, fsyncs, bytesWritten, segmentsCreated, zeroedChunks atomic.Uint64
}

const (
	// appendBufferBytesInitial is preallocated for encoding a batch.
	appendBufferBytesInitial = 1 << 20
	// appendBufferBytesRetainMax: a buffer grown beyond this by a huge batch is dropped after use.
	appendBufferBytesRetainMax = 16 << 20
)

// Open opens or creates the log in opts.Dir and recovers it: every segment is scanned and verified;
// a torn tail of the last segment (left by a crash during an unacknowledged Append) is truncated with
// one slog.Warn line; any other damage makes Open fail with an error wrapping ErrCorrupt, and no file
// is modified. Only one Log may have a directory open at a time (ErrLocked).
func Open(opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := createDir(opts.Dir); err != nil {
		return nil, err
	}
	dirLock, err := lockDirWaiting(opts)
	if err != nil {
		return nil, err
	}
	l, err := openLocked(opts, dirLock)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	return l, nil
}

// lockRetryInterval is how often lockDirWaiting tries the lock again.
const lockRetryInterval = 50 * time.Millisecond

// lockDirWaiting is lockDir, retried for up to opts.LockWait while another holder has the lock.
func lockDirWaiting(opts Options) (*os.File, error) {
	deadline := time.Now().Add(opts.LockWait)
	for logged := false; ; logged = true {
		f, err := lockDir(opts.Dir)
		if !errors.Is(err, ErrLocked) || !time.Now().Before(deadline) {
			return f, err
		}
		if !logged {
			opts.Logger.Warn("waiting for the log directory's lock: another process holds it (a previous one still exiting?)",
				"dir", opts.Dir, "for_at_most", opts.LockWait)
		}
		time.Sleep(lockRetryInterval)
	}
}

func (opts Options) withDefaults() (Options, error) {
	if opts.Dir == "" {
		return opts, errors.New("wal: Options.Dir is required")
	}
	if opts.SegmentBytes < 0 {
		return opts, fmt.Errorf("wal: Options.SegmentBytes is negative (%d)", opts.SegmentBytes)
	}
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = segmentBytesDefault
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return opts, nil
}

func openLocked(opts Options, dirLock *os.File) (*Log, error) {
	files, err := listSegmentFiles(opts.Dir)
	if err != nil {
		return nil, err
	}
	segments, err := recoverSegments(files, opts.Logger)
	if err != nil {
		return nil, err
	}
	l := &Log{
		dir:             opts.Dir,
		segmentBytesMax: opts.SegmentBytes,
		noSync:          opts.NoSync,
		syncDelay:       opts.SyncDelay,
		logger:          opts.Logger,
		dirLock:         dirLock,
		buf:             make([]byte, 0, appendBufferBytesInitial),
		segments:        segments,
	}
	l.published.L = &l.appendMu
	for _, s := range segments {
		l.sizeBytes += s.sizeBytes
	}
	if len(segments) > 0 {
		last := segments[len(segments)-1]
		if l.active, err = os.OpenFile(last.path, os.O_WRONLY, 0); err != nil {
			return nil, fmt.Errorf("wal: open active segment: %w", err)
		}
		info, err := l.active.Stat()
		if err != nil {
			return nil, fmt.Errorf("wal: stat active segment: %w", err)
		}
		l.setZeroed(l.active, info.Size(), last.sizeBytes)
		if err := l.syncRecovered(); err != nil {
			l.active.Close()
			return nil, err
		}
	}
	l.startPreallocator()
	l.logger.Debug("wal: opened", "dir", l.dir, "segments", len(segments),
		"first_version", l.FirstVersion(), "last_version", l.LastVersion())
	return l, nil
}

// syncRecovered makes the records Open found durable before anyone is
// told they are: a process killed between a write and its fsync leaves
// the written records in the page cache, where recovery reads them as
// whole, and the next version is numbered after them; a power loss
// before the kernel writes them back would then lose versions the log
// reported durable. Only the active segment can hold such records (a
// segment is closed after its last batch was synced), and its directory
// entry may be new.
func (l *Log) syncRecovered() error {
	if err := l.syncFile(l.active); err != nil {
		return err
	}
	return l.syncLogDir()
}

// createDir creates dir if it is missing and makes its directory entry durable.
func createDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("wal: create directory: %w", err)
	}
	return syncDir(filepath.Dir(filepath.Clean(dir)))
}

// FirstVersion returns the lowest version still stored (0 if the log is empty).
func (l *Log) FirstVersion() uint64 {
	l.stateMu.RLock()
	defer l.stateMu.RUnlock()
	if len(l.segments) == 0 {
		return 0
	}
	return l.segments[0].firstVersion
}

// LastVersion returns the highest durable version (0 if the log is empty).
func (l *Log) LastVersion() uint64 {
	l.stateMu.RLock()
	defer l.stateMu.RUnlock()
	return l.lastVersionLocked()
}

// lastVersionLocked requires stateMu, or appendMu (the index only changes with appendMu held).
func (l *Log) lastVersionLocked() uint64 {
	if len(l.segments) == 0 {
		return l.restartedAfter
	}
	return l.segments[len(l.segments)-1].lastVersion
}

// SizeBytes returns the total size of the segment files.
func (l *Log) SizeBytes() int64 {
	l.stateMu.RLock()
	defer l.stateMu.RUnlock()
	return l.sizeBytes
}

// SegmentInfo describes one segment file: the versions it holds and the
// bytes of its records (its header included).
type SegmentInfo struct {
	FirstVersion, LastVersion uint64
	Bytes                     int64
}

// Segments describes the segment files, oldest first: what retention
// weighs (TruncateBefore removes them whole).
func (l *Log) Segments() []SegmentInfo {
	l.stateMu.RLock()
	defer l.stateMu.RUnlock()
	out := make([]SegmentInfo, len(l.segments))
	for i, s := range l.segments {
		out[i] = SegmentInfo{FirstVersion: s.firstVersion, LastVersion: s.lastVersion, Bytes: s.sizeBytes}
	}
	return out
}

// Stats returns cumulative counters since Open.
func (l *Log) Stats() Stats {
	return Stats{
		Appends:         l.appends.Load(),
		Entries:         l.entries.Load(),
		Writes:          l.writes.Load(),
		Fsyncs:          l.fsyncs.Load(),
		BytesWritten:    l.bytesWritten.Load(),
		SegmentsCreated: l.segmentsCreated.Load(),
		ZeroedChunks:    l.zeroedChunks.Load(),
	}
}

// Fsyncs returns the number of fsync calls since Open (segment files and directory), zeroing excepted.
func (l *Log) Fsyncs() uint64 { return l.fsyncs.Load() }

// Close releases the files and the directory lock. Everything appended is already durable, so Close
// does not sync. Closing twice is a no-op.
func (l *Log) Close() error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed.Swap(true) {
		return nil
	}
	close(l.preallocWake)
	<-l.preallocDone
	var errs []error
	if l.active != nil {
		errs = append(errs, l.active.Close())
		l.active = nil
	}
	errs = append(errs, l.dirLock.Close())
	return errors.Join(errs...)
}

// usable requires appendMu.
func (l *Log) usable() error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.failed
}

// syncFile fsyncs f unless NoSync is set.
func (l *Log) syncFile(f *os.File) error {
	if l.noSync {
		return nil
	}
	l.fsyncs.Add(1)
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wal: fsync %s: %w", f.Name(), err)
	}
	return nil
}

// syncData makes f's data durable (fdatasync where there is one) unless NoSync is set. Only for data
// written inside the file's existing size.
func (l *Log) syncData(f *os.File) error {
	if l.noSync {
		return nil
	}
	l.fsyncs.Add(1)
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("wal: fdatasync %s: %w", f.Name(), err)
	}
	SlowDiskSleep(l.syncDelay) // Options.SyncDelay: an emulated slow disk; returns at once for 0
	return nil
}

// syncLogDir fsyncs the log directory unless NoSync is set.
func (l *Log) syncLogDir() error {
	if l.noSync {
		return nil
	}
	l.fsyncs.Add(1)
	return syncDir(l.dir)
}

// syncDir makes the entries of a directory (created, removed files) durable.
func syncDir(dir string) error {
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("wal: fsync directory %s: %w", dir, err)
	}
	return nil
}

// syncPath fsyncs the file or directory at path through a descriptor of
// its own (fsync makes the file's data durable whichever descriptor wrote it).
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("wal: open %s for fsync: %w", path, err)
	}
	syncErr := f.Sync()
	closeErr := f.Close()
	if syncErr != nil {
		return fmt.Errorf("wal: fsync %s: %w", path, syncErr)
	}
	return closeErr
}
