package certifier

import (
	"fmt"
	"time"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// Spans: a streamed transaction commits as the versions first..last, one
// log entry per staged fragment (LogEntry.span_first, span_last; the last
// entry also carries the writeset it was certified on). The single
// certifier's writer copies them from the stage into the log one fragment
// at a time (writeSpan), and the durable version moves from first-1 to
// last at once, never inside a span: no reply, delivery or Fetch reads a
// span before all of it is on disk. Spans are not kept in the recent ring
// (a fragment is up to --writeset-bytes-max): delivery reads them from the
// log, in chunks, like any entry older than the ring.

// openSingleLogStaging cuts an incomplete span from the log's tail (a
// crash during its copy: nobody was told it committed) and opens the
// staging area, which drops the spool files of the last run.
func openSingleLogStaging(cfg Config, log *wal.Log) (*stagingArea, error) {
	if err := cutIncompleteSpan(cfg, log); err != nil {
		return nil, err
	}
	return openStagingArea(cfg.DataDir, cfg.StageBytesMax)
}

// cutIncompleteSpan removes the entries of a span whose last entry is not
// in the log.
func cutIncompleteSpan(cfg Config, log *wal.Log) error {
	last := log.LastVersion()
	if last == 0 {
		return nil
	}
	var h logentry.RawHeader
	err := log.ReadFrom(last-1, func(e wal.Entry) error {
		var err error
		h, err = logentry.RawHeaderOf(e.Payload)
		return err
	})
	if err != nil {
		return fmt.Errorf("read the log's last entry: %w", err)
	}
	if !h.InSpan() || h.Version == h.SpanLast {
		return nil
	}
	if err := log.TruncateAfter(h.SpanFirst - 1); err != nil {
		return fmt.Errorf("cut the incomplete span %d..%d at the log's end: %w", h.SpanFirst, h.SpanLast, err)
	}
	cfg.Logger.Warn("certifier log: removed the incomplete span of a streamed transaction at its end (a crash during its copy; its commit was never acknowledged)",
		"span_first", h.SpanFirst, "span_last", h.SpanLast, "entries_removed", last-h.SpanFirst+1, "last_version", log.LastVersion())
	return nil
}

// spanBatchBytes is how much of a span the writer appends with one sync:
// a couple of fragments, so that a span costs a sync per 8 MiB, not per
// fragment, while what is in memory stays small (the batch's buffer is
// kept from one batch to the next).
const spanBatchBytes = 8 << 20

// writeSpan copies a committed span from its spool file into the log, a
// few fragments (entries) in memory at a time, each batch appended and
// synced in turn, then advances the durable version to its last version
// and removes the spool file; false if it failed, which stops the
// service.
func (l *singleLog) writeSpan(sp committedSpan) bool {
	s := l.s
	spool, err := openSpool(sp.spool)
	if err != nil {
		s.fail(fmt.Errorf("open the stage of versions %d..%d: %w", sp.first, sp.last, err))
		return false
	}
	defer spool.close()
	var buf []byte // the batch's entries, one after the other
	var ends []int // where each ends in buf
	var batch []wal.Entry
	for v := sp.first; v <= sp.last; v++ {
		select {
		case <-s.stop:
			// Closing: the span's entries written so far are cut at the
			// next start, and nobody was told it committed.
			return false
		default:
		}
		fragment, err := spool.next()
		if err != nil {
			s.fail(fmt.Errorf("copy the stage of versions %d..%d into the log: %w", sp.first, sp.last, err))
			return false
		}
		buf = logentry.AppendSpanEntry(buf, logentry.SpanEntry{Version: v, Txn: sp.txn, Fragment: fragment,
			First: sp.first, Last: sp.last, Certified: sp.certified})
		ends = append(ends, len(buf))
		if len(buf) >= spanBatchBytes || v == sp.last {
			// Sliced once the batch is whole: appending may have moved buf.
			batch = batch[:0]
			start := 0
			for i, end := range ends {
				batch = append(batch, wal.Entry{Version: v - uint64(len(ends)-1-i), Payload: buf[start:end]})
				start = end
			}
			if !l.appendSpanBatch(batch, sp) {
				return false
			}
			buf, ends = buf[:0], ends[:0]
		}
	}
	s.mu.Lock()
	s.recent.clear() // the next entry starts the ring again after the span
	s.mu.Unlock()
	s.durable.advance(sp.last)
	s.staging.discard(txnOf(sp.txn))
	return true
}

// appendSpanBatch appends and syncs some of a span's entries.
func (l *singleLog) appendSpanBatch(batch []wal.Entry, sp committedSpan) bool {
	s := l.s
	started := time.Now()
	if err := s.log.Append(batch); err != nil {
		s.fail(fmt.Errorf("log append of versions %d..%d (span %d..%d): %w", batch[0].Version, batch[len(batch)-1].Version, sp.first, sp.last, err))
		return false
	}
	s.stats.recordFsync(len(batch), time.Since(started))
	s.metrics.observeFsync(len(batch))
	return true
}

// settleStages releases the stages a decided batch claimed, except those
// of committed spans, which the writer removes once they are in the log.
func (s *Service) settleStages(batch []certifying) {
	for i := range batch {
		c := &batch[i]
		if c.staged.Spool == "" {
			continue
		}
		committed := c.reply == nil && c.stageProblem == "" && c.outcome.Decision == certification.Commit && !c.outcome.Duplicate
		if !committed {
			s.staging.discard(txnOf(c.req.Txn))
		}
	}
}
