package certifier

import (
	"errors"
	"fmt"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// Spans: a streamed transaction commits as the versions first..last, one
// log entry per staged fragment (LogEntry.span_first, span_last; the last
// entry also carries the writeset it was certified on). The writer copies
// them from the stage into the log a few fragments at a time (copySpan:
// the single certifier's writeSpan, a group member's writer in
// group_writer.go), and the durable version moves from first-1 to last at
// once, never inside a span: no reply, delivery or Fetch reads a span
// before all of it is on disk. Spans are not kept in the recent ring (a
// fragment is up to --writeset-bytes-max): delivery reads them from the
// log, in chunks, like any entry older than the ring.

// openStaging cuts an incomplete span from the log's tail (a crash during
// its copy: a single certifier told nobody it committed; a group member
// writes it again when it applies the commit again) and opens the staging
// area: a single certifier drops the spool files of the last run, a group
// member keeps the complete ones (stage_keep.go).
func openStaging(cfg Config, log *wal.Log) (*stagingArea, error) {
	if err := cutIncompleteSpan(cfg, log); err != nil {
		return nil, err
	}
	if cfg.Group != nil {
		return openKeptStagingArea(cfg.DataDir, cfg.StageBytesMax, cfg.Logger)
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
	cfg.Logger.Warn("certifier log: removed the incomplete span of a streamed transaction at its end (a crash during its copy)",
		"span_first", h.SpanFirst, "span_last", h.SpanLast, "entries_removed", last-h.SpanFirst+1, "last_version", log.LastVersion())
	return nil
}

// spanBatchBytes is how much of a span the writer appends with one sync:
// a couple of fragments, so that a span costs a sync per 8 MiB, not per
// fragment, while what is in memory stays small (the batch's buffer is
// kept from one batch to the next).
const spanBatchBytes = 8 << 20

// writeSpan copies a committed span from its spool file into the log,
// each batch appended and synced in turn (copySpan), then advances the
// durable version to its last version and removes the spool file; false
// if it failed, which stops the service.
func (l *singleLog) writeSpan(sp committedSpan) bool {
	s := l.s
	err := copySpan(sp, s.stop, l.appendSpanBatch)
	if errors.Is(err, ErrStopped) {
		// Closing: the span's entries written so far are cut at the next
		// start, and nobody was told it committed.
		return false
	}
	if err != nil {
		s.fail(err)
		return false
	}
	s.runs.note(sp.epoch, sp.first)
	s.spanWritten(sp)
	return true
}

// copySpan copies a committed span from its spool file (sp.spool) to the
// log through appendBatch, a few fragments (entries) in memory at a time,
// a batch of about spanBatchBytes per call. It returns ErrStopped if stop
// closes first.
func copySpan(sp committedSpan, stop <-chan struct{}, appendBatch func([]wal.Entry) error) error {
	spool, err := openSpool(sp.spool)
	if err != nil {
		return fmt.Errorf("open the stage of versions %d..%d: %w", sp.first, sp.last, err)
	}
	defer spool.close()
	var buf []byte // the batch's entries, one after the other
	var ends []int // where each ends in buf
	var batch []wal.Entry
	for v := sp.first; v <= sp.last; v++ {
		select {
		case <-stop:
			return ErrStopped
		default:
		}
		fragment, err := spool.next()
		if err != nil {
			return fmt.Errorf("copy the stage of versions %d..%d into the log: %w", sp.first, sp.last, err)
		}
		buf = logentry.AppendSpanEntry(buf, logentry.SpanEntry{Version: v, Txn: sp.txn, Fragment: fragment,
			First: sp.first, Last: sp.last, Certified: sp.certified, SpanBytes: sp.bytes, SpanChecksum: sp.checksum, Epoch: sp.epoch})
		ends = append(ends, len(buf))
		if len(buf) >= spanBatchBytes || v == sp.last {
			// Sliced once the batch is whole: appending may have moved buf.
			batch = batch[:0]
			start := 0
			for i, end := range ends {
				batch = append(batch, wal.Entry{Version: v - uint64(len(ends)-1-i), Payload: buf[start:end]})
				start = end
			}
			if err := appendBatch(batch); err != nil {
				return fmt.Errorf("log append of versions %d..%d (span %d..%d): %w", batch[0].Version, v, sp.first, sp.last, err)
			}
			buf, ends = buf[:0], ends[:0]
		}
	}
	return nil
}

// spanWritten makes a span whose entries are all in the log durable: the
// durable version moves to its last version, and its stage goes. The
// recent ring holds none of its versions.
func (s *Service) spanWritten(sp committedSpan) {
	s.durable.advance(sp.last)
	s.staging.discard(txnOf(sp.txn))
}

// appendSpanBatch appends and syncs some of a span's entries.
func (l *singleLog) appendSpanBatch(batch []wal.Entry) error {
	s := l.s
	started := time.Now()
	if err := s.log.Append(batch); err != nil {
		return err
	}
	s.stats.recordFsync(len(batch), time.Since(started))
	s.metrics.observeFsync(len(batch))
	return nil
}

// settleStages settles the stages a batch claimed once decide decided
// the first decided of its requests: a new commit's stays claimed for the
// writer, which removes it once it is in the log; an aborted or refused
// request's is removed, and so are its copies on the other members of a
// group. A request not decided (a group member that
// stopped leading), or a retry of a transaction that committed earlier (a
// group member's writer may still need its stage), gives it back.
func (s *Service) settleStages(batch []certifying, decided int) {
	now := time.Now()
	for i := range batch {
		c := &batch[i]
		if c.staged.Spool == "" {
			continue
		}
		txn := txnOf(c.req.Txn)
		switch {
		case i >= decided:
			s.staging.release(txn, now)
		case c.reply != nil:
			s.discardStage(c.req.Txn)
		case c.outcome.Duplicate || c.committedBefore != 0:
			s.staging.release(txn, now)
		case c.outcome.Decision == certification.Commit && !c.overloaded:
			// A new commit: the writer's.
		default:
			s.discardStage(c.req.Txn)
		}
	}
}

// discardStage removes the stage of a transaction that will not commit
// from it, here and on the members it was copied to.
func (s *Service) discardStage(txn *pb.TxnID) {
	s.staging.discard(txnOf(txn))
	s.order.discardCopies(txn)
}
