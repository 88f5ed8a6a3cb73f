package certifier

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// An orderer is what decides the order of certified entries and makes them
// durable. A Service has one, chosen by Config.Group when it opens:
//
//   - singleLog (single.go): this process alone. It certifies in its own
//     state, in memory, and a writer goroutine makes what it certified
//     durable in the versioned log, one write and one fsync per batch.
//   - groupMember (group.go): one member of a certifier group. The state is
//     the group's (certgroup.Core, replicated by Raft), the leader
//     certifies, and a version is durable once Raft committed it; every
//     member then appends it to its versioned log.
//
// Either way a durable entry is in the recent ring and the versioned log
// before the durable watermark passes it, so delivery (stream.go) and
// Fetch read one log whatever orders it. orderer_contract_test.go runs the
// same contract against both.
//
// The service calls start once, after the orderer recovered; close once,
// after the service's goroutines ended. The other methods are called from
// any goroutine, concurrently.
type orderer interface {
	start()
	close()

	// admit lets a Certify stream start, before its session is checked.
	// It returns the context the stream lives in, which ends when this
	// process can no longer answer for what it decides, and the tenure
	// that context belongs to (mayDeliver), or the error to end the stream
	// with (a group member that does not lead names the leader in the
	// stream's trailer). It waits, within a bound, until this process
	// holds the version the replica opens at.
	admit(stream grpc.ServerStream, open *pb.OpenSession) (context.Context, uint64, error)

	// mayDeliver refuses a message of a stream admitted in an earlier
	// tenure (a group member's lost leadership): once it is lost, the
	// durable version and the entries this member holds may be another
	// leader's, and its stream's replica may hold versions that failed.
	// Called just before each message is sent, after it was made.
	mayDeliver(tenure uint64) error

	// sentEarly records that a stream of tenure sent entries up to
	// through before they were durable: syncVersion covers them.
	sentEarly(tenure, through uint64)

	// decide takes the decisions for a message's prepared requests, in
	// order, filling each one's outcome (a request already answered by
	// prepare is passed over). It returns how many requests from the start
	// of batch it decided: on an error the stream ends once those are
	// answered. A commit's version follows every version decided before
	// it; it is not durable yet.
	decide(ctx context.Context, batch []certifying) (int, error)

	// maySend holds replies whose dependencies are durable until they may
	// go out; an error ends the stream with them unsent (a group leader
	// that lost its leadership meanwhile).
	maySend(ctx context.Context, ready []queued) error

	// versions are the highest version certified and the low-water mark.
	versions() (version, lowWaterMark uint64)

	// syncVersion is a durable version at least as high as every version
	// acknowledged before the call (SyncVersion, tashkent.sync_wait).
	syncVersion(ctx context.Context) (uint64, error)

	// checkFetch refuses a Fetch after a version this process cannot serve
	// from (gRPC status error), naming where to go instead.
	checkFetch(after uint64) error

	// describe fills in this orderer's part of a Status reply: its role,
	// and a group member's view of the group.
	describe(r *pb.StatusReply)

	// certifyingEpoch is the epoch this process certifies in and the
	// first version it may certify in it (CertifyStreamReply.epoch): on a
	// group member, once it leads and has applied its whole log.
	certifyingEpoch(ctx context.Context) (epoch, firstVersion uint64, err error)

	// certifies reports whether this process certifies now (a single
	// certifier always, a group member while it leads) and the group's
	// term (0 for a single certifier).
	certifies() (leads bool, term uint64)

	// admitStage lets a Stage start (a group member that does not lead
	// refuses, naming the leader in the stream's trailer); copyStage
	// starts the copies of its fragments to other members (nil: none);
	// admitStageCopy lets a StageCopy start (only a group member takes
	// one, and only from its leader). group_stage.go.
	admitStage(stream grpc.ServerStream) error
	copyStage(txn *pb.TxnID) *stageCopies
	admitStageCopy(ctx context.Context) error
	// discardCopies tells the members a stage was copied to that it is
	// over without a commit (best effort, in the background).
	discardCopies(txn *pb.TxnID)
	// missingSpanVersions is the size of the committed span this member
	// cannot write yet: no stage of it here, no member serves it.
	missingSpanVersions() uint64

	// retain runs the log retention rule at now (retention.go): a single
	// certifier applies its decision to its log; a group's leader
	// replicates it, and every member applies it as Raft commits it.
	// Called from one goroutine.
	retain(now time.Time)
}

// newOrderer recovers the orderer that the service's Config asks for from
// its log, and returns it with the number of entries it read back.
func newOrderer(s *Service) (orderer, int, error) {
	if s.cfg.Group != nil {
		return newGroupMember(s, s.cfg.Group)
	}
	return newSingleLog(s)
}

// syncsVersionedLog reports whether the orderer cfg asks for makes the
// versioned log durable itself. A single log does. In a group the Raft log
// is the durable one; the versioned log is rebuilt from it after a crash
// (the group replays it on start), so it is written without fsync, except
// before the Raft log is compacted (Callbacks.BeforeCompact: wal.SyncAll)
// and after a span, whose fragments the Raft log does not hold
// (group_writer.go).
func syncsVersionedLog(cfg Config) bool { return cfg.Group == nil }

// windowBase is the version after which the log's last window starts: the
// versions (base, last] are what recovery restores.
func (s *Service) windowBase() uint64 {
	return WindowBase(s.log.FirstVersion(), s.log.LastVersion(), s.cfg.WindowVersions)
}

// replay reads the log back from after base into the recent ring, calling
// restore (when not nil) with every transaction and its keys: an entry of
// its own, or a span at its last entry (with the keys it was certified
// on; its other entries are not read further). It returns how many
// entries it read. It runs in Open, before anything else touches the
// ring, which spans are not put in (span.go).
func (s *Service) replay(base uint64, restore func(h logentry.RawHeader, txn certification.TxnID, keys []certification.Key)) (int, error) {
	restored := 0
	err := s.log.ReadFrom(base, func(e wal.Entry) error {
		restored++
		h, err := logentry.RawHeaderOf(e.Payload)
		if err != nil {
			return fmt.Errorf("log entry %d: %w", e.Version, err)
		}
		if h.Version != e.Version {
			// The checksum matched, so this is a bug, not a disk fault.
			panic(fmt.Sprintf("certifier: log record %d holds entry %d", e.Version, h.Version))
		}
		if h.InSpan() {
			if h.Version != h.SpanLast {
				return nil
			}
		} else {
			s.recent.add(logentry.Entry{Version: e.Version, Bytes: e.Payload}, e.Version)
		}
		txn, keys, err := GroupEntryKeys(e.Payload)
		if err != nil {
			return fmt.Errorf("log entry %d: %w", e.Version, err)
		}
		if restore != nil {
			restore(h, txn, keys)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("restore certification state from the log: %w", err)
	}
	return restored, nil
}
