package certifier

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// singleLog is the orderer of a certifier that runs alone: it certifies in
// its own state, and its writer makes the versioned log durable (group
// commit, Tashkent §6.1). What it decided leaves the service once durable,
// or, to a stream that takes the commit point, as it is decided
// (early.go).
type singleLog struct {
	s *Service

	mu      sync.Mutex // guards state, pending; held once per message (decide)
	state   *certification.State
	pending []logentry.Entry // certified, not yet handed to the writer
	spans   []committedSpan  // committed streamed transactions, likewise (span.go)
	stops   earlyStops       // where delivery before durability stops (early.go)
	wake    chan struct{}    // signalled when pending or spans becomes non-empty

	saved *pb.LogRetention // the retention decision last written (retain)

	// generation is the epoch of every entry this process certifies
	// (epochs.go, nextGeneration), from firstVersion on: the versions
	// below were in the log, synced, when it started.
	generation   uint64
	firstVersion uint64

	records []wal.Entry // the writer's, reused across batches
}

// newSingleLog restores the certification state of the log's last window,
// and the replicas log retention waits for.
func newSingleLog(s *Service) (*singleLog, int, error) {
	saved, err := loadRetention(s.cfg.DataDir)
	if err != nil {
		return nil, 0, err
	}
	if saved != nil {
		s.replicas.adopt(saved)
		s.retention.Store(saved)
	}
	generation, err := nextGeneration(s.cfg.DataDir, s.runs.top(), s.started, !s.cfg.NoSync)
	if err != nil {
		return nil, 0, err
	}
	base := s.windowBase()
	l := &singleLog{
		generation: generation,
		s:          s,
		state: certification.New(certification.Config{WindowVersions: s.cfg.WindowVersions,
			UnsafeSkipConflictCheck: s.cfg.UnsafeSkipConflictCheck}, base),
		wake:  make(chan struct{}, 1),
		saved: saved,
	}
	restored, err := s.replay(base, func(h logentry.RawHeader, txn certification.TxnID, keys []certification.Key) {
		if h.InSpan() {
			l.state.RestoreSpan(h.SpanFirst, h.SpanLast, txn, keys)
			return
		}
		l.state.Restore(h.Version, txn, keys)
	})
	l.firstVersion = s.log.LastVersion() + 1
	return l, restored, err
}

func (l *singleLog) start() {
	l.s.done.Add(1)
	go l.writeLoop()
}

// close has nothing to release: the writer ends with the service.
func (l *singleLog) close() {}

func (l *singleLog) certifyingEpoch(context.Context) (uint64, uint64, error) {
	return l.generation, l.firstVersion, nil
}

// certifies: a single certifier always certifies; it has no term.
func (l *singleLog) certifies() (bool, uint64) { return true, 0 }

// admit: a single certifier serves every stream for as long as it runs,
// and holds every version a replica can hold already.
func (l *singleLog) admit(grpc.ServerStream, *pb.OpenSession) (context.Context, uint64, error) {
	return context.Background(), 0, nil
}

// mayDeliver: a single certifier's one tenure lasts as long as it runs.
func (l *singleLog) mayDeliver(uint64) error { return nil }

func (l *singleLog) sentEarly(_, through uint64) { l.s.earlySent.advance(through) }

// decide runs the state machine for every prepared request, in order,
// under one lock (decideSingle), queues the new commits for the writer,
// and delivers them to the streams that take the commit point (early.go).
func (l *singleLog) decide(_ context.Context, batch []certifying) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wasEmpty := len(l.pending) == 0 && len(l.spans) == 0
	entriesBefore, spansBefore := len(l.pending), len(l.spans)
	claimStages(batch, l.s.staging.claim)
	l.pending = decideSingle(l.state, l.generation, batch, l.pending)
	l.spans = committedSpans(batch, l.generation, l.spans)
	l.deliverDecided(batch, l.pending[entriesBefore:], l.spans[spansBefore:])
	if wasEmpty && (len(l.pending) > 0 || len(l.spans) > 0) {
		l.signalWriter()
	}
	return len(batch), nil
}

func (l *singleLog) signalWriter() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// admitStage: a single certifier stages for every client.
func (l *singleLog) admitStage(grpc.ServerStream) error { return nil }

// copyStage: a single certifier's stage is its spool alone.
func (l *singleLog) copyStage(*pb.TxnID) *stageCopies { return nil }

// missingSpanVersions: a single certifier's spans come from its own
// stage.
func (l *singleLog) missingSpanVersions() uint64 { return 0 }

// discardCopies: a single certifier copies no stage.
func (l *singleLog) discardCopies(*pb.TxnID) {}

// admitStageCopy: a single certifier has no leader to copy from.
func (l *singleLog) admitStageCopy(context.Context) error {
	return status.Error(codes.FailedPrecondition, "StageCopy is a certifier group member's call; this certifier runs alone")
}

// maySend: nothing holds a reply once what it depends on is durable.
func (l *singleLog) maySend(context.Context, []queued) error { return nil }

func (l *singleLog) versions() (version, lowWaterMark uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.Version(), l.state.LowWaterMark()
}

// syncVersion is the durable version, or above it the highest version
// sent early (early.go): a version is acknowledged and delivered only
// once it is durable unless a stream takes entries before.
func (l *singleLog) syncVersion(context.Context) (uint64, error) {
	if err := l.s.Err(); err != nil {
		return 0, status.Errorf(codes.Unavailable, "the certifier stopped serving: %v", err)
	}
	return max(l.s.DurableVersion(), l.s.earlySent.get()), nil
}

// checkFetch: the log serves every version it still has (Fetch refuses
// the ones removed).
func (l *singleLog) checkFetch(uint64) error { return nil }

func (l *singleLog) describe(r *pb.StatusReply) { r.Role = "single" }

// retain applies the retention rule to the log, keeping the certification
// window that a restart restores (windowStart), and writes the decision
// down, so that the replicas that are away hold the log after a restart
// too. A replica's silence counts from this process's start.
func (l *singleLog) retain(now time.Time) {
	s := l.s
	d := decideRetention(s.retentionInput(now, s.started, l.windowStart()))
	s.applyRetention(d)
	if sameProgress(d, l.saved) {
		return
	}
	if err := saveRetention(s.cfg.DataDir, d, !s.cfg.NoSync); err != nil {
		s.cfg.Logger.Warn("log retention: could not write the decision down; a restart would wait for the replicas of the last one written", "err", err)
		return
	}
	l.saved = d
}

// windowStart is the first version of the certification window: the
// versions Open restores the state from after a restart (windowBase).
func (l *singleLog) windowStart() uint64 {
	last, window := l.s.log.LastVersion(), l.s.cfg.WindowVersions
	if last <= window {
		return 1
	}
	return last - window + 1
}

// writeLoop is the single writer: it takes everything certified since the
// last write and makes it durable with one write and one fsync (group
// commit). The spans committed meanwhile are copied in version order
// between the entries (writeSpan).
func (l *singleLog) writeLoop() {
	s := l.s
	defer s.done.Done()
	var batch []logentry.Entry
	var spans []committedSpan
	for {
		select {
		case <-l.wake:
		case <-s.stop:
			return
		}
		l.mu.Lock()
		batch, l.pending = l.pending, batch[:0]
		spans, l.spans = l.spans, spans[:0]
		l.mu.Unlock()
		if len(batch) == 0 && len(spans) == 0 {
			continue
		}
		if !l.writeInOrder(batch, spans) {
			return
		}
		l.deliverPassed()
		// The streams just woken by the durable version are queued on this
		// goroutine's P; the next batch's fsync would hold that P (a
		// blocking system call keeps it until sysmon takes it back) and
		// their replies with it, unless the other core is free to steal
		// them. Let them send first: the next fsync starts a few tens of
		// microseconds later, the replies an fsync earlier.
		runtime.Gosched()
		clear(batch)
		clear(spans)
		// More may have arrived while this batch was written.
		l.mu.Lock()
		more := len(l.pending) > 0 || len(l.spans) > 0
		l.mu.Unlock()
		if more {
			l.signalWriter()
		}
	}
}

// writeInOrder makes entries and spans durable in version order: the
// entries before the next span as one group commit, then the span.
func (l *singleLog) writeInOrder(batch []logentry.Entry, spans []committedSpan) bool {
	for len(batch) > 0 || len(spans) > 0 {
		n := len(batch)
		if len(spans) > 0 {
			n = 0
			for n < len(batch) && batch[n].Version < spans[0].first {
				n++
			}
		}
		if n > 0 && !l.writeEntries(batch[:n]) {
			return false
		}
		batch = batch[n:]
		if len(spans) > 0 {
			if !l.writeSpan(spans[0]) {
				return false
			}
			spans = spans[1:]
		}
	}
	return true
}

// writeEntries makes entries durable with one write and one fsync.
func (l *singleLog) writeEntries(batch []logentry.Entry) bool {
	s := l.s
	s.runs.note(l.generation, batch[0].Version)
	l.records = l.records[:0]
	for _, e := range batch {
		l.records = append(l.records, wal.Entry{Version: e.Version, Payload: e.Bytes})
	}
	if d := s.cfg.UnsafeFaultWriteDelay; d > 0 {
		time.Sleep(d) // delivered early, not yet written: a kill -9 now fails them
	}
	ok := l.write(l.records)
	clear(l.records)
	return ok
}

// write makes one batch durable and advances the durable version past it;
// false if the log failed, which stops the service.
//
// One group commit is in flight at a time, and the writer waits for its
// fsync itself. With two, the next batch would be written, and its fsync
// started, while the previous fsync runs, so that at moderate load a
// request waits for about one fsync instead of up to two; but after a
// power loss with two batches in flight the later may be on disk without
// the earlier, and the log's recovery, which never guesses, then refuses
// to start (a defect followed by valid records reads as corruption;
// internal/wal/doc.go) until an operator steps in. Both batches were
// unacknowledged, but recovery cannot tell that from damage to
// acknowledged entries. Overlapping them needs a log format that records
// batch boundaries; the gain measured was within the noise
// (docs/BENCHMARKS.md). A goroutine per batch would only add scheduling
// hops to every batch's path, on cores the certifier shares with its
// clients.
func (l *singleLog) write(records []wal.Entry) bool {
	s := l.s
	first, last := records[0].Version, records[len(records)-1].Version
	var zeroedBefore uint64
	if s.stages != nil {
		zeroedBefore = s.log.Stats().ZeroedChunks
	}
	started := time.Now()
	p, err := s.log.Write(records)
	written := time.Now()
	if err != nil {
		s.fail(fmt.Errorf("log write of versions %d..%d: %w", first, last, err))
		return false
	}
	if err := p.Wait(); err != nil {
		s.fail(fmt.Errorf("log append of versions %d..%d: %w", first, last, err))
		return false
	}
	s.stats.recordFsync(len(records), time.Since(started))
	s.metrics.observeFsync(len(records))
	s.durable.advance(last)
	if s.stages != nil {
		s.stages.batch(batchStages{first: first, last: last, writeStart: unixNano(started), written: unixNano(written), durable: time.Now().UnixNano(),
			zeroedBefore: zeroedBefore, zeroedAfter: s.log.Stats().ZeroedChunks})
	}
	return true
}
