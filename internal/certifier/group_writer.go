package certifier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// A group member's versioned log is written in commit order by one writer
// goroutine, not in the Node's Raft loop, where the callbacks run: a
// span's copy (up to gigabytes) would stop the loop, and the member's
// heartbeats and votes with it. A batch of committed entries without a
// span head that arrives while the writer is idle is still appended in the
// loop, at once (the common case costs what it did); anything else is
// queued behind what the writer has, and so are the snapshot restarts and
// retention decisions that reach the versioned log, so that it sees all
// of them in commit order.
//
// A span head (certgroup.Applied.Committed: one entry at the span's last
// version) is written as its entries first..last, from this member's
// stage (copySpan, as the single certifier does), or, without a complete
// stage (the member was down or dropped from the copy, restarted, or
// installed a snapshot), fetched from another member's versioned log
// (Fetch; a member serves it once its own writer wrote it). The head
// carries the fragments' size and checksum (LogEntry.span_bytes,
// span_checksum): a stage whose own differ (anyone who reaches a member
// can send it a StageCopy) is not copied but fetched, and a fetched span
// that does not match is cut and fetched from another member. The log is
// then synced once, and only then do the durable version move to the
// span's last version and the stage go: the Raft log holds the head
// only, so this is the member's durable copy of the fragments.

// logWriter is the queue of a member's versioned-log writer.
type logWriter struct {
	mu    sync.Mutex
	queue []func() bool // in commit order; false: the service failed
	busy  bool          // the goroutine runs tasks taken from queue
	wake  chan struct{}
}

func newLogWriter() *logWriter {
	return &logWriter{wake: make(chan struct{}, 1)}
}

// submit runs task in commit order: at once, on the caller's goroutine,
// if inline and nothing is queued or running; otherwise on the writer's.
// Called from one goroutine (the Raft loop), so an idle writer stays idle
// while an inline task runs.
func (w *logWriter) submit(task func() bool, inline bool) {
	w.mu.Lock()
	if inline && !w.busy && len(w.queue) == 0 {
		w.mu.Unlock()
		task()
		return
	}
	w.queue = append(w.queue, task)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is the writer goroutine, until stop or a task fails.
func (w *logWriter) run(stop <-chan struct{}) {
	for {
		w.mu.Lock()
		tasks := w.queue
		w.queue = nil
		w.busy = len(tasks) > 0
		w.mu.Unlock()
		if len(tasks) == 0 {
			select {
			case <-w.wake:
			case <-stop:
				return
			}
			continue
		}
		for _, task := range tasks {
			if !task() {
				return
			}
		}
	}
}

// idle reports whether everything submitted so far is written. The Raft
// loop, the only submitter, cannot submit while it asks.
func (w *logWriter) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.busy && len(w.queue) == 0
}

// committed is Callbacks.Committed: versions the group committed go to
// the recent ring and the versioned log (which serve delivery and Fetch),
// then to the durable watermark, which releases the replies waiting for
// them. After a restart the group replays its log after its snapshot:
// versions the versioned log already has are skipped (group_snapshot.go
// for a versioned log behind the snapshot).
func (g *groupMember) committed(entries []logentry.Entry) {
	if !hasSpanHead(entries) {
		g.writer.submit(func() bool { return g.appendEntries(entries) }, true)
		return
	}
	g.writer.submit(func() bool { return g.writeCommitted(entries) }, false)
}

func hasSpanHead(entries []logentry.Entry) bool {
	for _, e := range entries {
		if isSpanHead(e) {
			return true
		}
	}
	return false
}

// isSpanHead: in a group, the only span entry Committed reports is a head.
func isSpanHead(e logentry.Entry) bool {
	h, err := logentry.RawHeaderOf(e.Bytes)
	return err == nil && h.InSpan()
}

// writeCommitted writes entries in order: the runs between span heads as
// they are, each head as its span.
func (g *groupMember) writeCommitted(entries []logentry.Entry) bool {
	for len(entries) > 0 {
		n := 0
		for n < len(entries) && !isSpanHead(entries[n]) {
			n++
		}
		if n > 0 && !g.appendEntries(entries[:n]) {
			return false
		}
		entries = entries[n:]
		if len(entries) > 0 {
			if !g.writeSpan(entries[0]) {
				return false
			}
			entries = entries[1:]
		}
	}
	return true
}

// appendEntries appends committed entries of their own to the recent ring
// and the versioned log (not synced: the Raft log is their durable copy)
// and advances the durable version past them.
func (g *groupMember) appendEntries(entries []logentry.Entry) bool {
	s := g.s
	last := s.log.LastVersion()
	records := make([]wal.Entry, 0, len(entries))
	s.mu.Lock()
	for _, e := range entries {
		if e.Version <= last {
			continue
		}
		g.early.ringCommitted = e.Version
		s.recent.replace(e) // a leader may hold it, or another entry at its version (group_early.go)
		records = append(records, wal.Entry{Version: e.Version, Payload: e.Bytes})
	}
	s.mu.Unlock()
	if len(records) == 0 {
		return true
	}
	if err := s.runs.noteEntries(entries[len(entries)-len(records):]); err != nil {
		s.fail(fmt.Errorf("read the epochs of versions %d..%d: %w", records[0].Version, records[len(records)-1].Version, err))
		return false
	}
	if err := s.log.Append(records); err != nil {
		s.fail(fmt.Errorf("versioned log append of versions %d..%d: %w", records[0].Version, records[len(records)-1].Version, err))
		return false
	}
	syncs, synced := g.node.FsyncStats()
	s.stats.fsyncs.Store(syncs)
	s.stats.loggedEntries.Store(synced)
	s.durable.advance(records[len(records)-1].Version)
	g.deliverPassed()
	return true
}

// writeSpan writes the span a committed head stands for into the
// versioned log (see the comment at the top of this file).
func (g *groupMember) writeSpan(head logentry.Entry) bool {
	s := g.s
	e, err := logentry.ParseSpanEntry(head.Bytes)
	if err != nil || e.Version != e.Last || e.Txn == nil {
		s.fail(fmt.Errorf("the committed span head at version %d does not read (%v)", head.Version, err))
		return false
	}
	sp := committedSpan{first: e.First, last: e.Last, txn: e.Txn, certified: e.Certified, bytes: e.SpanBytes, checksum: e.SpanChecksum, epoch: e.Epoch}
	if s.log.LastVersion() >= sp.last { // written before a restart: its stage, if kept, goes
		// Its run is the log's, which the scan at start recorded.
		g.spanWritten(sp)
		return true
	}
	if !g.cutPartialSpan(sp) {
		return false
	}
	err = g.copyOwnStage(sp)
	if errors.Is(err, ErrStopped) {
		return false
	}
	if err != nil {
		if !g.cutPartialSpan(sp) || !g.fetchSpan(sp, err) {
			return false
		}
	}
	if err := s.log.SyncAll(); err != nil {
		s.fail(fmt.Errorf("sync the versioned log after span %d..%d: %w", sp.first, sp.last, err))
		return false
	}
	s.runs.note(sp.epoch, sp.first)
	g.spanWritten(sp)
	return true
}

// spanWritten: the span is durable here; the ring holds none of it (a
// hole), and what it holds after it is this member's speculation until
// the committed path finds it (group_early.go).
func (g *groupMember) spanWritten(sp committedSpan) {
	g.s.mu.Lock()
	g.early.ringCommitted = sp.last
	g.s.mu.Unlock()
	g.s.spanWritten(sp)
	g.deliverPassed()
}

// cutPartialSpan removes what an attempt that did not finish wrote of sp.
func (g *groupMember) cutPartialSpan(sp committedSpan) bool {
	s := g.s
	if s.log.LastVersion() < sp.first {
		return true
	}
	if err := s.log.TruncateAfter(sp.first - 1); err != nil {
		s.fail(fmt.Errorf("cut the partial copy of span %d..%d: %w", sp.first, sp.last, err))
		return false
	}
	return true
}

// errNoStage: this member holds no complete stage that matches a
// committed span.
var errNoStage = errors.New("this member holds no complete stage of the span")

// copyOwnStage copies sp from this member's stage of it; ErrStopped if
// the service stopped, another error if it has to be fetched.
func (g *groupMember) copyOwnStage(sp committedSpan) error {
	s := g.s
	staged, ok := s.staging.take(txnOf(sp.txn))
	if !ok {
		return errNoStage
	}
	if err := sp.checkStage(staged); err != nil {
		s.cfg.Logger.Warn("certifier group: this member's copy of a committed span does not match the span's head; fetching the span from another member",
			"member", g.node.ID(), "span_first", sp.first, "span_last", sp.last, "origin", sp.txn.GetOrigin(), "seq", sp.txn.GetSeq(), "err", err)
		return err
	}
	sp.spool = staged.Spool
	err := copySpan(sp, s.stop, s.log.Append)
	if err != nil && !errors.Is(err, ErrStopped) {
		s.cfg.Logger.Warn("certifier group: could not copy a committed span from this member's stage", "span_first", sp.first, "span_last", sp.last, "err", err)
	}
	return err
}

// checkStage reports how staged differs from sp's fragments (count, and
// the size and checksum its head carries, if it carries them).
func (sp committedSpan) checkStage(staged StagedWriteset) error {
	return sp.checkFragments(uint64(staged.Fragments), staged.Bytes, staged.Checksum)
}

// checkFragments reports how fragments of bytes, with checksum, differ
// from sp's. A head without a size (encoded without one) is checked on the
// count only.
func (sp committedSpan) checkFragments(fragments, bytes uint64, checksum uint32) error {
	if want := sp.last - sp.first + 1; fragments != want {
		return fmt.Errorf("%d fragments, the span has %d", fragments, want)
	}
	if sp.bytes != 0 && (bytes != sp.bytes || checksum != sp.checksum) {
		return fmt.Errorf("%d bytes with checksum %#08x, the span's head says %d bytes with checksum %#08x", bytes, checksum, sp.bytes, sp.checksum)
	}
	return nil
}

// Fetching a span from other members: each round asks every other member
// in turn, from the version this member has up to; a round in which none
// had the span (their writers may not have written it yet) is followed by
// a pause, doubled each round up to spanFetchRetryMax.
const (
	spanFetchRetryMin = 100 * time.Millisecond
	spanFetchRetryMax = 2 * time.Second
)

// fetchSpan appends sp's entries fetched from other members' versioned
// logs, entry by entry as they arrive (one Fetch message in memory at a
// time), until it has them all and they match sp's head; false if the
// service stopped. A fetch that breaks off is resumed from another member;
// a span that does not match its head is cut and fetched again.
func (g *groupMember) fetchSpan(sp committedSpan, why error) bool {
	s := g.s
	log := s.cfg.Logger.With("member", g.node.ID(), "span_first", sp.first, "span_last", sp.last, "origin", sp.txn.GetOrigin(), "seq", sp.txn.GetSeq())
	log.Info("certifier group: fetching a committed span from the other members' versioned logs", "reason", why)
	fetched := fetchedSpan{through: sp.first - 1}
	pause := spanFetchRetryMin
	defer g.missing.set(0, 0)
	for {
		for id, addr := range g.node.Members() {
			if id == g.node.ID() {
				continue
			}
			err := g.fetchSpanFrom(addr, sp, &fetched)
			if err == nil {
				log.Info("certifier group: fetched the committed span", "from_member", id)
				return true
			}
			if s.Err() != nil || errors.Is(err, ErrStopped) {
				return false
			}
			var mismatch spanMismatchError
			if !errors.As(err, &mismatch) {
				log.Debug("certifier group: a member did not serve the span", "from_member", id, "err", err)
				continue
			}
			log.Warn("certifier group: the span fetched from a member does not match the span's head; cut, fetching it from another member",
				"from_member", id, "err", err)
			if !g.cutPartialSpan(sp) {
				return false
			}
			fetched = fetchedSpan{through: sp.first - 1}
		}
		g.missing.set(sp.first, sp.last)
		log.Warn("certifier group: no member serves this committed span, and this member holds no stage of it; "+
			"versions from span_first on are not durable here until one does: bring back a member that holds it (its stage or the span in its log)",
			"retry_in", pause)
		select {
		case <-time.After(pause):
		case <-s.stop:
			return false
		}
		pause = min(2*pause, spanFetchRetryMax)
	}
}

// missingSpan is the committed span a member's writer waits for, having
// asked every other member for it in vain (Status, metrics).
type missingSpan struct {
	mu          sync.Mutex
	first, last uint64 // 0, 0: none
}

func (m *missingSpan) set(first, last uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.first, m.last = first, last
}

func (m *missingSpan) get() (first, last uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.first, m.last
}

// fetchedSpan is what this member appended so far of a span it fetches:
// the versions up to through, their fragments' size and checksum.
type fetchedSpan struct {
	through  uint64
	bytes    uint64
	checksum uint32
}

// spanMismatchError: a whole fetched span differs from its head.
type spanMismatchError struct{ err error }

func (e spanMismatchError) Error() string { return "fetched span: " + e.err.Error() }

// fetchSpanFrom fetches from one member what this member lacks of sp,
// appending it as it arrives, and checks the whole span against its head
// once it has it (spanMismatchError).
func (g *groupMember) fetchSpanFrom(addr string, sp committedSpan, fetched *fetchedSpan) error {
	client, err := g.peers.client(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(g.stopped)
	defer cancel()
	stream, err := client.Fetch(ctx, &pb.FetchRequest{AfterVersion: fetched.through})
	if err != nil {
		return err
	}
	for fetched.through < sp.last {
		reply, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the member holds versions up to %d only", fetched.through)
		}
		if err != nil {
			if g.stopped.Err() != nil {
				return ErrStopped
			}
			return err
		}
		if err := g.appendFetched(reply.Entries, sp, fetched); err != nil {
			return err
		}
	}
	if err := sp.checkFragments(sp.last-sp.first+1, fetched.bytes, fetched.checksum); err != nil {
		return spanMismatchError{err}
	}
	return nil
}

// appendFetched checks and appends the entries of sp a Fetch reply holds
// (any after sp.last are left), counting their fragments into fetched.
func (g *groupMember) appendFetched(entries [][]byte, sp committedSpan, fetched *fetchedSpan) error {
	records := make([]wal.Entry, 0, len(entries))
	for _, b := range entries {
		v := fetched.through + 1
		if v > sp.last {
			break
		}
		fragment, err := checkFetchedSpanEntry(b, v, sp)
		if err != nil {
			return err
		}
		fetched.through, fetched.bytes = v, fetched.bytes+uint64(len(fragment))
		fetched.checksum = logentry.SpanChecksum(fetched.checksum, fragment)
		records = append(records, wal.Entry{Version: v, Payload: b})
	}
	if len(records) == 0 {
		return nil
	}
	if err := g.s.log.Append(records); err != nil {
		g.s.fail(fmt.Errorf("versioned log append of fetched versions %d..%d: %w", records[0].Version, fetched.through, err))
		return ErrStopped
	}
	return nil
}

// checkFetchedSpanEntry checks that a fetched entry is version v of sp, its
// last entry with the head's certified writeset, size and checksum, and
// returns its fragment.
func checkFetchedSpanEntry(b []byte, v uint64, sp committedSpan) ([]byte, error) {
	e, err := logentry.ParseSpanEntry(b)
	if err != nil {
		return nil, fmt.Errorf("fetched version %d: %w", v, err)
	}
	if e.Version != v || e.First != sp.first || e.Last != sp.last || e.Txn.GetOrigin() != sp.txn.GetOrigin() || e.Txn.GetSeq() != sp.txn.GetSeq() || e.Epoch != sp.epoch {
		return nil, fmt.Errorf("fetched entry %d of span %d..%d of %s/%d in epoch %d, want version %d of span %d..%d of %s/%d in epoch %d",
			e.Version, e.First, e.Last, e.Txn.GetOrigin(), e.Txn.GetSeq(), e.Epoch, v, sp.first, sp.last, sp.txn.GetOrigin(), sp.txn.GetSeq(), sp.epoch)
	}
	if v == sp.last && (!bytes.Equal(e.Certified, sp.certified) || e.SpanBytes != sp.bytes || e.SpanChecksum != sp.checksum) {
		return nil, spanMismatchError{fmt.Errorf("its last entry %d carries another certified writeset, size or checksum than the span's head", v)}
	}
	return e.Fragment, nil
}
