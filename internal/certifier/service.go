package certifier

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
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

	cfg   Config
	log   *wal.Log // the versioned log: what delivery and Fetch read
	runs  *logRuns // its epochs (epochs.go)
	order orderer  // a single log or a group member (orderer.go)

	mu     sync.Mutex // guards recent
	recent *recentEntries

	durable *watermark
	// deliverable: the versions streams that take entries early may be
	// sent, beyond durable (early.go).
	deliverable *watermark
	// earlyStreams counts the streams that take entries early: decide
	// advances deliverable only while there is one (early.go).
	earlyStreams atomic.Int32
	oneThread    sync.Once // warnOneThread
	// earlySent: the highest version sent to a replica before it was
	// durable, as an entry or a commit reply (early.go); SyncVersion
	// covers it.
	earlySent *watermark
	inFlight  atomic.Int64
	stats     *stats
	metrics   *metrics
	flow      *flowControl
	replicas  *knownReplicas
	// started is when this process started; retention the last log
	// retention decision taken or applied (retention_service.go).
	started   time.Time
	retention atomic.Pointer[pb.LogRetention]

	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
	failure  atomic.Pointer[error]

	// staging holds streamed writesets until they are in the log, or
	// refused (stage.go).
	staging *stagingArea

	stages    *stageLog // nil unless TASHKENT_CERTIFIER_STAGES (stagelog.go)
	stopTrace func()
	// streams counts the Certify handlers running: a reply's stages are
	// recorded once its send returns, which may be after the client has
	// it, so Close lets them end before it writes the stage log.
	streams atomic.Int64
}

// predecessorExitWaitMax bounds how long Open waits for the log's lock: a
// certifier restarted right after a kill -9 finds its predecessor still
// exiting while the kernel finishes the writes it was in.
const predecessorExitWaitMax = 30 * time.Second

// Open recovers the log in cfg.DataDir and starts the writer.
func Open(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	log, err := wal.Open(wal.Options{Dir: cfg.DataDir, SegmentBytes: cfg.SegmentBytes, Logger: cfg.Logger,
		NoSync: cfg.NoSync || !syncsVersionedLog(cfg), SyncDelay: cfg.SyncDelay, LockWait: predecessorExitWaitMax})
	if err != nil {
		return nil, fmt.Errorf("open certifier log: %w", err)
	}
	staging, err := openStaging(cfg, log)
	if err != nil {
		log.Close()
		return nil, err
	}
	runs, err := scanLogRuns(log)
	if err == nil {
		err = restoreLogStart(cfg.DataDir, log, runs)
	}
	if err != nil {
		log.Close()
		return nil, err
	}
	s := &Service{
		cfg:         cfg,
		log:         log,
		runs:        runs,
		recent:      newRecentEntries(cfg.RecentEntriesMax),
		durable:     newWatermark(log.LastVersion()),
		deliverable: newWatermark(log.LastVersion()),
		earlySent:   newWatermark(0),
		stats:       newStats(),
		replicas:    newKnownReplicas(time.Now),
		started:     started,
		stop:        make(chan struct{}),
		staging:     staging,
		stages:      openStageLog(),
	}
	order, restored, err := newOrderer(s)
	if err != nil {
		log.Close()
		return nil, err
	}
	s.order = order
	s.stopTrace = startTrace()
	s.metrics = newMetrics(s, cfg.Registry)
	s.flow = newFlowControl(s.metrics)
	_, lowWaterMark := s.versions()
	cfg.Logger.Info("certifier log recovered",
		"first_version", log.FirstVersion(), "last_version", log.LastVersion(),
		"restored_into_index", restored, "low_water_mark", lowWaterMark,
		"took", time.Since(started).Round(time.Millisecond))
	s.order.start()
	s.done.Add(2)
	go s.sampleLoop()
	go s.retentionLoop()
	return s, nil
}

// A stream's message is certified in three steps, so that the critical
// section is entered once per message rather than once per request (the
// streams' receivers contend for it; at saturation the lock hand-offs cost
// more than the state machine): prepare reads the keys and encodes the log
// entry, outside the lock; the orderer's decide runs the state machine for
// the whole message under one lock; answer builds each reply. The writeset stays
// encoded (CertifyRequestEncoded): its keys are read from the bytes and the
// bytes go into the log entry as they came, the only copy made.

// certifying is one request on its way through the three steps.
type certifying struct {
	req        *pb.CertifyRequestEncoded
	overloaded bool
	reply      *pb.CertifyReply // set early for a request refused before the state machine
	request    certification.Request
	prefix     logentry.Prefix
	// Set by orderer.decide.
	outcome              certification.Outcome
	lowWaterMark, latest uint64
	committedBefore      uint64 // overloaded: the version the transaction committed at, 0 if none
	firstBefore          uint64 // overloaded: the first version of its span
	ticket, tenure       uint64 // a group's: see queued
	// A streamed request's (prepareStreamed): the stage it claimed (Spool
	// empty: none), or why it has none that matches.
	staged       StagedWriteset
	stageProblem string
	notStaged    bool // stageProblem: nothing staged at all
	// barrier: the request writes a whole table or the schema (TRUNCATE,
	// DDL), so its entry is delivered only once durable (early.go).
	barrier bool
}

// prepare checks a request's limits, reads its keys and encodes its log
// entry (prepareRequest); a request refused here gets its reply at once.
func (s *Service) prepare(req *pb.CertifyRequestEncoded, overloaded bool) certifying {
	c := prepareRequest(req, overloaded, s.cfg.Limits)
	if c.reply != nil {
		s.stats.aborts.Add(1)
	}
	return c
}

// answer builds a request's reply (replyTo) and counts it; on commit it
// must wait until durable reaches waitFor.
func (s *Service) answer(c *certifying) (reply *pb.CertifyReply, waitFor uint64) {
	refused := c.reply != nil // counted by prepare
	reply, waitFor = replyTo(c, s.cfg.Limits.InFlightRequestsMax)
	if refused {
		return reply, waitFor
	}
	if !c.overloaded {
		s.stats.certifications.Add(1)
	}
	if reply.Decision != pb.Decision_DECISION_COMMIT {
		s.stats.aborts.Add(1)
	}
	return reply, waitFor
}

// keysCapacityGuess sizes a request's key slice: most writesets are small.
const keysCapacityGuess = 8

// describeEncodedAbort is describeAbort for an encoded request: a conflict
// names the change, so only then is the writeset decoded.
func describeEncodedAbort(req *pb.CertifyRequestEncoded, o certification.Outcome, lowWaterMark, current uint64) string {
	decoded, err := decodedRequest(req)
	if err != nil { // keysOfEncoded read it: cannot happen
		return err.Error()
	}
	return describeAbort(decoded, o, lowWaterMark, current)
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
	s.order.close()
	return s.log.Close()
}

// DurableVersion is the highest version on stable storage.
func (s *Service) DurableVersion() uint64 { return s.durable.get() }

// Version is the highest version assigned (durable or not).
func (s *Service) Version() uint64 {
	v, _ := s.versions()
	return v
}

// versions returns the highest version certified and the low-water mark.
func (s *Service) versions() (version, lowWaterMark uint64) { return s.order.versions() }

// entriesBetween returns the encoded durable entries (after, upTo], from
// memory when it still has them, else from the log.
func (s *Service) entriesBetween(dst [][]byte, after, upTo uint64) ([][]byte, error) {
	return s.entriesUpToBytes(dst, after, upTo, 0)
}

// entriesUpToBytes is entriesBetween, but read from the log it stops
// after the entry that brings what it read to maxBytes (0: no bound):
// what is still in memory costs nothing more to hand out.
func (s *Service) entriesUpToBytes(dst [][]byte, after, upTo uint64, maxBytes int) ([][]byte, error) {
	s.mu.Lock()
	dst, ok := s.recent.between(dst, after, upTo)
	s.mu.Unlock()
	if ok {
		return dst, nil
	}
	errDone := errors.New("done")
	read := 0
	err := s.log.ReadFrom(after, func(e wal.Entry) error {
		if e.Version > upTo || (maxBytes > 0 && read >= maxBytes) {
			return errDone
		}
		dst = append(dst, e.Payload)
		read += len(e.Payload)
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
	case pb.Op_OP_TABLE_WRITE:
		return "table " + c.Table + " (the whole table: a streamed transaction's rows)"
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
