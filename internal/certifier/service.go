package certifier

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// ErrStopped is returned to waiters once the service has stopped or failed.
var ErrStopped = errors.New("certifier stopped")

// Service certifies, logs and delivers. Create it with Open; serve it with
// RegisterGRPC; stop it with Close.
type Service struct {
	pb.UnimplementedCertifierServer

	cfg Config
	log *wal.Log

	mu      sync.Mutex // guards state, recent, pending, wake
	state   *certification.State
	recent  *recentEntries
	pending []logentry.Entry // certified, not yet handed to the writer
	wake    chan struct{}    // signalled when pending becomes non-empty

	durable  *watermark
	inFlight atomic.Int64
	stats    *stats
	metrics  *metrics
	flow     *flowControl
	replicas *knownReplicas

	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
	failure  atomic.Pointer[error]

	// Certifier group only (group.go): nil group for a single certifier.
	group      *certgroup.Node
	leadership leadership
	confirmed  *watermark // abort tickets confirmed by the group

	stages    *stageLog // nil unless TASHKENT_CERTIFIER_STAGES (stagelog.go)
	stopTrace func()
	// streams counts the Certify handlers running: a reply's stages are
	// recorded once its send returns, which may be after the client has
	// it, so Close lets them end before it writes the stage log.
	streams atomic.Int64
}

// Open recovers the log in cfg.DataDir and starts the writer.
func Open(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	// In a group the Raft log is the durable one; the versioned log is
	// rebuilt from it after a crash (the group replays it on start), so it
	// is written without fsync, except before the Raft log is compacted
	// (Callbacks.BeforeCompact: wal.SyncAll).
	log, err := wal.Open(wal.Options{Dir: cfg.DataDir, SegmentBytes: cfg.SegmentBytes, Logger: cfg.Logger, NoSync: cfg.NoSync || cfg.Group != nil, SyncDelay: cfg.SyncDelay})
	if err != nil {
		return nil, fmt.Errorf("open certifier log: %w", err)
	}
	s := &Service{
		cfg:      cfg,
		log:      log,
		recent:   newRecentEntries(cfg.RecentEntriesMax),
		wake:     make(chan struct{}, 1),
		durable:  newWatermark(log.LastVersion()),
		stats:    newStats(),
		replicas: newKnownReplicas(time.Now),
		stop:     make(chan struct{}),
		group:    cfg.Group,
		stages:   openStageLog(),
	}
	s.stopTrace = startTrace()
	restored, err := s.restore()
	if err != nil {
		log.Close()
		return nil, err
	}
	s.metrics = newMetrics(s, cfg.Registry)
	s.flow = newFlowControl(s.metrics)
	cfg.Logger.Info("certifier log recovered",
		"first_version", log.FirstVersion(), "last_version", log.LastVersion(),
		"restored_into_index", restored, "low_water_mark", s.state.LowWaterMark(),
		"took", time.Since(started).Round(time.Millisecond))
	if s.group != nil {
		s.startGroup()
		s.done.Add(1)
		go s.sampleLoop()
		return s, nil
	}
	s.done.Add(2)
	go s.writeLoop()
	go s.sampleLoop()
	return s, nil
}

// restore replays the last window of the log into a fresh state machine and
// the recent-entries ring.
func (s *Service) restore() (int, error) {
	last := s.log.LastVersion()
	base := uint64(0)
	if first := s.log.FirstVersion(); first > 0 {
		base = first - 1
	}
	if last > s.cfg.WindowVersions && last-s.cfg.WindowVersions > base {
		base = last - s.cfg.WindowVersions
	}
	s.state = certification.New(certification.Config{WindowVersions: s.cfg.WindowVersions,
		UnsafeSkipConflictCheck: s.cfg.UnsafeSkipConflictCheck}, base)
	restored := 0
	err := s.log.ReadFrom(base, func(e wal.Entry) error {
		entry, err := decodeEntry(e)
		if err != nil {
			return err
		}
		keys, err := KeysOf(entry.Writeset)
		if err != nil {
			return fmt.Errorf("log entry %d: %w", e.Version, err)
		}
		if s.group == nil { // a group's state is the group's (certgroup.Core)
			s.state.Restore(entry.Version, txnOf(entry.Txn), keys)
		}
		s.recent.add(logentry.Entry{Version: e.Version, Bytes: e.Payload})
		restored++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("restore certification state from the log: %w", err)
	}
	return restored, nil
}

func decodeEntry(e wal.Entry) (*pb.LogEntry, error) {
	entry, err := logentry.Decode(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("log entry %d: %w", e.Version, err)
	}
	if entry.Version != e.Version {
		// The checksum matched, so this is a bug, not a disk fault.
		panic(fmt.Sprintf("certifier: log record %d holds entry %d", e.Version, entry.Version))
	}
	return entry, nil
}

// A stream's message is certified in three steps, so that the critical
// section is entered once per message rather than once per request (the
// streams' receivers contend for it; at saturation the lock hand-offs cost
// more than the state machine): prepare reads the keys and encodes the log
// entry, outside the lock; decideAll runs the state machine for the whole
// message under one lock; answer builds each reply. The writeset stays
// encoded (CertifyRequestEncoded): its keys are read from the bytes and the
// bytes go into the log entry as they came, the only copy made.

// certifying is one request on its way through the three steps.
type certifying struct {
	req        *pb.CertifyRequestEncoded
	overloaded bool
	reply      *pb.CertifyReply // set early for a request refused before the state machine
	request    certification.Request
	prefix     logentry.Prefix
	// Set by decideAll.
	outcome              certification.Outcome
	lowWaterMark, latest uint64
	committedBefore      uint64 // overloaded: the version the transaction committed at, 0 if none
}

// prepare checks a request's limits, reads its keys and encodes its log
// entry; a request refused here gets its reply at once.
func (s *Service) prepare(req *pb.CertifyRequestEncoded, overloaded bool) certifying {
	c := certifying{req: req, overloaded: overloaded}
	if overloaded {
		return c
	}
	refuse := func(reason pb.AbortReason, detail string) certifying {
		s.stats.aborts.Add(1)
		c.reply = abortReply(&pb.CertifyReply{RequestId: req.RequestId, Txn: req.Txn}, reason, detail)
		return c
	}
	if detail := s.checkEncodedBytes(req); detail != "" {
		return refuse(pb.AbortReason_ABORT_REASON_LIMIT, detail)
	}
	// The state keeps the keys (its window): a slice of their own.
	keys, err := keysOfEncoded(make([]certification.Key, 0, keysCapacityGuess), req.Writeset)
	if n := len(keys); n > s.cfg.Limits.WritesetKeysMax {
		return refuse(pb.AbortReason_ABORT_REASON_LIMIT,
			fmt.Sprintf("writeset has %d rows, over the limit of %d (writeset keys max)", n, s.cfg.Limits.WritesetKeysMax))
	}
	if err != nil || req.Txn == nil || req.Txn.Origin == "" {
		if err == nil {
			err = errors.New("missing transaction id")
		}
		return refuse(pb.AbortReason_ABORT_REASON_INVALID, err.Error())
	}
	c.prefix = logentry.EncodePrefixOfEncoded(req.Txn, req.Writeset)
	if len(c.prefix)+logentry.VersionBytesMax > wal.EntryBytesMax {
		return refuse(pb.AbortReason_ABORT_REASON_LIMIT,
			fmt.Sprintf("the log entry would be %d bytes, over the log's limit of %d", len(c.prefix), wal.EntryBytesMax))
	}
	c.request = certification.Request{Txn: txnOf(req.Txn), StartVersion: req.StartVersion, Keys: keys}
	return c
}

// decideAll runs the state machine for every prepared request, in order,
// under one lock, and queues the new commits for the writer.
func (s *Service) decideAll(batch []certifying) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wasEmpty := len(s.pending) == 0
	for i := range batch {
		c := &batch[i]
		switch {
		case c.reply != nil:
		case c.overloaded:
			c.committedBefore, _ = s.state.CommittedVersion(txnOf(c.req.Txn))
		default:
			c.outcome = s.state.Certify(c.request)
			if c.outcome.Decision == certification.Commit && !c.outcome.Duplicate {
				entry := c.prefix.WithVersion(c.outcome.CommitVersion)
				s.recent.add(entry)
				s.pending = append(s.pending, entry)
			}
			c.lowWaterMark, c.latest = s.state.LowWaterMark(), s.state.Version()
		}
	}
	if wasEmpty && len(s.pending) > 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// answer builds a request's reply; on commit it must wait until durable
// reaches waitFor.
func (s *Service) answer(c *certifying) (reply *pb.CertifyReply, waitFor uint64) {
	if c.reply != nil {
		return c.reply, 0
	}
	reply = &pb.CertifyReply{RequestId: c.req.RequestId, Txn: c.req.Txn}
	if c.overloaded {
		return s.overloadedReply(reply, c.committedBefore), c.committedBefore
	}
	s.stats.certifications.Add(1)
	if c.outcome.Decision == certification.Commit {
		reply.Decision = pb.Decision_DECISION_COMMIT
		reply.CommitVersion = c.outcome.CommitVersion
		return reply, c.outcome.CommitVersion
	}
	s.stats.aborts.Add(1)
	reply.ConflictVersion = c.outcome.ConflictVersion
	return abortReply(reply, reasonOf(c.outcome.Reason), describeEncodedAbort(c.req, c.outcome, c.lowWaterMark, c.latest)), 0
}

// keysCapacityGuess sizes a request's key slice: most writesets are small.
const keysCapacityGuess = 8

// overloadedReply answers a request over the in-flight limit: aborted,
// unless its transaction already committed (at committed, non-zero), which
// gets its version back.
func (s *Service) overloadedReply(reply *pb.CertifyReply, committed uint64) *pb.CertifyReply {
	if committed != 0 {
		reply.Decision, reply.CommitVersion = pb.Decision_DECISION_COMMIT, committed
		return reply
	}
	s.stats.aborts.Add(1)
	return abortReply(reply, pb.AbortReason_ABORT_REASON_OVERLOADED,
		fmt.Sprintf("certifier overloaded: more requests in flight than the limit of %d (in-flight requests max); retry", s.cfg.Limits.InFlightRequestsMax))
}

// checkEncodedBytes is checkLimits' size limit for an encoded writeset:
// its size is its length, as proto.Size of the decoded one. It comes
// before the keys are read, so an oversized writeset is not parsed.
func (s *Service) checkEncodedBytes(req *pb.CertifyRequestEncoded) string {
	if n, limit := len(req.Writeset), s.cfg.Limits.WritesetBytesMax; n > limit {
		return fmt.Sprintf("writeset is %d bytes, over the limit of %d (writeset bytes max)", n, limit)
	}
	return ""
}

// describeEncodedAbort is describeAbort for an encoded request: a conflict
// names the change, so only then is the writeset decoded.
func describeEncodedAbort(req *pb.CertifyRequestEncoded, o certification.Outcome, lowWaterMark, current uint64) string {
	decoded, err := decodedRequest(req)
	if err != nil { // keysOfEncoded read it: cannot happen
		return err.Error()
	}
	return describeAbort(decoded, o, lowWaterMark, current)
}

func (s *Service) checkLimits(req *pb.CertifyRequest) string {
	l := s.cfg.Limits
	if n := len(req.Writeset.GetChanges()); n > l.WritesetKeysMax {
		return fmt.Sprintf("writeset has %d rows, over the limit of %d (writeset keys max)", n, l.WritesetKeysMax)
	}
	if n := proto.Size(req.Writeset); n > l.WritesetBytesMax {
		return fmt.Sprintf("writeset is %d bytes, over the limit of %d (writeset bytes max)", n, l.WritesetBytesMax)
	}
	return ""
}

func abortReply(r *pb.CertifyReply, reason pb.AbortReason, detail string) *pb.CertifyReply {
	r.Decision = pb.Decision_DECISION_ABORT
	r.AbortReason = reason
	r.Detail = detail
	return r
}

func reasonOf(r certification.Reason) pb.AbortReason {
	switch r {
	case certification.ReasonConflict:
		return pb.AbortReason_ABORT_REASON_CONFLICT
	case certification.ReasonTooOld:
		return pb.AbortReason_ABORT_REASON_TOO_OLD
	case certification.ReasonReferenceConflict:
		return pb.AbortReason_ABORT_REASON_REFERENCE_CONFLICT
	default:
		return pb.AbortReason_ABORT_REASON_INVALID
	}
}

func describeAbort(req *pb.CertifyRequest, o certification.Outcome, lowWaterMark, current uint64) string {
	switch o.Reason {
	case certification.ReasonConflict:
		return fmt.Sprintf("write-write conflict on %s with the transaction committed at version %d, after this transaction's snapshot (version %d)",
			describeChange(req.Writeset.Changes[o.ConflictIndex]), o.ConflictVersion, req.StartVersion)
	case certification.ReasonReferenceConflict:
		return describeReferenceConflict(req.Writeset.Changes[o.ConflictIndex], o.ConflictVersion, req.StartVersion)
	case certification.ReasonTooOld:
		return fmt.Sprintf("snapshot version %d is older than the certifier's low-water mark %d: the transaction ran too long to be certified",
			req.StartVersion, lowWaterMark)
	default:
		return fmt.Sprintf("invalid request: snapshot version %d, certifier version %d", req.StartVersion, current)
	}
}

// syncsInFlightMax is how many group commits may be in flight at once
// (wal.Pending). With 2, the next batch is written, and its fsync started,
// while the previous fsync runs, so at moderate load a request waits for
// about one fsync instead of up to two. It is 1: after a power loss with
// two batches in flight, the later may be on disk without the earlier, and
// the log's recovery, which never guesses, then refuses to start (a defect
// followed by valid records reads as corruption; internal/wal/doc.go)
// until an operator steps in. Both batches were unacknowledged, but
// recovery cannot tell that from damage to acknowledged entries. Raising
// it needs a log format that records batch boundaries so that recovery
// can; the gain measured was within the noise (docs/BENCHMARKS.md).
const syncsInFlightMax = 1

// writeLoop is the single writer: it takes everything certified since the
// last write and makes it durable with one write and one fsync, up to
// syncsInFlightMax of them overlapping (wal/pipeline.go). The durable
// version advances only once a batch and every batch before it are on
// stable storage: no reply is sent earlier.
//
// With one group commit in flight (syncsInFlightMax = 1) the writer waits
// for the fsync itself: a goroutine per batch and a slot to hand back
// would only add two scheduling hops to every batch's path, on cores the
// certifier shares with its clients.
func (s *Service) writeLoop() {
	defer s.done.Done()
	var syncs sync.WaitGroup
	defer syncs.Wait() // Close closes the log only after the last fsync
	slots := make(chan struct{}, syncsInFlightMax)
	var batch []logentry.Entry
	var records []wal.Entry
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
		select {
		case slots <- struct{}{}: // meanwhile more requests join the batch
		case <-s.stop:
			return
		}
		s.mu.Lock()
		batch, s.pending = s.pending, batch[:0]
		s.mu.Unlock()
		if len(batch) == 0 {
			<-slots
			continue
		}
		records = records[:0]
		for _, e := range batch {
			records = append(records, wal.Entry{Version: e.Version, Payload: e.Bytes})
		}
		first, last, n := batch[0].Version, batch[len(batch)-1].Version, len(batch)
		var zeroedBefore uint64
		if s.stages != nil {
			zeroedBefore = s.log.Stats().ZeroedChunks
		}
		started := time.Now()
		p, err := s.log.Write(records)
		written := time.Now()
		if err != nil {
			<-slots
			s.fail(fmt.Errorf("log write of versions %d..%d: %w", first, last, err))
			return
		}
		commit := func() {
			defer func() { <-slots }()
			s.awaitDurable(p, first, last, n, started)
			if s.stages != nil {
				s.stages.batch(batchStages{first: first, last: last, writeStart: unixNano(started), written: unixNano(written), durable: time.Now().UnixNano(),
					zeroedBefore: zeroedBefore, zeroedAfter: s.log.Stats().ZeroedChunks})
			}
		}
		if syncsInFlightMax == 1 {
			commit()
			// The streams just woken by the durable version are queued on
			// this goroutine's P; the next batch's fsync would hold that P
			// (a blocking system call keeps it until sysmon takes it back)
			// and their replies with it, unless the other core is free to
			// steal them. Let them send first: the next fsync starts a few
			// tens of microseconds later, the replies an fsync earlier.
			runtime.Gosched()
		} else {
			syncs.Add(1)
			go func() {
				defer syncs.Done()
				commit()
			}()
		}
		clear(batch)
		// More may have arrived while this batch was written.
		s.mu.Lock()
		more := len(s.pending) > 0
		s.mu.Unlock()
		if more {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// awaitDurable waits for one group commit and advances the durable
// version past it.
func (s *Service) awaitDurable(p *wal.Pending, first, last uint64, n int, started time.Time) {
	if err := p.Wait(); err != nil {
		s.fail(fmt.Errorf("log append of versions %d..%d: %w", first, last, err))
		return
	}
	s.stats.recordFsync(n, time.Since(started))
	s.metrics.observeFsync(n)
	s.durable.advance(last)
}

// fail stops the service after a log failure: no reply may be sent for an
// entry whose durability is unknown.
func (s *Service) fail(err error) {
	s.failure.CompareAndSwap(nil, &err)
	s.cfg.Logger.Error("certifier log failed; the certifier stops serving and must be restarted", "err", err)
	s.durable.fail(fmt.Errorf("%w: %v", ErrStopped, err))
	s.stopOnce.Do(func() { close(s.stop) })
}

// Err reports why the service failed, if it did.
func (s *Service) Err() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Failed is closed when the service stops, by Close or by a failure.
func (s *Service) Failed() <-chan struct{} { return s.stop }

// Close stops the writer and closes the log. Streams still open end with
// Unavailable.
func (s *Service) Close() error {
	s.durable.fail(ErrStopped)
	s.stopOnce.Do(func() { close(s.stop) })
	s.done.Wait()
	s.stopTrace()
	if s.stages != nil {
		waitForNone(&s.streams, stageLogStreamsWait)
		if err := s.stages.write(); err != nil {
			s.cfg.Logger.Error("write the stage log", "path", s.stages.path, "err", err)
		}
	}
	if s.group != nil {
		if err := s.group.Close(); err != nil {
			s.cfg.Logger.Error("close the certifier group's raft log", "err", err)
		}
		s.leadership.lost()
	}
	return s.log.Close()
}

// DurableVersion is the highest version on stable storage.
func (s *Service) DurableVersion() uint64 { return s.durable.get() }

// Version is the highest version assigned (durable or not).
func (s *Service) Version() uint64 {
	v, _ := s.versions()
	return v
}

// versions returns the highest version certified and the low-water mark,
// of the group's state when in a group.
func (s *Service) versions() (version, lowWaterMark uint64) {
	if s.group != nil {
		return s.group.Versions()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Version(), s.state.LowWaterMark()
}

// entriesBetween returns the encoded durable entries (after, upTo], from
// memory when it still has them, else from the log.
func (s *Service) entriesBetween(dst [][]byte, after, upTo uint64) ([][]byte, error) {
	s.mu.Lock()
	dst, ok := s.recent.between(dst, after, upTo)
	s.mu.Unlock()
	if ok {
		return dst, nil
	}
	errDone := errors.New("done")
	err := s.log.ReadFrom(after, func(e wal.Entry) error {
		if e.Version > upTo {
			return errDone
		}
		dst = append(dst, e.Payload)
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return dst, err
	}
	return dst, nil
}

func pid() int64 { return int64(os.Getpid()) }

// describeChange names a change for an error message: the table and the
// primary key as the replica encoded it.
func describeChange(c *pb.Change) string {
	switch c.Op {
	case pb.Op_OP_UPSERT, pb.Op_OP_DELETE:
		return fmt.Sprintf("table %s row %s", c.Table, truncate(string(c.Key), 200))
	case pb.Op_OP_UNIQUE_KEY:
		return fmt.Sprintf("unique index %s value %s", c.Table, truncate(string(c.Key), 200))
	case pb.Op_OP_REFERENCE:
		return fmt.Sprintf("the row referenced through a foreign key, %s key %s", c.Table, truncate(string(c.Key), 200))
	case pb.Op_OP_DELETE_ROW:
		return fmt.Sprintf("table %s row %s (the whole row: the table has no primary key)", c.Table, truncate(string(c.Key), 200))
	case pb.Op_OP_INSERT_ROW:
		return "table " + c.Table + " (rows inserted)"
	case pb.Op_OP_TRUNCATE:
		return "table " + c.Table + " (TRUNCATE)"
	case pb.Op_OP_DDL:
		if c.Table != "" {
			return "table " + c.Table + " (DDL)"
		}
		return "the schema (DDL)"
	}
	return c.Op.String()
}

// describeReferenceConflict says which side of a foreign key met a
// concurrent change: the request's reference a write committed after its
// snapshot, or the request's write a reference committed after it.
func describeReferenceConflict(c *pb.Change, conflictVersion, start uint64) string {
	if c.Op == pb.Op_OP_REFERENCE {
		return fmt.Sprintf("this transaction references (foreign key) %s key %s, which the transaction committed at version %d changed or deleted after this transaction's snapshot (version %d)",
			c.Table, truncate(string(c.Key), 200), conflictVersion, start)
	}
	return fmt.Sprintf("this transaction changed %s, which the transaction committed at version %d references through a foreign key; it committed after this transaction's snapshot (version %d)",
		describeChange(c), conflictVersion, start)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
